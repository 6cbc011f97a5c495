package diffkernel

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cmrt/cmrt/channel"
	"github.com/cmrt/cmrt/fabric"
	"github.com/cmrt/cmrt/id"
	"github.com/cmrt/cmrt/id/journal"
	"github.com/cmrt/cmrt/internal/callseq"
)

// Flavour is the transport semantics a side's fabric shows: what the
// comparison maps (see Equivalences).
type Flavour uint8

// Flavours.
const (
	// IWARP: the software fabric, and the kernel on an iWARP device.
	IWARP Flavour = iota
	// IB: the kernel on an InfiniBand or RoCE device.
	IB
)

// String returns "IB" or "iWARP".
func (f Flavour) String() string {
	if f == IB {
		return "IB"
	}
	return "iWARP"
}

// timing bounds a side's calls and waits.
type timing struct {
	resolve time.Duration // resolve_addr and resolve_route timeouts
	busy    time.Duration // how long an operation waits for a blocked call on its id
	destroy time.Duration // how long a teardown destroy may take
}

var defaultTiming = timing{resolve: time.Second, busy: 1500 * time.Millisecond, destroy: 5 * time.Second}

// rec is one journal record as a side saw it.
type rec struct {
	journal.Record
	// Auto marks a call the driver made by itself: Establish after a
	// kernel's CONNECT_RESPONSE.
	Auto bool
	// ParentSlot is the listener's slot of a CONNECT_REQUEST (-1: none
	// or unknown), set by since.
	ParentSlot int
}

// slot is one id of a side.
type slot struct {
	cm   *id.ID
	peer bool
	busy chan struct{} // non-nil while a blocking call runs; closed when it returns
	dst  callseq.AddrKind
}

// side runs a sequence's operations on one fabric (and, for peers, on a
// peer fabric), recording every call and event in its own journal.
type side struct {
	name    string
	flavour Flavour
	fab     fabric.Fabric
	peerFab fabric.Fabric
	env     env
	tm      timing
	qpn     *atomic.Uint32 // the QP numbers connect and accept announce

	j       *journal.Journal
	stopObs func()
	ctx     context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	chs     [2]*channel.Channel
	peerChs [2]*channel.Channel

	mu       sync.Mutex
	recs     []rec
	lastRec  time.Time
	slots    []*slot
	byHandle map[uint64]int
	auto     map[uint64]int // Establish calls the driver is making, by id
	notes    []string       // what the driver saw that is not in the journal

	// probes says whether the side makes probes (callseq.Op.Probe): the
	// kernel's only; the software fabric relies on the library's checks.
	probes     bool
	probe      string   // the last probe's outcome, "" if none was made
	probeState id.State // the state the probed id was in
}

func newSide(name string, fl Flavour, fab, peerFab fabric.Fabric, e env, tm timing, qpn *atomic.Uint32) (*side, error) {
	s := &side{name: name, flavour: fl, fab: fab, peerFab: peerFab, env: e, tm: tm, qpn: qpn,
		j: journal.New(64), byHandle: make(map[uint64]int), auto: make(map[uint64]int)}
	s.stopObs = s.j.Observe(s.observe)
	s.ctx, s.cancel = context.WithCancel(context.Background())
	for k := range s.chs {
		ch, err := channel.New(channel.WithFabric(fab))
		if err != nil {
			s.close()
			return nil, fmt.Errorf("%s: channel: %w", name, err)
		}
		s.chs[k] = ch
		s.pump(ch)
	}
	return s, nil
}

// observe is the journal's observer: it runs with the id's lock held.
func (s *side) observe(r journal.Record) {
	s.mu.Lock()
	x := rec{Record: r}
	if r.Kind == journal.KindCall && r.Call == journal.CallEstablish && s.auto[r.ID] > 0 {
		s.auto[r.ID]--
		x.Auto = true
	}
	s.recs = append(s.recs, x)
	s.lastRec = time.Now()
	s.mu.Unlock()
}

func (s *side) note(format string, args ...any) {
	s.mu.Lock()
	if len(s.notes) < 100 {
		s.notes = append(s.notes, fmt.Sprintf(format, args...))
	}
	s.mu.Unlock()
}

// pump takes the events of a channel: it maps new ids to slots, completes
// a kernel's CONNECT_RESPONSE and acknowledges every event.
func (s *side) pump(ch *channel.Channel) {
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			ev, err := ch.GetEventContext(s.ctx)
			if err != nil {
				if s.ctx.Err() != nil {
					return
				}
				if errors.Is(err, syscall.EAGAIN) || errors.Is(err, syscall.EINTR) {
					continue
				}
				s.note("get_event: %v", err)
				return
			}
			s.onEvent(ev)
			_ = ev.Ack()
		}
	}()
}

func (s *side) onEvent(ev *id.Event) {
	switch ev.Type {
	case id.EventConnectRequest:
		peer := false
		if l := s.slotOfID(ev.ListenID); l >= 0 {
			peer = s.slot(l).peer
		}
		s.addSlot(ev.ID, peer)
	case id.EventConnectResponse:
		s.establish(ev.ID)
	}
}

// establish completes a connection the kernel reported as CONNECT_RESPONSE
// (the application drives its QP: here there is none), as librdmacm's
// rdma_establish; the software fabric never reports it.
func (s *side) establish(cm *id.ID) {
	s.mu.Lock()
	s.auto[cm.Handle()]++
	s.mu.Unlock()
	if err := cm.Establish(); err != nil {
		s.note("establish of id %d: %v", cm.Handle(), err)
	}
}

func (s *side) addSlot(cm *id.ID, peer bool) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if k, ok := s.byHandle[cm.Handle()]; ok {
		return k
	}
	s.slots = append(s.slots, &slot{cm: cm, peer: peer})
	k := len(s.slots) - 1
	s.byHandle[cm.Handle()] = k
	return k
}

func (s *side) slot(k int) *slot {
	s.mu.Lock()
	defer s.mu.Unlock()
	if k < 0 || k >= len(s.slots) {
		return nil
	}
	return s.slots[k]
}

// state returns the state of slot k's id (IDLE when there is none).
func (s *side) state(k int) id.State {
	if sl := s.slot(k); sl != nil {
		return sl.cm.State()
	}
	return id.StateIdle
}

func (s *side) slotOfID(cm *id.ID) int {
	if cm == nil {
		return -1
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if k, ok := s.byHandle[cm.Handle()]; ok {
		return k
	}
	return -1
}

// mark returns the number of records seen so far: an epoch starts there.
func (s *side) mark() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.recs)
}

// since returns the records from mark n on, the slot of each (-1 when
// its id has none yet) and when the last record came.
func (s *side) since(n int) ([]rec, []int, time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := append([]rec(nil), s.recs[n:]...)
	sl := make([]int, len(out))
	for k, r := range out {
		if v, ok := s.byHandle[r.ID]; ok {
			sl[k] = v
		} else {
			sl[k] = -1
		}
		out[k].ParentSlot = -1
		if v, ok := s.byHandle[r.Parent]; ok && r.Kind == journal.KindEvent && r.Event == id.EventConnectRequest {
			out[k].ParentSlot = v
		}
	}
	return out, sl, s.lastRec
}

// waiting reports whether an answer is still due on this side: an id
// resolving, or a CONNECT_RESPONSE being completed.
func (s *side) waiting() bool {
	s.mu.Lock()
	slots := append([]*slot(nil), s.slots...)
	auto := 0
	for _, n := range s.auto {
		auto += n
	}
	s.mu.Unlock()
	if auto > 0 {
		return true
	}
	for _, sl := range slots {
		switch sl.cm.State() {
		case id.StateAddrQuery, id.StateRouteQuery, id.StateConnectResponse:
			return true
		}
	}
	return false
}

// expects reports whether op, made on this side, is answered by an event
// (on its id or another) when its call succeeded: a connect to a host
// that answers, an accept on RC, a reject, a disconnect of a connection,
// a join. Resolutions are waited for by state (waiting).
func (s *side) expects(op callseq.Op, before id.State) bool {
	sl := s.slot(op.Slot)
	if sl == nil {
		return false
	}
	switch op.Call {
	case journal.CallConnect:
		// A synchronous listener's request waits for its get_request.
		return sl.dst == callseq.Local && !s.syncListener()
	case journal.CallAccept:
		return sl.cm.QPType() == id.RC
	case journal.CallReject, journal.CallJoin:
		return true
	case journal.CallDisconnect:
		return sl.cm.QPType() == id.RC && (before == id.StateEstablished || before == id.StateAccept)
	}
	return false
}

func (s *side) syncListener() bool {
	s.mu.Lock()
	slots := append([]*slot(nil), s.slots...)
	s.mu.Unlock()
	for _, sl := range slots {
		if sl.cm.Synchronous() && sl.cm.State() == id.StateListen {
			return true
		}
	}
	return false
}

// skip is why an operation was not made on a side.
type skip string

const (
	skipNoID skip = "no id" // its slot holds no id, or a destroyed one
	skipBusy skip = "busy"  // a blocking call on the id had not returned
)

// do makes one operation. It returns once the call has returned, or, for
// a call that blocks (synchronous ids), once its record is in the journal
// (the call goes on in the background).
func (s *side) do(op callseq.Op) skip {
	if op.Probe {
		return s.doProbe(op)
	}
	if op.Call == journal.CallCreate {
		s.create(op)
		return ""
	}
	sl := s.slot(op.Slot)
	if sl == nil {
		return skipNoID
	}
	if sl.cm.State() == id.StateDestroyed && op.Call != journal.CallDestroy {
		return skipNoID
	}
	if b := sl.busy; b != nil && op.Call != journal.CallDestroy {
		select {
		case <-b:
		case <-time.After(s.tm.busy):
			return skipBusy
		}
	}
	cm := sl.cm
	st, qp := cm.State(), cm.QPType()
	if op.Call == journal.CallDestroy || op.Call == journal.CallMigrate {
		// Destroy and migrate wait for the id's events to be
		// acknowledged: a synchronous listener's, for the CONNECT_REQUEST
		// its new id holds until that id's next call, as librdmacm. They
		// go on in the background; teardown tells one that never returns.
		s.background(sl, op)
		return ""
	}
	if cm.Synchronous() && callseq.Blocks(op.Call, st, qp) {
		if _, ok := journal.CallAllowed(st, op.Call, qp); ok && op.Call != journal.CallDestroy {
			s.background(sl, op)
			return ""
		}
	}
	s.call(sl, op)
	return ""
}

func (s *side) create(op callseq.Op) {
	fab, chs := s.fab, &s.chs
	if op.Peer {
		fab, chs = s.peerFab, &s.peerChs
		if fab == nil {
			s.note("create: no peer fabric")
			return
		}
	}
	opts := []id.Option{id.WithJournal(s.j), id.WithFabric(fab)}
	var ch id.Channel
	if op.Chan != callseq.ChanSync {
		c, err := s.channel(chs, fab, op.Chan)
		if err != nil {
			s.note("create: %v", err)
			return
		}
		ch = c
	}
	cm, err := id.Create(ch, nil, op.PS, opts...)
	if err != nil {
		s.note("create: %v", err)
		return
	}
	s.addSlot(cm, op.Peer)
}

// channel returns channel k of chs, opening it (and its pump) on first use.
func (s *side) channel(chs *[2]*channel.Channel, fab fabric.Fabric, k int) (*channel.Channel, error) {
	s.mu.Lock()
	ch := chs[k]
	s.mu.Unlock()
	if ch != nil {
		return ch, nil
	}
	ch, err := channel.New(channel.WithFabric(fab))
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	chs[k] = ch
	s.mu.Unlock()
	s.pump(ch)
	return ch, nil
}

// background runs a call that blocks, and waits until its record is in.
func (s *side) background(sl *slot, op callseq.Op) {
	done := make(chan struct{})
	sl.busy = done
	n := s.mark()
	h := sl.cm.Handle()
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer close(done)
		s.call(sl, op)
	}()
	deadline := time.Now().Add(s.tm.busy)
	for time.Now().Before(deadline) {
		select {
		case <-done:
			return
		default:
		}
		recs, _, _ := s.since(n)
		for _, r := range recs {
			if r.ID == h && r.Kind == journal.KindCall && r.Call == op.Call {
				return
			}
		}
		time.Sleep(time.Millisecond)
	}
}

// call makes op's call on sl's id.
func (s *side) call(sl *slot, op callseq.Op) {
	cm := sl.cm
	ctx := context.Background()
	var err error
	switch op.Call {
	case journal.CallBind:
		err = cm.Bind(s.env.addrPort(op.Addr, op.Port))
	case journal.CallResolveAddr:
		sl.dst = op.Addr
		var src netip.AddrPort
		if op.Src {
			src = netip.AddrPortFrom(s.env.dev.Local, 0)
		}
		err = cm.ResolveAddrContext(ctx, src, s.env.addrPort(op.Addr, op.Port), s.tm.resolve)
	case journal.CallResolveRoute:
		err = cm.ResolveRouteContext(ctx, s.tm.resolve)
	case journal.CallListen:
		err = cm.Listen(op.Backlog)
	case journal.CallConnect:
		err = cm.ConnectContext(ctx, s.connParam(op.PD, false))
		if err == nil && s.flavour == IB && cm.State() == id.StateConnectResponse {
			s.establish(cm) // a synchronous id's CONNECT_RESPONSE
		}
	case journal.CallAccept:
		err = cm.AcceptContext(ctx, s.connParam(op.PD, true))
	case journal.CallReject:
		err = cm.Reject(make([]byte, op.PD))
	case journal.CallEstablish:
		err = cm.Establish()
	case journal.CallDisconnect:
		err = cm.DisconnectContext(ctx)
	case journal.CallNotify:
		err = cm.Notify(id.AsyncCommEst)
	case journal.CallSetOption:
		err = setOption(cm, op.Opt)
	case journal.CallMigrate:
		err = s.migrate(sl, op.Chan)
	case journal.CallJoin:
		flags := id.JoinFullMember
		if op.SendOnly {
			flags = id.JoinSendOnly
		}
		err = cm.JoinMulticastContext(ctx, s.env.groups[op.Group], flags, nil)
	case journal.CallLeave:
		err = cm.LeaveMulticast(s.env.groups[op.Group])
	case journal.CallGetRequest:
		var child *id.ID
		child, err = cm.GetRequestContext(ctx)
		if child != nil {
			s.addSlot(child, sl.peer)
		}
	case journal.CallDestroy:
		err = cm.Destroy()
	}
	if err != nil && errors.Is(err, id.ErrCanceled) {
		s.note("%s: canceled", op)
	}
}

// doProbe makes a probe: the call on the kernel's endpoint directly, when
// the model refuses it in the id's state. It records the outcome as
// "<call> in <state> (<QP type>): <errno or ok>".
func (s *side) doProbe(op callseq.Op) skip {
	if !s.probes {
		return ""
	}
	sl := s.slot(op.Slot)
	if sl == nil || sl.peer || sl.cm.State() == id.StateDestroyed {
		return ""
	}
	cm := sl.cm
	st, qp := cm.State(), cm.QPType()
	if _, ok := journal.CallAllowed(st, op.Call, qp); ok || st == id.StateCanceled {
		return ""
	}
	ep := cm.Endpoint()
	if ep == nil {
		return ""
	}
	var err error
	switch op.Call {
	case journal.CallBind:
		err = ep.Bind(s.env.addrPort(op.Addr, op.Port))
	case journal.CallResolveAddr:
		err = ep.ResolveAddr(netip.AddrPort{}, s.env.addrPort(op.Addr, op.Port), s.tm.resolve)
	case journal.CallResolveRoute:
		err = ep.ResolveRoute(s.tm.resolve)
	case journal.CallListen:
		err = ep.Listen(id.MaxBacklog)
	case journal.CallConnect:
		err = ep.Connect(s.connParam(0, false))
	case journal.CallAccept:
		err = ep.Accept(cm.Handle(), s.connParam(0, true))
	case journal.CallReject:
		err = ep.Reject(nil)
	case journal.CallEstablish:
		err = ep.Establish()
	case journal.CallDisconnect:
		err = ep.Disconnect()
	case journal.CallNotify:
		err = ep.Notify(id.AsyncCommEst)
	case journal.CallJoin:
		// A uid no id has: the join's events are dropped.
		err = ep.Join(1<<62|uint64(op.Group), s.env.groups[op.Group], false)
	default:
		return ""
	}
	res := "ok"
	if err != nil {
		var e syscall.Errno
		if errors.As(err, &e) {
			res = errnoName(int32(e))
		} else {
			res = err.Error()
		}
	}
	s.mu.Lock()
	s.probe = fmt.Sprintf("%s in %s (%s): %s", op.Call, st, qp, res)
	s.probeState = st
	s.mu.Unlock()
	return ""
}

// probed returns the last probe's outcome, whether the kernel took the
// call, and the state the id was in.
func (s *side) probed() (string, bool, id.State) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.probe, strings.HasSuffix(s.probe, ": ok"), s.probeState
}

// connParam is what connect and accept announce: a QP number of their
// own (the IB CM refuses a REQ or REP naming a QP it already connects:
// stale connection), the device's read depths and op's private data.
func (s *side) connParam(pd int, accept bool) *id.ConnParam {
	p := &id.ConnParam{PrivateData: make([]byte, pd), QPNum: s.qpn.Add(1) & 0xFFFFFF,
		ResponderResources: id.MaxResponderResources, InitiatorDepth: id.MaxInitiatorDepth,
		RetryCount: 7, RNRRetryCount: 7}
	if accept {
		p.RetryCount, p.RNRRetryCount = 0, 0
	}
	return p
}

func setOption(cm *id.ID, o callseq.OptKind) error {
	switch o {
	case callseq.OptTOS:
		return cm.SetTOS(32)
	case callseq.OptReuseOn:
		return cm.SetReuseAddr(true)
	case callseq.OptReuseOff:
		return cm.SetReuseAddr(false)
	case callseq.OptAFOnly:
		return cm.SetAFOnly(true)
	case callseq.OptAckTimeout:
		return cm.SetAckTimeout(14)
	case callseq.OptIBPath:
		return cm.SetOption(id.OptionLevelIB, id.OptionIBPath, make([]byte, 72))
	case callseq.OptBadLength:
		return cm.SetOption(id.OptionLevelID, id.OptionTOS, make([]byte, 4))
	}
	return cm.SetOption(id.OptionLevelID, 99, []byte{0})
}

func (s *side) migrate(sl *slot, k int) error {
	if k == callseq.ChanSync {
		return sl.cm.Migrate(nil)
	}
	fab, chs := s.fab, &s.chs
	if sl.peer {
		fab, chs = s.peerFab, &s.peerChs
	}
	ch, err := s.channel(chs, fab, k)
	if err != nil {
		return err
	}
	return sl.cm.Migrate(ch)
}

// destroy destroys an id, bounded: a destroy that does not return is a
// finding, noted, and the driver goes on.
func (s *side) destroy(cm *id.ID) error {
	done := make(chan error, 1)
	go func() { done <- cm.Destroy() }()
	select {
	case err := <-done:
		return err
	case <-time.After(s.tm.destroy):
		s.note("destroy of id %d did not return within %v", cm.Handle(), s.tm.destroy)
		return nil
	}
}

// teardown destroys every id, stops the pumps and closes the channels. It
// returns what went wrong (a destroy that hung, a channel that would not
// close).
func (s *side) teardown() []string {
	s.mu.Lock()
	slots := append([]*slot(nil), s.slots...)
	s.mu.Unlock()
	for k := len(slots) - 1; k >= 0; k-- {
		if cm := slots[k].cm; cm.State() != id.StateDestroyed && slots[k].busy == nil {
			_ = s.destroy(cm)
		} else if cm.State() != id.StateDestroyed {
			// A blocking call runs: destroy it in the background too.
			sl := slots[k]
			prev := sl.busy
			done := make(chan struct{})
			sl.busy = done
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				defer close(done)
				_ = cm.Destroy()
				<-prev
			}()
		}
	}
	deadline := time.Now().Add(s.tm.destroy)
	for _, sl := range slots {
		if b := sl.busy; b != nil {
			select {
			case <-b:
			case <-time.After(time.Until(deadline)):
				s.note("a call on id %d (%s) did not return once every id was destroyed", sl.cm.Handle(), sl.cm.State())
			}
		}
	}
	s.close()
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.notes...)
}

func (s *side) close() {
	s.cancel()
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(s.tm.destroy):
		s.note("pumps or calls still running at close")
	}
	for _, ch := range append(s.chs[:], s.peerChs[:]...) {
		if ch != nil {
			if err := ch.Close(); err != nil {
				s.note("channel close: %v", err)
			}
		}
	}
	if s.stopObs != nil {
		s.stopObs()
	}
}
