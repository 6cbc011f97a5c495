package fuzz

import (
	"context"
	"errors"
	"net/netip"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/cmrt/cmrt/channel"
	"github.com/cmrt/cmrt/fabric"
	"github.com/cmrt/cmrt/handlers"
	"github.com/cmrt/cmrt/id"
	"github.com/cmrt/cmrt/id/journal"
	"github.com/cmrt/cmrt/internal/callseq"
	"github.com/cmrt/cmrt/internal/fakefab"
	"github.com/cmrt/cmrt/reactor"
)

// Modes of the fake-fabric driver.
const (
	// modeLegal pumps channels by hand and injects only events the model
	// allows in the id's state, delivering each at once: the journal must
	// satisfy the model exactly.
	modeLegal = iota
	// modeAny pumps by hand and injects any event: illegal ones must leave
	// the state as it is and break nothing else.
	modeAny
	// modeReactor and modePool dispatch with a reactor, inline or on two
	// workers, while the driver calls and injects concurrently: events the
	// model allowed when injected may be illegal when delivered.
	modeReactor
	modePool
	numModes
)

var modeNames = [...]string{"legal", "any", "reactor", "pool"}

// fakeSlot is an id the driver knows.
type fakeSlot struct {
	cm       *id.ID
	ep       *fakefab.Endpoint
	timewait bool
}

// fakeDriver runs one random program over the fake fabric.
type fakeDriver struct {
	t    T
	c    chooser
	mode int
	f    *fakefab.Fabric
	rec  *recorder
	chs  [2]*channel.Channel
	r    *reactor.Reactor

	mu    sync.Mutex // slots, byID (reactor handlers add children)
	slots []*fakeSlot
	byID  map[*id.ID]*fakeSlot

	held    []*id.Event // taken and not yet acknowledged (hand-pumped modes)
	hpol    [8]byte     // what reactor handlers do, by event
	failing map[string]bool
	steps   []string // what the program did, for failure reports
}

var (
	fakeDst    = netip.MustParseAddrPort("127.0.0.1:7471")
	fakeGroups = [2]netip.Addr{netip.MustParseAddr("239.1.1.1"), netip.MustParseAddr("239.1.1.2")}
	fakeFails  = [...]string{"bind", "resolve_addr", "resolve_route", "listen", "connect", "accept", "join", "create"}
)

const maxFakeSlots = 8

// runFake runs the program c describes and checks the journal, that every
// Destroy returned and that nothing leaked.
func runFake(t T, c chooser) {
	lk := snapshot()
	d := &fakeDriver{t: t, c: c, mode: c.intn(numModes), rec: newRecorder(),
		byID: make(map[*id.ID]*fakeSlot), failing: make(map[string]bool)}
	d.f = fakefab.New("fuzz", false)
	for k := range d.chs {
		ch, err := channel.New(channel.WithFabric(d.f))
		if err != nil {
			t.Fatalf("channel: %v", err)
		}
		d.chs[k] = ch
	}
	for k := range d.hpol {
		d.hpol[k] = byte(c.intn(256))
	}
	if d.mode >= modeReactor {
		workers := 0
		if d.mode == modePool {
			workers = 2
		}
		r, err := reactor.New(reactor.WithWorkers(workers))
		if err != nil {
			t.Fatalf("reactor: %v", err)
		}
		d.r = r
		for _, ch := range d.chs {
			if err := r.Register(ch, handlers.Func(d.handle)); err != nil {
				t.Fatalf("register: %v", err)
			}
		}
	} else {
		for _, ch := range d.chs {
			ch.SetNonblocking(true)
		}
	}
	for n := 0; n < 200 && c.more(); n++ {
		d.step()
	}
	d.teardown()
	d.rec.stop()
	var tolerate []journal.ViolationKind
	if d.mode != modeLegal {
		tolerate = append(tolerate, journal.IllegalEvent)
	}
	if err := d.rec.check(tolerate...); err != nil {
		d.fatalf("%s%v", d.rec.picture(t, c, tolerate...), err)
	}
	lk.verify(t)
}

func (d *fakeDriver) logf(format string, args ...any) {
	if len(d.steps) < 400 {
		d.steps = append(d.steps, sprintf(format, args...))
	}
}

// fatalf fails with the program's steps.
func (d *fakeDriver) fatalf(format string, args ...any) {
	for _, s := range d.steps {
		d.t.Logf("step: %s", s)
	}
	d.t.Fatalf("mode %s: "+format, append([]any{modeNames[d.mode]}, args...)...)
}

// live returns the slots whose ids are not destroyed.
func (d *fakeDriver) live() []*fakeSlot {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []*fakeSlot
	for _, s := range d.slots {
		if s.cm.State() != id.StateDestroyed {
			out = append(out, s)
		}
	}
	return out
}

func (d *fakeDriver) pick() *fakeSlot {
	l := d.live()
	if len(l) == 0 {
		return nil
	}
	return l[d.c.intn(len(l))]
}

// pickWaiting picks, mostly, an asynchronous id waiting for an answer.
func (d *fakeDriver) pickWaiting() *fakeSlot {
	var w []*fakeSlot
	for _, s := range d.live() {
		if len(progressEvents(s.cm.State())) > 0 && !s.cm.Synchronous() {
			w = append(w, s)
		}
	}
	if len(w) == 0 || d.c.intn(4) == 0 {
		return d.pick()
	}
	return w[d.c.intn(len(w))]
}

func (d *fakeDriver) add(cm *id.ID) *fakeSlot {
	d.mu.Lock()
	defer d.mu.Unlock()
	if s := d.byID[cm]; s != nil {
		return s
	}
	ep, _ := cm.Endpoint().(*fakefab.Endpoint)
	s := &fakeSlot{cm: cm, ep: ep}
	d.slots = append(d.slots, s)
	d.byID[cm] = s
	return s
}

func (d *fakeDriver) slotOf(cm *id.ID) *fakeSlot {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.byID[cm]
}

func (d *fakeDriver) handPumped() bool { return d.mode < modeReactor }

// step runs one operation of the program.
func (d *fakeDriver) step() {
	switch op := d.c.intn(16); {
	case op < 2:
		d.create(false)
	case op == 2:
		d.create(true)
	case op < 8:
		if s := d.pick(); s != nil {
			d.call(s)
		}
	case op < 11:
		if s := d.pickWaiting(); s != nil {
			d.inject(s)
		}
	case op == 11:
		if s := d.pick(); s != nil {
			d.injectRequest(s)
		}
	case op == 12:
		if s := d.pick(); s != nil {
			d.injectJoin(s)
		}
	case op == 13:
		d.pump()
	case op == 14:
		d.ackHeld()
	default:
		name := fakeFails[d.c.intn(len(fakeFails))]
		d.failing[name] = !d.failing[name]
		var err error
		if d.failing[name] {
			err = syscall.EIO
		}
		d.f.Fail(name, err)
		d.logf("fail %s: %v", name, d.failing[name])
	}
}

var fakePS = [...]struct {
	ps id.PortSpace
	qp id.QPType
}{{id.PSTCP, id.RC}, {id.PSUDP, id.UD}, {id.PSIB, id.RC}, {id.PSIB, id.UD}, {id.PSIPoIB, id.UD}}

func (d *fakeDriver) create(sync bool) {
	if n := len(d.live()); n >= maxFakeSlots || (n > 2 && d.c.intn(3) != 0) {
		return
	}
	p := fakePS[d.c.intn(len(fakePS))]
	opts := []id.Option{id.WithJournal(d.rec.j), id.WithQPType(p.qp)}
	var ch id.Channel
	if sync {
		opts = append(opts, id.WithFabric(d.f))
	} else {
		ch = d.chs[d.c.intn(2)]
	}
	cm, err := id.Create(ch, nil, p.ps, opts...)
	d.logf("create sync=%v %s %s: %s", sync, p.ps, p.qp, errnoOf(err))
	if err != nil {
		if !d.failing["create"] {
			d.fatalf("create: %v", err)
		}
		return
	}
	d.add(cm)
}

var fakeCalls = [...]journal.Call{journal.CallBind, journal.CallResolveAddr, journal.CallResolveRoute, journal.CallListen, journal.CallConnect,
	journal.CallAccept, journal.CallReject, journal.CallEstablish, journal.CallDisconnect, journal.CallJoin, journal.CallLeave, journal.CallMigrate,
	journal.CallSetOption, journal.CallNotify, journal.CallGetRequest, journal.CallDestroy}

// call makes one call on s: mostly one that moves it along, sometimes any
// the model allows, now and then any at all.
func (d *fakeDriver) call(s *fakeSlot) {
	st, qp := s.cm.State(), s.cm.QPType()
	var allowed, progress []journal.Call
	for _, x := range fakeCalls {
		if _, ok := journal.CallAllowed(st, x, qp); ok {
			allowed = append(allowed, x)
		}
	}
	for _, x := range callseq.ProgressCalls(st) {
		if _, ok := journal.CallAllowed(st, x, qp); ok {
			progress = append(progress, x)
		}
	}
	c := fakeCalls[d.c.intn(len(fakeCalls))]
	switch r := d.c.intn(16); {
	case r == 0:
	case r == 1:
		c = journal.CallDestroy
	case r < 5 || len(progress) == 0:
		if len(allowed) > 0 {
			c = allowed[d.c.intn(len(allowed))]
		}
	default:
		c = progress[d.c.intn(len(progress))]
	}
	if s.cm.Synchronous() && callseq.Blocks(c, st, qp) {
		d.syncCall(s, c, st)
		return
	}
	err := d.do(s, c, context.Background())
	d.logf("%s on %d (%s, %s): %s", c, s.cm.Handle(), st, qp, errnoOf(err))
	if _, ok := journal.CallAllowed(st, c, qp); !ok && err == nil && d.handPumped() && c != journal.CallGetRequest {
		d.fatalf("%s succeeded on id %d in state %s", c, s.cm.Handle(), st)
	}
}

// do makes call c on s; calls that wait for acknowledgements (destroy,
// migrate, leave) are bounded, and the events the driver holds are
// acknowledged meanwhile.
func (d *fakeDriver) do(s *fakeSlot, c journal.Call, ctx context.Context) error {
	cm := s.cm
	switch c {
	case journal.CallBind:
		return cm.Bind(netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), uint16(d.c.intn(3))))
	case journal.CallResolveAddr:
		return cm.ResolveAddrContext(ctx, netip.AddrPort{}, fakeDst, time.Second)
	case journal.CallResolveRoute:
		return cm.ResolveRouteContext(ctx, time.Second)
	case journal.CallListen:
		return cm.Listen(d.c.intn(3))
	case journal.CallConnect:
		return cm.ConnectContext(ctx, &id.ConnParam{PrivateData: make([]byte, d.c.intn(4)*30)})
	case journal.CallAccept:
		return cm.AcceptContext(ctx, nil)
	case journal.CallReject:
		return cm.Reject(make([]byte, d.c.intn(3)*70))
	case journal.CallEstablish:
		return cm.Establish()
	case journal.CallDisconnect:
		return cm.DisconnectContext(ctx)
	case journal.CallJoin:
		return cm.JoinMulticastContext(ctx, fakeGroups[d.c.intn(2)], id.JoinFlags(d.c.intn(2)), "join")
	case journal.CallSetOption:
		switch d.c.intn(4) {
		case 0:
			return cm.SetTOS(byte(d.c.intn(256)))
		case 1:
			return cm.SetReuseAddr(d.c.intn(2) == 1)
		case 2:
			return cm.SetAckTimeout(byte(d.c.intn(32)))
		default:
			return cm.SetOption(id.OptionLevelIB, id.OptionIBPath, make([]byte, 72))
		}
	case journal.CallNotify:
		return cm.Notify(id.AsyncCommEst)
	case journal.CallGetRequest:
		child, err := cm.GetRequestContext(ctx)
		if child != nil {
			d.add(child)
		}
		return err
	}
	// Calls that wait for acknowledgements.
	var err error
	var fn func()
	switch c {
	case journal.CallLeave:
		g := fakeGroups[d.c.intn(2)]
		fn = func() { err = cm.LeaveMulticast(g) }
	case journal.CallMigrate:
		var to id.Channel
		if k := d.c.intn(3); k < 2 {
			to = d.chs[k]
		}
		fn = func() { err = cm.Migrate(to) }
	case journal.CallDestroy:
		fn = func() { err = cm.Destroy() }
	default:
		d.fatalf("no call %s", c)
	}
	meanwhile := func() {
		d.ackHeld()
		if c == journal.CallDestroy || c == journal.CallMigrate {
			d.releaseRequests(cm)
		}
	}
	if !bounded(5*time.Second, fn, meanwhile) {
		d.fatalf("%s on id %d did not return within 5s\n%s", c, cm.Handle(), stacks())
	}
	return err
}

// status gives an event a plausible status.
func (d *fakeDriver) status(t id.EventType) int32 {
	switch t {
	case id.EventAddrError, id.EventRouteError, id.EventUnreachable, id.EventConnectError, id.EventMulticastError:
		return [...]int32{-int32(syscall.ETIMEDOUT), -int32(syscall.EHOSTUNREACH), 1, -int32(syscall.EINVAL)}[d.c.intn(4)]
	case id.EventRejected:
		return [...]int32{28, 8, -int32(syscall.ECONNRESET)}[d.c.intn(3)]
	}
	return 0
}

// syncCall makes a call that waits on a synchronous id while a responder
// plays the network: once the call reached the fabric it injects one of
// the call's natural outcomes (or, now and then, nothing: the call's
// context then ends it and the id is abandoned).
func (d *fakeDriver) syncCall(s *fakeSlot, c journal.Call, st id.State) {
	qp := s.cm.QPType()
	next, allowed := journal.CallAllowed(st, c, qp)
	var outs []id.EventType
	for _, e := range callseq.Outcomes(c, qp) {
		if journal.EventAllowed(next, e, qp) {
			outs = append(outs, e)
		}
	}
	answer := len(outs) > 0 && d.c.intn(8) != 0
	var ev id.EventType
	var status int32
	if answer {
		ev = outs[d.c.intn(len(outs))]
		status = d.status(ev)
	}
	timeout := 2 * time.Millisecond
	if answer {
		timeout = 5 * time.Second
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if c == journal.CallGetRequest {
		if allowed && answer && s.ep != nil {
			s.ep.InjectRequest([]byte("sync"))
		}
		err := d.do(s, c, ctx)
		d.logf("sync get_request on %d: %s", s.cm.Handle(), errnoOf(err))
		return
	}
	before := len(s.ep.Calls())
	// A synchronous call takes the next event on the id's private channel,
	// whatever it is (librdmacm's ucma_complete): an event injected earlier
	// and not yet taken answers this call instead of the injected answer.
	stray := s.ep.Queued() > 0
	fabricOp := c.String()
	if c == journal.CallJoin {
		fabricOp = "join"
	}
	var group netip.Addr
	done := make(chan struct{})
	var err error
	go func() {
		defer close(done)
		err = d.do(s, c, ctx)
	}()
	injected := false
	if answer && allowed && !d.failing[fabricOp] {
		deadline := time.Now().Add(2 * time.Second)
	wait:
		for time.Now().Before(deadline) {
			select {
			case <-done:
				break wait
			default:
			}
			if len(s.ep.Calls()) > before {
				if c == journal.CallJoin {
					for _, g := range fakeGroups {
						if s.ep.InjectJoin(g, ev, status) {
							group, injected = g, true
							break
						}
					}
				} else {
					injected = s.ep.Inject(ev, status, nil)
				}
				if injected {
					break
				}
			}
			time.Sleep(50 * time.Microsecond)
		}
	}
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		d.fatalf("sync %s on id %d did not return\n%s", c, s.cm.Handle(), stacks())
	}
	d.logf("sync %s on %d (%s): answer %v %s %d (group %s) injected %v: %s", c, s.cm.Handle(), st, answer, ev, status, group, injected, errnoOf(err))
	if injected && !stray && err != nil && status == 0 && ev != id.EventRejected {
		d.fatalf("sync %s answered with %s failed: %v", c, ev, err)
	}
	if injected && errors.Is(err, id.ErrCanceled) {
		d.fatalf("sync %s answered with %s was abandoned", c, ev)
	}
}

// legalEvents lists the events the driver may inject for s.
func (d *fakeDriver) legalEvents(s *fakeSlot) []id.EventType {
	st, qp := s.cm.State(), s.cm.QPType()
	var out []id.EventType
	for e := id.EventType(0); e < fabric.NumEventTypes; e++ {
		switch e {
		case id.EventConnectRequest, id.EventMulticastJoin, id.EventMulticastError:
			continue
		case id.EventDeviceRemoval:
			if d.c.intn(4) != 0 {
				continue // it ends the id's life: rarely
			}
		case id.EventTimewaitExit:
			if s.timewait {
				continue
			}
		}
		if journal.EventAllowed(st, e, qp) {
			out = append(out, e)
		}
	}
	return out
}

// progressEvents are the answers to what an id in state st waits for.
func progressEvents(st id.State) []id.EventType {
	switch st {
	case id.StateAddrQuery:
		return []id.EventType{id.EventAddrResolved, id.EventAddrResolved, id.EventAddrResolved, id.EventAddrError}
	case id.StateRouteQuery:
		return []id.EventType{id.EventRouteResolved, id.EventRouteResolved, id.EventRouteResolved, id.EventRouteError}
	case id.StateConnect:
		return []id.EventType{id.EventEstablished, id.EventEstablished, id.EventEstablished, id.EventRejected,
			id.EventUnreachable, id.EventConnectError, id.EventConnectResponse, id.EventAddrError}
	case id.StateAccept:
		return []id.EventType{id.EventEstablished, id.EventEstablished, id.EventDisconnected, id.EventRejected, id.EventUnreachable}
	case id.StateEstablished, id.StateConnectResponse:
		return []id.EventType{id.EventDisconnected, id.EventRejected}
	case id.StateDisconnected:
		return []id.EventType{id.EventTimewaitExit}
	case id.StateConnectRequest:
		return []id.EventType{id.EventRejected}
	}
	return nil
}

// inject reports an event for s, as the fabric would: in the legal mode
// mostly the answer s waits for, sometimes any the model allows; in the
// other modes also any event at all.
func (d *fakeDriver) inject(s *fakeSlot) {
	if s.ep == nil {
		return
	}
	var e id.EventType
	if d.mode == modeLegal && s.cm.Synchronous() {
		return // its next blocking call would take it as its answer
	}
	legal := d.legalEvents(s)
	var progress []id.EventType
	for _, x := range progressEvents(s.cm.State()) {
		if slices.Contains(legal, x) {
			progress = append(progress, x)
		}
	}
	switch r := d.c.intn(16); {
	case r < 2 && d.mode != modeLegal:
		e = id.EventType(d.c.intn(fabric.NumEventTypes + 1)) // and one past USER
		if e == id.EventConnectRequest {
			e = id.EventUser
		}
	case r < 4 || len(progress) == 0:
		if len(legal) == 0 {
			return
		}
		e = legal[d.c.intn(len(legal))]
	default:
		e = progress[d.c.intn(len(progress))]
	}
	status := d.status(e)
	mark := d.rec.j.Len()
	ok := s.ep.Inject(e, status, []byte("pd"))
	d.logf("inject %s %d on %d (%s): %v", e, status, s.cm.Handle(), s.cm.State(), ok)
	if ok && e == id.EventTimewaitExit {
		s.timewait = true
	}
	if d.mode == modeLegal {
		d.pump()
		if ok {
			d.mustRecord(mark, func(r *journal.Record) bool {
				return r.ID == s.cm.Handle() && r.Kind == journal.KindEvent && r.Event == e && r.Status == status
			}, "%s for id %d", e, s.cm.Handle())
		}
	}
}

// mustRecord fails unless a record after sequence number mark matches: a
// legal event the fabric reported was delivered and journaled.
func (d *fakeDriver) mustRecord(mark uint64, match func(*journal.Record) bool, format string, args ...any) {
	for _, r := range d.rec.records() {
		if r.Seq > mark && match(&r) {
			return
		}
	}
	d.fatalf("lost: no record of "+format, args...)
}

// injectRequest reports a connection request to s.
func (d *fakeDriver) injectRequest(s *fakeSlot) {
	if s.ep == nil || (d.mode == modeLegal && (s.cm.State() != id.StateListen || s.cm.Synchronous())) {
		return
	}
	mark := d.rec.j.Len()
	child := s.ep.InjectRequest([]byte("req"))
	d.logf("inject request on %d (%s): %v", s.cm.Handle(), s.cm.State(), child != nil)
	if d.mode == modeLegal {
		d.pump()
		if child != nil {
			d.mustRecord(mark, func(r *journal.Record) bool {
				return r.Parent == s.cm.Handle() && r.Kind == journal.KindEvent && r.Event == id.EventConnectRequest
			}, "the request to listener %d", s.cm.Handle())
		}
	}
}

// injectJoin reports a multicast event for a group s joined.
func (d *fakeDriver) injectJoin(s *fakeSlot) {
	if s.ep == nil || (d.mode == modeLegal && (s.cm.Synchronous() || s.cm.State() == id.StateIdle)) {
		return
	}
	t := []id.EventType{id.EventMulticastJoin, id.EventMulticastError}[d.c.intn(2)]
	if d.mode == modeLegal && !journal.EventAllowed(s.cm.State(), t, s.cm.QPType()) {
		return
	}
	g := fakeGroups[d.c.intn(2)]
	mark := d.rec.j.Len()
	ok := s.ep.InjectJoin(g, t, d.status(t))
	d.logf("inject %s %s on %d: %v", t, g, s.cm.Handle(), ok)
	if d.mode == modeLegal {
		d.pump()
		if ok {
			d.mustRecord(mark, func(r *journal.Record) bool {
				return r.ID == s.cm.Handle() && r.Kind == journal.KindEvent && r.Event == t
			}, "%s for id %d", t, s.cm.Handle())
		}
	}
}

// pump takes every queued event of the driver's channels and handles it
// (hand-pumped modes); with a reactor, it gives the handlers a moment.
func (d *fakeDriver) pump() {
	if !d.handPumped() {
		time.Sleep(time.Duration(d.c.intn(3)) * 100 * time.Microsecond)
		return
	}
	for again := true; again; {
		again = false
		for _, ch := range d.chs {
			ev, err := ch.GetEvent()
			if err != nil {
				if !errors.Is(err, syscall.EAGAIN) {
					d.fatalf("GetEvent: %v", err)
				}
				continue
			}
			again = true
			d.got(ev)
		}
	}
}

// got handles an event taken by hand: acknowledge it, hold it, or run a
// handler on it that acts on its id.
func (d *fakeDriver) got(ev *id.Event) {
	if ev.Type == id.EventConnectRequest {
		d.add(ev.ID)
	}
	d.logf("got %s status %d for %d (%s)", ev.Type, ev.Status, ev.ID.Handle(), ev.ID.State())
	switch a := d.c.intn(4); a {
	case 0:
		_ = ev.Ack()
	case 1:
		d.held = append(d.held, ev)
	default:
		pol := byte(d.c.intn(256))
		if !bounded(5*time.Second, func() {
			_ = ev.Handle(handlers.Func(func(ev *id.Event) error { d.act(ev, pol); return nil }))
		}, nil) {
			d.fatalf("handler (policy %d) of %s did not return within 5s\n%s", pol, ev.Type, stacks())
		}
	}
}

// handle is the reactor's handler.
func (d *fakeDriver) handle(ev *id.Event) error {
	if ev.Type == id.EventConnectRequest {
		d.add(ev.ID)
	}
	d.act(ev, d.hpol[ev.Seq%uint64(len(d.hpol))])
	return nil
}

// act is what a handler does with its event's id.
func (d *fakeDriver) act(ev *id.Event, pol byte) {
	cm := ev.ID
	if ev.Type == id.EventConnectRequest {
		switch pol % 4 {
		case 0:
			if !cm.Synchronous() || cm.QPType() == id.UD {
				_ = cm.Accept(nil)
			}
		case 1:
			_ = cm.Reject(nil)
		case 2:
			_ = cm.Destroy()
		}
		return
	}
	switch pol % 6 {
	case 0:
		_ = cm.Destroy()
	case 1:
		if s := d.slotOf(cm); s != nil && s.ep != nil {
			_ = cm.Migrate(d.chs[pol/6%2])
		}
	case 2:
		if pol > 200 {
			_ = cm.Migrate(nil) // now synchronous: events go to its private channel
		}
	case 3:
		if !cm.Synchronous() {
			_ = cm.Disconnect()
		}
	}
}

// releaseRequests destroys the synchronous ids born from listener l's
// requests that still hold their CONNECT_REQUEST as their current event:
// that event counts against the listener, and as in librdmacm only the new
// id's next call or its destroy acknowledges it, so the listener's destroy
// (or migrate) waits for them.
func (d *fakeDriver) releaseRequests(l *id.ID) {
	for _, s := range d.live() {
		if s.cm == l || !s.cm.Synchronous() {
			continue
		}
		if ev := s.cm.Event(); ev != nil && ev.Type == id.EventConnectRequest && ev.ListenID == l {
			d.logf("destroy %d, holding a request of %d", s.cm.Handle(), l.Handle())
			_ = s.cm.Destroy()
		}
	}
}

// ackHeld acknowledges the events the driver holds.
func (d *fakeDriver) ackHeld() {
	for _, ev := range d.held {
		if err := ev.Ack(); err != nil {
			d.fatalf("ack held %s: %v", ev.Type, err)
		}
	}
	d.held = d.held[:0]
}

// teardown stops dispatching, destroys every id (each Destroy bounded)
// and closes the channels.
func (d *fakeDriver) teardown() {
	if d.r != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := d.r.Close(ctx)
		cancel()
		if err != nil {
			d.fatalf("reactor close: %v\n%s", err, stacks())
		}
	}
	d.ackHeld()
	// Every live id's state is the fold of its journal.
	states := journal.Replay(d.rec.records())
	for _, s := range d.live() {
		if got, want := states[s.cm.Handle()], s.cm.State(); got != want {
			d.fatalf("id %d: journal folds to %s, id is in %s", s.cm.Handle(), got, want)
		}
	}
	l := d.live()
	for k := len(l) - 1; k >= 0; k-- { // ids born from requests before their listeners
		cm := l[k].cm
		if !bounded(5*time.Second, func() { _ = cm.Destroy() }, func() { d.ackHeld(); d.releaseRequests(cm) }) {
			d.fatalf("destroy of id %d (%s) did not return within 5s\n%s", cm.Handle(), cm.State(), stacks())
		}
	}
	// Events left in the channels (their ids are gone) are dropped.
	for _, ch := range d.chs {
		ch.SetNonblocking(true)
		for {
			ev, err := ch.GetEvent()
			if err != nil {
				break
			}
			d.fatalf("event %s for id %d after every id was destroyed", ev.Type, ev.ID.Handle())
		}
		if err := ch.Close(); err != nil {
			for _, s := range d.slots {
				if s.ep != nil && !s.ep.Destroyed() {
					d.t.Logf("endpoint of %d (%s) alive: %v", s.cm.Handle(), s.cm.State(), s.ep.Calls())
				}
			}
			d.fatalf("channel close: %v", err)
		}
	}
}

// FuzzFake drives random programs over the fake fabric (see runFake).
func FuzzFake(f *testing.F) {
	for _, seed := range fakeSeeds {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		runFake(t, &bytesChooser{b: b})
	})
}

// fakeSeeds are programs worth keeping: each mode with a connection
// life-cycle, a listener with requests, sync calls and cancels, multicast.
var fakeSeeds = [][]byte{
	// mode legal: create, resolve, route, connect, answers, disconnect.
	{0, 1, 2, 3, 4, 5, 6, 7, 0, 0, 0, 3, 0, 1, 1, 9, 3, 0, 1, 2, 9, 3, 0, 1, 4, 9, 9, 0, 0, 9, 13, 14},
	{0, 9, 9, 9, 9, 9, 9, 9, 9, 0, 0, 0, 3, 0, 1, 3, 0, 0, 11, 0, 11, 0, 13, 13, 3, 0, 1, 5, 13, 14, 3, 0, 0, 15},
	{1, 9, 9, 9, 9, 9, 9, 9, 9, 2, 1, 3, 0, 1, 1, 3, 0, 1, 2, 3, 0, 1, 4, 9, 3, 0, 2, 8, 3, 0, 0, 15, 3},
	{2, 1, 2, 3, 4, 5, 6, 7, 8, 0, 0, 0, 0, 1, 0, 3, 0, 1, 3, 11, 0, 11, 0, 11, 0, 13, 9, 1, 9, 2, 3, 1, 0, 15},
	{3, 7, 7, 7, 7, 7, 7, 7, 7, 0, 0, 1, 0, 1, 1, 3, 0, 1, 0, 3, 0, 1, 9, 12, 0, 0, 12, 0, 1, 13, 3, 0, 1, 10, 15, 2},
	{0, 5, 5, 5, 5, 5, 5, 5, 5, 0, 1, 2, 3, 0, 1, 0, 3, 0, 1, 9, 0, 12, 0, 0, 12, 0, 1, 13, 3, 0, 1, 10, 1, 13, 14},
	{1, 3, 3, 3, 3, 3, 3, 3, 3, 2, 0, 3, 0, 1, 3, 3, 0, 1, 14, 11, 0, 3, 0, 0, 15, 3, 0, 0, 15, 15, 7, 15, 5},
}

// TestRapidFake is FuzzFake's programs drawn by rapid (100 by default, see
// -rapid.checks); a failure prints the seed to rerun with -rapid.seed.
func TestRapidFake(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		runFake(rt, &rapidChooser{t: rt, steps: rapid.IntRange(1, 80).Draw(rt, "steps")})
	})
}
