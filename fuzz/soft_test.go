package fuzz

import (
	"context"
	"net/netip"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/cmrt/cmrt/channel"
	"github.com/cmrt/cmrt/fabric/soft"
	"github.com/cmrt/cmrt/handlers"
	"github.com/cmrt/cmrt/id"
	"github.com/cmrt/cmrt/internal/faultproxy"
	"github.com/cmrt/cmrt/reactor"
)

// The software fabric's timeouts in these runs: short, so that faults end
// in an outcome quickly.
const (
	softConnectTimeout = 400 * time.Millisecond
	softRequestTimeout = 400 * time.Millisecond
	softLinger         = 100 * time.Millisecond
	softSIDRTimeout    = 40 * time.Millisecond
	softSIDRRetries    = 2
	// softOutcome bounds how long a connect may take to end, whatever the
	// faults: the connect timeout (or the SIDR retries) plus the proxy's
	// delays, with room for a loaded machine.
	softOutcome = 4 * time.Second
)

// What the server does with a connection request.
const (
	srvAccept = iota
	srvReject
	srvIgnore         // never answer: the client times out
	srvDestroyChild   // destroy the new id instead of answering
	srvDestroyListen  // destroy the listener, during the connect
	srvAcceptThenDisc // accept, then disconnect at once
	numSrvPolicies
)

// softClient is one connecting id and what its run does to it.
type softClient struct {
	cm        *id.ID
	destroyAt time.Duration // destroy during the connect, after this (0: never)
	discSide  int           // once established: 0 none, 1 client, 2 server disconnects
	sends     int           // messages the client sends once established (RC)

	mu       sync.Mutex
	events   []id.EventType
	outcome  chan struct{} // closed at the connect's outcome
	ended    bool
	peer     *id.ID // the server's id for this connection, if known
	mr       id.MR
	buf      []byte
	connects bool // Connect succeeded
}

// softRun is one scenario over the software fabric through a fault proxy.
type softRun struct {
	t     T
	c     chooser
	ud    bool
	f     *soft.Fabric
	rec   *recorder
	r     *reactor.Reactor
	srvCh *channel.Channel
	cliCh *channel.Channel
	lis   *id.ID
	tcp   *faultproxy.TCP
	udp   *faultproxy.UDP
	plan  [4][2][8]faultproxy.Action // by connection, direction, unit index

	mu       sync.Mutex
	clients  []*softClient
	byID     map[*id.ID]*softClient
	children []*id.ID
	srvPol   []int
	nreq     int
	notes    []string
}

func (s *softRun) note(format string, args ...any) {
	s.mu.Lock()
	if len(s.notes) < 200 {
		s.notes = append(s.notes, sprintf("%s ", time.Now().Format("05.000"))+sprintf(format, args...))
	}
	s.mu.Unlock()
}

func (s *softRun) fatalf(format string, args ...any) {
	s.mu.Lock()
	notes := slices.Clone(s.notes)
	s.mu.Unlock()
	for _, n := range notes {
		s.t.Logf("%s", n)
	}
	if s.tcp != nil {
		s.t.Logf("proxy: %s", s.tcp.Stats())
	}
	if s.udp != nil {
		s.t.Logf("proxy: %s", s.udp.Stats())
	}
	for _, r := range s.rec.records() {
		s.t.Logf("record %s", r.String())
	}
	s.t.Fatalf(format, args...)
}

// faultOps are the faults a plan places.
var faultOps = [...]faultproxy.Op{
	faultproxy.Drop, faultproxy.Drop, faultproxy.Delay, faultproxy.Delay, faultproxy.Duplicate,
	faultproxy.Duplicate, faultproxy.Reorder, faultproxy.Reorder, faultproxy.Cut, faultproxy.Reset,
	faultproxy.CrashClient, faultproxy.CrashServer, faultproxy.Blackhole,
}

// policy is the proxy's Policy: the plan, per connection, direction and
// unit; units past the plan pass.
func (s *softRun) policy(u *faultproxy.Unit) faultproxy.Action {
	if u.Index >= len(s.plan[0][0]) {
		return faultproxy.Action{}
	}
	a := s.plan[u.Conn%len(s.plan)][u.Dir][u.Index]
	if a.Rewrite != nil {
		// The plan's rewrite stands for "wrong Q_Key" on a SIDR message.
		a.Rewrite = faultproxy.SIDRQKey(u.Bytes, 0xbad)
		if a.Rewrite == nil {
			a.Op = faultproxy.Pass
		}
	}
	if a.Op != faultproxy.Pass || a.Rewrite != nil {
		s.note("proxy conn %d %s #%d %s: %s", u.Conn, u.Dir, u.Index, u.Kind, a.Op)
	}
	return a
}

// runSoft runs one scenario: a listener, clients connecting through the
// proxy, the server's answers, faults, destroys midway, disconnects; then
// it tears everything down and checks the journal, the outcomes and leaks.
func runSoft(t T, c chooser, ud bool) {
	lk := snapshot()
	s := &softRun{t: t, c: c, ud: ud, rec: newRecorder(), byID: make(map[*id.ID]*softClient)}
	s.decode()
	s.f = soft.New(soft.WithName("fuzz"), soft.WithConnectTimeout(softConnectTimeout),
		soft.WithRequestTimeout(softRequestTimeout), soft.WithLinger(softLinger),
		soft.WithSIDRRetry(softSIDRTimeout, softSIDRRetries))
	var err error
	if s.srvCh, err = channel.New(channel.WithFabric(s.f)); err != nil {
		t.Fatalf("channel: %v", err)
	}
	if s.cliCh, err = channel.New(channel.WithFabric(s.f)); err != nil {
		t.Fatalf("channel: %v", err)
	}
	workers := 0
	if c.intn(2) == 1 {
		workers = 2
	}
	if s.r, err = reactor.New(reactor.WithWorkers(workers)); err != nil {
		t.Fatalf("reactor: %v", err)
	}
	_ = s.r.Register(s.srvCh, handlers.Func(s.serverEvent))
	_ = s.r.Register(s.cliCh, handlers.Func(s.clientEvent))

	ps := id.PSTCP
	if ud {
		ps = id.PSUDP
	}
	if s.lis, err = id.Create(s.srvCh, "server", ps, id.WithJournal(s.rec.j)); err != nil {
		t.Fatalf("create listener: %v", err)
	}
	if err := s.lis.Bind(netip.MustParseAddrPort("127.0.0.1:0")); err != nil {
		s.fatalf("bind: %v", err)
	}
	if err := s.lis.Listen(0); err != nil {
		s.fatalf("listen: %v", err)
	}
	if ud {
		s.udp, err = faultproxy.NewUDP(s.lis.LocalAddr(), s.policy)
	} else {
		s.tcp, err = faultproxy.NewTCP(s.lis.LocalAddr(), s.policy)
	}
	if err != nil {
		s.fatalf("proxy: %v", err)
	}
	s.connect()
	s.outcomes()
	s.disconnects()
	s.teardown()
	if err := s.rec.check(); err != nil {
		s.fatalf("%s%v", s.rec.picture(t, c), err)
	}
	if s.tcp != nil {
		_ = s.tcp.Close()
	}
	if s.udp != nil {
		_ = s.udp.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.f.QuiesceContext(ctx); err != nil {
		s.fatalf("fabric loops still running: %v\n%s", err, stacks())
	}
	lk.verify(t)
	if os.Getenv("CMRT_FUZZ_VERBOSE") != "" {
		for _, n := range s.notes {
			t.Logf("%s", n)
		}
		if s.tcp != nil {
			t.Logf("proxy: %s", s.tcp.Stats())
		}
		if s.udp != nil {
			t.Logf("proxy: %s", s.udp.Stats())
		}
	}
}

// decode draws the scenario: the fault plan, the clients and the server's
// answers.
func (s *softRun) decode() {
	c := s.c
	// A few faults per connection and direction, at some unit (the MPA
	// frames are units 0, FPDUs follow; SIDR REQs and their retries are
	// the datagrams c->s, REPs s->c); a quarter of the runs are clean.
	if c.intn(4) != 0 {
		for k := range s.plan {
			for dir := range s.plan[k] {
				for f := c.intn(3); f > 0; f-- {
					a := faultproxy.Action{Op: faultOps[c.intn(len(faultOps))]}
					if a.Op == faultproxy.Delay {
						a.Delay = time.Duration(c.intn(60)) * time.Millisecond
					}
					if s.ud && dir == int(faultproxy.ServerToClient) && c.intn(4) == 0 {
						a = faultproxy.Action{Rewrite: []byte{}} // a wrong Q_Key
					}
					s.plan[k][dir][c.intn(len(s.plan[k][dir]))] = a
				}
			}
		}
	}
	n := 1 + c.intn(3)
	for k := 0; k < n; k++ {
		cl := &softClient{outcome: make(chan struct{})}
		if c.intn(4) == 0 {
			cl.destroyAt = time.Duration(1+c.intn(40)) * time.Millisecond
		}
		cl.discSide = c.intn(3)
		if !s.ud {
			cl.sends = c.intn(6)
		}
		s.clients = append(s.clients, cl)
	}
	for k := 0; k < 4; k++ {
		p := c.intn(16)
		switch {
		case p < 9:
			p = srvAccept
		case p < 11:
			p = srvReject
		case p < 12:
			p = srvIgnore
		case p < 13:
			p = srvDestroyChild
		case p < 14:
			p = srvDestroyListen
		default:
			p = srvAcceptThenDisc
		}
		s.srvPol = append(s.srvPol, p)
	}
}

// connect creates the clients and starts their resolution; their handler
// takes them to Connect.
func (s *softRun) connect() {
	ps := id.PSTCP
	if s.ud {
		ps = id.PSUDP
	}
	dst := s.proxyAddr()
	for k, cl := range s.clients {
		cm, err := id.Create(s.cliCh, k, ps, id.WithJournal(s.rec.j))
		if err != nil {
			s.fatalf("create client: %v", err)
		}
		s.mu.Lock()
		cl.cm = cm
		s.byID[cm] = cl
		s.mu.Unlock()
		if err := cm.ResolveAddr(netip.AddrPort{}, dst, time.Second); err != nil {
			s.fatalf("resolve_addr: %v", err)
		}
	}
}

func (s *softRun) proxyAddr() netip.AddrPort {
	if s.udp != nil {
		return s.udp.Addr()
	}
	return s.tcp.Addr()
}

// ended records a client's connect outcome.
func (cl *softClient) end() {
	if !cl.ended {
		cl.ended = true
		close(cl.outcome)
	}
}

// clientEvent is the clients' handler: resolve, connect, send.
func (s *softRun) clientEvent(ev *id.Event) error {
	s.mu.Lock()
	cl := s.byID[ev.ID]
	s.mu.Unlock()
	s.note("client %d: %s status %d (%s)", ev.ID.Handle(), ev.Type, ev.Status, ev.ID.State())
	if cl == nil {
		return nil
	}
	cl.mu.Lock()
	defer cl.mu.Unlock()
	cl.events = append(cl.events, ev.Type)
	cm := ev.ID
	switch ev.Type {
	case id.EventAddrResolved:
		if err := cm.ResolveRoute(time.Second); err != nil {
			s.note("client %d resolve_route: %v", cm.Handle(), err)
			cl.end()
		}
	case id.EventRouteResolved:
		if cl.sends > 0 {
			if err := cm.CreateQP(&id.QPInitAttr{Cap: id.QPCap{MaxSendWR: 8, MaxRecvWR: 8}}); err == nil {
				cl.buf = make([]byte, 64)
				cl.mr, _ = cm.RegMsgs(cl.buf)
			}
		}
		err := cm.Connect(&id.ConnParam{PrivateData: []byte("hello"), ResponderResources: 2, InitiatorDepth: 2})
		if err != nil {
			s.note("client %d connect: %v", cm.Handle(), err)
			cl.end()
			return nil
		}
		cl.connects = true
	case id.EventEstablished:
		for k := 0; k < cl.sends && cl.mr != nil; k++ {
			_ = cm.PostSend(uint64(k), cl.buf[:16], cl.mr, 0)
		}
		cl.end()
	case id.EventAddrError, id.EventRouteError, id.EventRejected, id.EventUnreachable, id.EventConnectError, id.EventConnectResponse:
		cl.end()
	}
	return nil
}

// serverEvent is the server's handler: answer requests as the plan says.
func (s *softRun) serverEvent(ev *id.Event) error {
	s.note("server %d: %s status %d (%s)", ev.ID.Handle(), ev.Type, ev.Status, ev.ID.State())
	if ev.Type != id.EventConnectRequest {
		return nil
	}
	child := ev.ID
	s.mu.Lock()
	s.children = append(s.children, child)
	pol := s.srvPol[s.nreq%len(s.srvPol)]
	s.nreq++
	s.mu.Unlock()
	var err error
	switch pol {
	case srvAccept, srvAcceptThenDisc:
		if !s.ud {
			if e := child.CreateQP(&id.QPInitAttr{Cap: id.QPCap{MaxSendWR: 8, MaxRecvWR: 8}}); e == nil {
				buf := make([]byte, 256)
				if mr, e := child.RegMsgs(buf); e == nil {
					for k := 0; k < 4; k++ {
						_ = child.PostRecv(uint64(k), buf[k*64:(k+1)*64], mr)
					}
				}
			}
		}
		err = child.Accept(&id.ConnParam{PrivateData: []byte("welcome"), ResponderResources: 2, InitiatorDepth: 2})
		if err == nil && pol == srvAcceptThenDisc && !s.ud {
			err = child.Disconnect()
		}
	case srvReject:
		err = child.Reject([]byte("no"))
	case srvDestroyChild:
		err = child.Destroy()
	case srvDestroyListen:
		err = s.lis.Destroy()
	}
	s.note("server policy %d on %d: %v", pol, child.Handle(), err)
	return nil
}

// outcomes waits for every client's connect to end (destroying those the
// plan destroys midway), and checks that each one that connected ended in
// exactly one outcome.
func (s *softRun) outcomes() {
	start := time.Now()
	for _, cl := range s.clients {
		if cl.destroyAt == 0 {
			continue
		}
		if wait := cl.destroyAt - time.Since(start); wait > 0 {
			time.Sleep(wait)
		}
		cm := cl.cm
		if !bounded(5*time.Second, func() { _ = cm.Destroy() }, nil) {
			s.fatalf("destroy of a connecting id did not return\n%s", stacks())
		}
		s.note("client %d destroyed midway", cm.Handle())
	}
	deadline := time.NewTimer(softOutcome)
	defer deadline.Stop()
	for _, cl := range s.clients {
		if cl.destroyAt != 0 {
			continue
		}
		select {
		case <-cl.outcome:
		case <-deadline.C:
			cl.mu.Lock()
			evs := slices.Clone(cl.events)
			connects := cl.connects
			cl.mu.Unlock()
			s.fatalf("client %d (connect called: %v) got no outcome within %s; events %v", cl.cm.Handle(), connects, softOutcome, evs)
		}
	}
	// Exactly one outcome per connect.
	for _, cl := range s.clients {
		cl.mu.Lock()
		n := 0
		for _, e := range cl.events {
			switch e {
			case id.EventEstablished, id.EventRejected, id.EventUnreachable, id.EventConnectError, id.EventConnectResponse:
				n++
			case id.EventAddrError:
				if cl.connects {
					n++
				}
			}
		}
		evs := slices.Clone(cl.events)
		cl.mu.Unlock()
		if n > 1 || (cl.destroyAt == 0 && cl.connects && n == 0) {
			s.fatalf("client %d: %d outcomes: %v", cl.cm.Handle(), n, evs)
		}
	}
}

// disconnects disconnects established connections from the side the plan
// says, and checks that the disconnecting side reports DISCONNECTED.
func (s *softRun) disconnects() {
	if s.ud {
		return
	}
	for _, cl := range s.clients {
		if cl.destroyAt != 0 || cl.cm.State() != id.StateEstablished || cl.discSide != 1 {
			continue
		}
		if err := cl.cm.Disconnect(); err != nil {
			s.fatalf("disconnect: %v", err)
		}
	}
	s.mu.Lock()
	children := slices.Clone(s.children)
	s.mu.Unlock()
	for k, child := range children {
		if k < len(s.clients) && s.clients[k].discSide == 2 && child.State() == id.StateEstablished {
			_ = child.Disconnect()
		}
	}
	// The local DISCONNECTED is immediate on iWARP; give the peers' a
	// moment (a partitioned peer never learns).
	deadline := time.Now().Add(time.Second)
	for time.Now().Before(deadline) {
		pending := false
		for _, cl := range s.clients {
			if cl.destroyAt == 0 && cl.discSide == 1 && cl.cm.State() == id.StateEstablished {
				pending = true
			}
		}
		if !pending {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	for _, cl := range s.clients {
		if cl.destroyAt == 0 && cl.discSide == 1 && cl.cm.State() == id.StateEstablished {
			s.fatalf("client %d disconnected and still ESTABLISHED", cl.cm.Handle())
		}
	}
	time.Sleep(time.Duration(s.c.intn(3)) * 20 * time.Millisecond)
}

// teardown stops the reactor, destroys every id (bounded) and closes the
// channels.
func (s *softRun) teardown() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	err := s.r.Close(ctx)
	cancel()
	if err != nil {
		s.fatalf("reactor close: %v\n%s", err, stacks())
	}
	s.mu.Lock()
	ids := slices.Clone(s.children)
	s.mu.Unlock()
	ids = append(ids, s.lis)
	for _, cl := range s.clients {
		ids = append(ids, cl.cm)
	}
	for _, cm := range ids {
		if cm.State() == id.StateDestroyed {
			continue
		}
		if !bounded(5*time.Second, func() { _ = cm.Destroy() }, nil) {
			s.fatalf("destroy of id %d (%s) did not return\n%s", cm.Handle(), cm.State(), stacks())
		}
	}
	for k, ch := range []*channel.Channel{s.srvCh, s.cliCh} {
		ch.SetNonblocking(true)
		for {
			ev, err := ch.GetEvent()
			if err != nil {
				break
			}
			s.fatalf("event %s for id %d after every id was destroyed", ev.Type, ev.ID.Handle())
		}
		// Known bug (TestKnownBugListenerDestroyLeavesPendingConnections):
		// a connection the destroyed listener accepted whose MPA Request
		// comes late registers an endpoint on the channel for a moment.
		// Retry until the request timeout has closed such connections.
		err := ch.Close()
		for deadline := time.Now().Add(2 * softRequestTimeout); err != nil && time.Now().Before(deadline); {
			time.Sleep(5 * time.Millisecond)
			err = ch.Close()
		}
		if err != nil {
			s.fatalf("%s channel close: %v", [...]string{"server", "client"}[k], err)
		}
	}
}

// FuzzSoftRC runs RC scenarios over the software fabric through the TCP
// fault proxy (see runSoft).
func FuzzSoftRC(f *testing.F) {
	for _, seed := range softSeeds {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, b []byte) { runSoft(t, &bytesChooser{b: b}, false) })
}

// FuzzSoftUD runs UD scenarios over the software fabric through the UDP
// fault proxy.
func FuzzSoftUD(f *testing.F) {
	for _, seed := range softSeeds {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, b []byte) { runSoft(t, &bytesChooser{b: b}, true) })
}

// softSeeds: a clean network, then faults on the set-up and on the data.
var softSeeds = [][]byte{
	{0, 1, 1, 1, 0, 3, 1, 0, 0, 0, 0, 0, 0},
	{0, 2, 1, 2, 0, 3, 2, 1, 1, 0, 9, 10, 13, 0},
	{1, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 0, 1, 1, 2, 0, 0, 0, 0},
	{2, 9, 30, 0, 0, 0, 0, 0, 0, 11, 0, 0, 0, 0, 0, 0, 0, 12, 0, 0, 0, 0, 0, 0, 0, 2, 0, 1, 3, 0, 0, 0, 0},
	{3, 0, 13, 0, 0, 0, 0, 0, 0, 14, 0, 0, 0, 0, 0, 0, 0, 15, 0, 0, 0, 0, 0, 0, 0, 16, 0, 0, 0, 0, 0, 0, 0, 1, 1, 2, 1, 0, 0},
	{1, 0, 0, 17, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 2, 2, 0, 13, 14},
}
