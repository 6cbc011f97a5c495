package callseq

import (
	"math/rand/v2"

	"github.com/cmrt/cmrt/id"
	"github.com/cmrt/cmrt/id/journal"
)

// Chooser is where the generator's decisions come from: a seeded PRNG
// (NewRand), a fuzzer's bytes or rapid's generators.
type Chooser interface {
	// Intn returns a number in [0, n); n > 0.
	Intn(n int) int
}

// Rand is a Chooser over a seeded PCG: the same seed gives the same
// decisions.
type Rand struct{ r *rand.Rand }

// NewRand returns a Chooser seeded with seed and stream.
func NewRand(seed, stream uint64) *Rand {
	return &Rand{r: rand.New(rand.NewPCG(seed, stream))}
}

// Intn implements Chooser.
func (r *Rand) Intn(n int) int {
	if n <= 1 {
		return 0
	}
	return r.r.IntN(n)
}

// Mode selects what a generated sequence may do.
type Mode uint8

// Modes.
const (
	// ModeIWARP is for an iWARP device under test (siw): RC ids only, no
	// multicast. An iWARP CM needs a QP to connect or accept, so the ids
	// that connect are mostly peers (Op.Peer): ids of a fabric that has
	// QPs, which play the active side against the listeners under test.
	ModeIWARP Mode = iota
	// ModeIB is for an InfiniBand or RoCE device (rxe): RC and UD ids,
	// SIDR, multicast joins.
	ModeIB
)

// Config bounds a generated sequence.
type Config struct {
	Mode Mode
	// MaxOps is the length of the sequence (default 16).
	MaxOps int
	// MaxSlots bounds how many ids a sequence makes, created or born
	// from requests (default 6).
	MaxSlots int
}

// simSlot is the generator's picture of one id: what it expects the id's
// state to be if every call and connection goes the usual way.
type simSlot struct {
	live    bool
	ps      id.PortSpace
	qp      id.QPType
	ch      int
	peer    bool
	st      id.State
	addr    AddrKind // bound address
	port    int      // bound port index (0: none or any)
	dstAddr AddrKind
	dstPort int
	listen  int   // listening on this port index (0: none or unknown)
	pending []int // a synchronous listener's requests not yet taken: their clients
	partner int   // the other end of its connection, or -1
	joined  [NumGroups]bool
	reuse   bool
	role    role
}

// role is what the generator has an id do, mostly.
type role uint8

const (
	roleAny    role = iota // whatever ProgressCalls says
	roleServer             // bind, listen
	roleClient             // resolve, connect
)

type gen struct {
	c     Chooser
	cfg   Config
	seq   Seq
	slots []*simSlot
	last  int // the slot of the last operation
}

// Generate draws a sequence from c. It simulates the model (journal.CallAllowed,
// journal.AfterEvent) with every connection going the usual way, so that most
// calls are ones a program would make at that point, and some are not:
// calls the model refuses, destroys at any point, requests to ports
// nobody listens on, addresses that do not answer, private data over the
// limits.
func Generate(c Chooser, cfg Config) Seq {
	if cfg.MaxOps <= 0 {
		cfg.MaxOps = 16
	}
	if cfg.MaxSlots <= 0 {
		cfg.MaxSlots = 6
	}
	g := &gen{c: c, cfg: cfg}
	for tries := 0; len(g.seq) < cfg.MaxOps && tries < 20*cfg.MaxOps; tries++ {
		g.step()
	}
	if g.n(2) == 0 {
		g.probe()
	}
	return g.seq
}

// ProbeCalls are the calls a probe may make: those the fabric's endpoint
// takes (not the library's own: create, migrate, set_option, leave,
// get_request, destroy).
var ProbeCalls = []journal.Call{journal.CallBind, journal.CallResolveAddr, journal.CallResolveRoute, journal.CallListen, journal.CallConnect,
	journal.CallAccept, journal.CallReject, journal.CallEstablish, journal.CallDisconnect, journal.CallNotify, journal.CallJoin}

// probe appends a probe of a call the model refuses to a live id under
// test, if there is one.
func (g *gen) probe() {
	var live []int
	for _, k := range g.live() {
		if !g.slots[k].peer {
			live = append(live, k)
		}
	}
	if len(live) == 0 {
		return
	}
	k := live[g.n(len(live))]
	s := g.slots[k]
	var refused []journal.Call
	for _, c := range ProbeCalls {
		if _, ok := journal.CallAllowed(s.st, c, s.qp); !ok && !(c == journal.CallJoin && (s.qp != id.UD || g.cfg.Mode != ModeIB)) {
			refused = append(refused, c)
		}
	}
	if len(refused) == 0 {
		return
	}
	c := refused[g.n(len(refused))]
	op := Op{Call: c, Slot: k, Probe: true}
	switch c {
	case journal.CallBind:
		op.Addr, op.Port = Local, 0
	case journal.CallResolveAddr:
		op.Addr, op.Port = g.target(k)
	case journal.CallJoin:
		op.Group = g.n(NumGroups)
	}
	g.emit(op)
}

func (g *gen) n(k int) int { return g.c.Intn(k) }

func (g *gen) live() []int {
	var out []int
	for k, s := range g.slots {
		if s.live {
			out = append(out, k)
		}
	}
	return out
}

func (g *gen) emit(op Op) { g.seq = append(g.seq, op); g.last = op.Slot }

func (g *gen) step() {
	live := g.live()
	r := g.n(100)
	switch {
	case len(g.slots) < g.cfg.MaxSlots && (len(live) == 0 || (r < 16 && len(live) < 4)):
		g.create()
	case len(live) == 0:
		return
	case r < 20:
		g.destroy(live[g.n(len(live))])
	case r < 28:
		g.anyCall(live[g.n(len(live))])
	default:
		var cand []int
		for _, k := range live {
			if len(g.progress(k)) > 0 {
				cand = append(cand, k)
			}
		}
		if len(cand) == 0 {
			if len(g.slots) < g.cfg.MaxSlots {
				g.create()
			}
			return
		}
		k := cand[g.n(len(cand))]
		if len(g.progress(g.last)) > 0 && g.slots[g.last].live && g.n(3) != 0 {
			k = g.last // mostly carry on with the same id
		}
		p := g.progress(k)
		g.call(k, p[g.n(len(p))])
	}
}

func (g *gen) create() {
	op := Op{Call: journal.CallCreate, Slot: len(g.slots), PS: id.PSTCP, Chan: g.n(2)}
	if g.n(4) == 0 {
		op.Chan = ChanSync
	}
	r := roleAny
	switch x := g.n(10); {
	case !g.anyListener() && x < 8:
		r = roleServer
	case x < 7:
		r = roleClient
	}
	switch g.cfg.Mode {
	case ModeIWARP:
		// Peers connect to the listeners under test.
		op.Peer = r == roleClient
	case ModeIB:
		if g.n(3) == 0 {
			op.PS = id.PSUDP
			if l := g.listenerPS(); l != 0 && g.n(4) != 0 {
				op.PS = l // mostly one a listener can answer
			}
		} else if l := g.listenerPS(); l != 0 && r == roleClient && g.n(4) != 0 {
			op.PS = l
		}
	}
	g.emit(op)
	s := &simSlot{live: true, ps: op.PS, qp: op.PS.DefaultQPType(), ch: op.Chan, peer: op.Peer, partner: -1, role: r}
	g.slots = append(g.slots, s)
}

// listenerPS returns the port space of a listener under test, or 0.
func (g *gen) listenerPS() id.PortSpace {
	var ps []id.PortSpace
	for _, s := range g.slots {
		if s.live && !s.peer && (s.st == id.StateListen || s.role == roleServer) {
			ps = append(ps, s.ps)
		}
	}
	if len(ps) == 0 {
		return 0
	}
	return ps[g.n(len(ps))]
}

func (g *gen) anyListener() bool {
	for _, s := range g.slots {
		if s.live && s.st == id.StateListen && !s.peer {
			return true
		}
	}
	return false
}

// progress returns the calls that move slot k along, as its role allows.
func (g *gen) progress(k int) []journal.Call {
	s := g.slots[k]
	var out []journal.Call
	calls := ProgressCalls(s.st)
	switch {
	case s.role == roleServer && s.st == id.StateIdle:
		calls = []journal.Call{journal.CallBind, journal.CallBind, journal.CallBind, journal.CallBind, journal.CallBind, journal.CallListen}
	case s.role == roleServer && s.st == id.StateAddrBound:
		calls = []journal.Call{journal.CallListen}
	case s.role == roleClient && (s.st == id.StateIdle || s.st == id.StateAddrBound):
		calls = []journal.Call{journal.CallResolveAddr}
	case s.st == id.StateConnectRequest && g.cfg.Mode == ModeIWARP && !s.peer:
		// An iWARP id under test cannot accept without a QP either: the
		// kernel refuses, the sequence ends there.
		calls = []journal.Call{journal.CallAccept, journal.CallReject, journal.CallReject}
	}
	for _, c := range calls {
		switch {
		case c == journal.CallJoin && (s.qp != id.UD || g.cfg.Mode != ModeIB):
		case c == journal.CallListen && s.peer:
		case c == journal.CallBind && s.peer:
		case c == journal.CallConnect && g.cfg.Mode == ModeIWARP && !s.peer:
			// An iWARP id under test cannot connect without a QP (anyCall
			// tries now and then).
		case c == journal.CallGetRequest && (s.ch != ChanSync || len(s.pending) == 0):
		case c == journal.CallEstablish:
			// The drivers complete CONNECT_RESPONSE themselves.
		default:
			out = append(out, c)
		}
	}
	if s.qp == id.UD && g.cfg.Mode == ModeIB && (s.st == id.StateAddrBound || s.st == id.StateAddrResolved || s.st == id.StateRouteResolved) {
		for gi := range s.joined {
			if s.joined[gi] {
				out = append(out, journal.CallLeave)
			}
		}
	}
	return out
}

var anyCalls = [...]journal.Call{journal.CallBind, journal.CallResolveAddr, journal.CallResolveRoute, journal.CallListen, journal.CallConnect,
	journal.CallAccept, journal.CallReject, journal.CallEstablish, journal.CallDisconnect, journal.CallSetOption, journal.CallSetOption,
	journal.CallSetOption, journal.CallMigrate, journal.CallMigrate, journal.CallNotify, journal.CallJoin, journal.CallLeave}

// anyCall makes a call the model may refuse in the slot's state.
func (g *gen) anyCall(k int) {
	s := g.slots[k]
	c := anyCalls[g.n(len(anyCalls))]
	switch {
	case (c == journal.CallJoin || c == journal.CallLeave) && g.cfg.Mode != ModeIB:
		c = journal.CallSetOption
	case c == journal.CallConnect && g.cfg.Mode == ModeIWARP && !s.peer && g.n(4) != 0:
		c = journal.CallMigrate
	case (c == journal.CallListen || c == journal.CallBind) && s.peer:
		c = journal.CallSetOption
	case s.ch == ChanSync && Blocks(c, s.st, s.qp):
		// A synchronous id's call the model refuses fails at once; one it
		// allows waits, and is better made where it progresses.
		if _, ok := journal.CallAllowed(s.st, c, s.qp); ok {
			c = journal.CallSetOption
		}
	}
	g.call(k, c)
}

// freePort picks a port index to bind or listen on: mostly one no other id
// holds.
func (g *gen) freePort(ps id.PortSpace) int {
	if g.n(8) == 0 {
		return g.n(NumPorts)
	}
	for _, p := range []int{1 + g.n(NumPorts-1), 1, 2, 3} {
		used := false
		for _, s := range g.slots {
			if s.live && s.ps == ps && s.port == p {
				used = true
			}
		}
		if !used {
			return p
		}
	}
	return 0
}

// target picks a destination: mostly a listener's port.
func (g *gen) target(k int) (AddrKind, int) {
	s := g.slots[k]
	switch g.n(12) {
	case 0:
		return Unreachable, 1 + g.n(NumPorts-1)
	case 1:
		return Unroutable, 1 + g.n(NumPorts-1)
	case 2:
		return Local, 1 + g.n(NumPorts-1)
	}
	var ports []int
	for j, l := range g.slots {
		if j != k && l.live && l.listen > 0 && l.ps == s.ps && !l.peer {
			ports = append(ports, l.listen)
		}
	}
	if len(ports) > 0 {
		return Local, ports[g.n(len(ports))]
	}
	return Local, 1 + g.n(NumPorts-1)
}

func pdFor(c journal.Call, qp id.QPType, r int) int {
	limit := MaxPrivateData(c, qp)
	switch r {
	case 0:
		return limit
	case 1:
		return limit + 1
	case 2, 3:
		return 0
	}
	return 1 + r%16
}

// call emits call c on slot k with arguments drawn for it, and folds its
// usual outcome into the simulation.
func (g *gen) call(k int, c journal.Call) {
	s := g.slots[k]
	op := Op{Call: c, Slot: k}
	switch c {
	case journal.CallBind:
		op.Addr, op.Port = Local, g.freePort(s.ps)
		switch g.n(10) {
		case 0:
			op.Addr = Wildcard
		case 1:
			op.Addr = NonLocal
		}
	case journal.CallResolveAddr:
		op.Addr, op.Port = g.target(k)
		op.Src = g.n(6) == 0
	case journal.CallListen:
		op.Backlog = [...]int{0, 1, 8, -1}[g.n(4)]
	case journal.CallConnect, journal.CallAccept, journal.CallReject:
		op.PD = pdFor(c, s.qp, g.n(10))
	case journal.CallSetOption:
		op.Opt = OptKind(g.n(int(numOpts)))
		if op.Opt == OptIBPath && g.n(2) == 0 {
			op.Opt = OptTOS
		}
	case journal.CallMigrate:
		op.Chan = g.n(3)
		if op.Chan == ChanSync && g.n(2) == 0 {
			op.Chan = 1 - min(s.ch, 1)
		}
	case journal.CallJoin:
		op.Group = g.n(NumGroups)
		op.SendOnly = g.n(4) == 0
	case journal.CallLeave:
		op.Group = g.n(NumGroups)
		for gi, j := range s.joined {
			if j && g.n(4) != 0 {
				op.Group = gi
			}
		}
	}
	g.emit(op)
	g.fold(k, op)
}

func (g *gen) destroy(k int) {
	g.emit(Op{Call: journal.CallDestroy, Slot: k})
	g.fold(k, Op{Call: journal.CallDestroy, Slot: k})
}

// fold moves the simulation as the call usually goes.
func (g *gen) fold(k int, op Op) {
	s := g.slots[k]
	next, ok := journal.CallAllowed(s.st, op.Call, s.qp)
	if !ok {
		return
	}
	switch {
	case (op.Call == journal.CallConnect || op.Call == journal.CallAccept || op.Call == journal.CallReject) &&
		op.PD > MaxPrivateData(op.Call, s.qp):
		return // EINVAL
	case op.Call == journal.CallJoin && s.qp != id.UD:
		return
	}
	switch op.Call {
	case journal.CallBind:
		if op.Addr == NonLocal {
			return
		}
		for _, o := range g.slots {
			if o != s && o.live && o.ps == s.ps && o.port == op.Port && op.Port != 0 && !(o.reuse && s.reuse) {
				return // EADDRINUSE
			}
		}
		s.addr, s.port = op.Addr, op.Port
	case journal.CallResolveAddr:
		s.dstAddr, s.dstPort = op.Addr, op.Port
		if op.Addr == Unroutable {
			next = id.StateAddrBound
		} else {
			next = id.StateAddrResolved
		}
	case journal.CallResolveRoute:
		next = id.StateRouteResolved
	case journal.CallListen:
		s.listen = s.port
	case journal.CallConnect:
		next = g.connect(k)
	case journal.CallAccept:
		if p := s.partner; p >= 0 && g.slots[p].live && g.slots[p].st == id.StateConnect {
			g.slots[p].st = id.StateEstablished
		}
		next = id.StateEstablished
	case journal.CallReject:
		if p := s.partner; p >= 0 && g.slots[p].live && g.slots[p].st == id.StateConnect {
			g.slots[p].st = id.StateFailed
		}
	case journal.CallDisconnect:
		// A UD id has no connection to end: nothing is reported.
		if s.qp == id.RC && (s.st == id.StateEstablished || s.st == id.StateAccept) {
			next = id.StateDisconnected
			if p := s.partner; p >= 0 && g.slots[p].live && g.slots[p].st == id.StateEstablished {
				g.slots[p].st = id.StateDisconnected
			}
		}
	case journal.CallSetOption:
		switch op.Opt {
		case OptReuseOn:
			s.reuse = s.st == id.StateIdle || s.reuse
		case OptReuseOff:
			if s.st == id.StateIdle {
				s.reuse = false
			}
		}
	case journal.CallMigrate:
		s.ch = op.Chan
	case journal.CallJoin:
		s.joined[op.Group] = true
	case journal.CallLeave:
		s.joined[op.Group] = false
	case journal.CallGetRequest:
		if len(s.pending) > 0 {
			c := s.pending[0]
			s.pending = s.pending[1:]
			g.child(k, c, id.StateConnectRequest, ChanSync)
		}
	case journal.CallDestroy:
		s.live = false
		if p := s.partner; p >= 0 && g.slots[p].live {
			switch g.slots[p].st {
			case id.StateEstablished:
				g.slots[p].st = id.StateDisconnected
			case id.StateConnect:
				g.slots[p].st = id.StateFailed
			}
		}
	}
	s.st = next
}

// connect simulates slot k's connect: a request to the listener on its
// destination port, or a reject when nobody listens there.
func (g *gen) connect(k int) id.State {
	s := g.slots[k]
	if s.dstAddr != Local {
		return id.StateConnect // nothing answers
	}
	for j, l := range g.slots {
		if j == k || !l.live || l.st != id.StateListen || l.ps != s.ps || l.listen != s.dstPort || l.peer {
			continue
		}
		if l.ch == ChanSync {
			l.pending = append(l.pending, k)
			return id.StateConnect
		}
		g.child(j, k, id.StateConnectRequest, l.ch)
		return id.StateConnect
	}
	return id.StateFailed // rejected: no listener
}

// child adds the id a request makes on listener l from client c.
func (g *gen) child(l, c int, st id.State, ch int) {
	ls := g.slots[l]
	s := &simSlot{live: true, ps: ls.ps, qp: ls.qp, ch: ch, st: st, partner: c}
	g.slots = append(g.slots, s)
	if c >= 0 && g.slots[c].live {
		g.slots[c].partner = len(g.slots) - 1
	}
}
