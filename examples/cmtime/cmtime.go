package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cmrt/cmrt/channel"
	"github.com/cmrt/cmrt/examples/internal/tool"
	"github.com/cmrt/cmrt/fabric/kernel"
	"github.com/cmrt/cmrt/id"
)

// step is a row of the table; the numbers are rdma-core's, and the
// out-of-band sync sends them.
type step int

const (
	stepFullConnect step = iota
	stepCreateID
	stepBind
	stepResolveAddr
	stepResolveRoute
	stepCreateQP
	stepInitQPAttr
	stepInitQP
	stepRTRQPAttr
	stepRTRQP
	stepRTSQPAttr
	stepRTSQP
	stepConnect
	stepEstablish
	stepDisconnect
	stepDestroyID
	stepDestroyQP
	stepCnt
)

var stepNames = [stepCnt]string{
	"full connect", "create id", "bind addr", "resolve addr", "resolve route",
	"create qp", "init qp attr", "init qp", "rtr qp attr", "rtr qp", "rts qp attr",
	"rts qp", "cm connect", "establish", "disconnect", "destroy id", "destroy qp",
}

// connectWindow is how many connection requests the client keeps
// outstanding at most: a listener's largest backlog. rdma-core's cmtime
// issues them all at once; past the backlog a listener refuses requests
// (iWARP, and so the software fabric) or drops them for the IB CM to
// retry seconds later.
const connectWindow = id.MaxBacklog

// passiveQPNOffset separates the server's fake QP numbers from the
// client's (24-bit QP numbers).
const passiveQPNOffset = 0x800000

var errAborted = errors.New("aborted")

// node is one connection.
type node struct {
	id      *id.ID
	sock    int
	qp      bool // a QP was created on the id
	times   [stepCnt][2]uint64
	retries int
}

// qpAttrEndpoint is an endpoint that computes QP attributes
// (rdma_init_qp_attr): the kernel fabric's.
type qpAttrEndpoint interface {
	InitQPAttr(state kernel.QPState) (kernel.QPAttr, error)
}

// test is one cmtime process.
type test struct {
	cfg            config
	stdout, stderr io.Writer
	isClient       bool
	src, dst       netip.AddrPort // rdma_getaddrinfo's ai_src_addr and ai_dst_addr
	timeout        time.Duration

	ch       *channel.Channel
	wq       *workQueue
	oob      *oob
	dataPath bool // the fabric creates QPs
	qpAttr   bool // the fabric computes QP attributes (rdma_init_qp_attr)

	curQPN     atomic.Uint32 // 0: real QPs; otherwise the next fake QP number
	mimicDelay atomic.Uint32

	epoch time.Time

	mu          sync.Mutex  // guards what follows
	cq          id.SharedCQ // the one completion queue of every QP (sharedCQ)
	noSharedCQ  bool        // the fabric gives each QP its own queues
	nodes       []node
	nodeIndex   int
	times       [stepCnt][2]uint64
	connections int

	completed  [stepCnt]atomic.Int64
	awaited    [stepCnt]atomic.Int64 // the count waitCount waits for; 0: none
	discEvents atomic.Int64
	kick       chan struct{} // poked when a step reaches the awaited count

	abortOnce sync.Once
	abort     chan struct{}

	prog progress
}

func newTest(cfg config, stdout, stderr io.Writer) *test {
	t := &test{
		cfg: cfg, stdout: stdout, stderr: stderr, isClient: cfg.dst != "",
		timeout: time.Duration(cfg.timeoutMS) * time.Millisecond,
		epoch:   time.Now(), kick: make(chan struct{}, 1), abort: make(chan struct{}),
		nodes: make([]node, cfg.iter),
	}
	t.prog.w, t.prog.after = stderr, time.Second
	t.mimicDelay.Store(cfg.mimicDelay)
	return t
}

// --- failure

// fail ends the test: the first failure is reported, the others are not.
func (t *test) fail(report func()) {
	t.abortOnce.Do(func() {
		report()
		close(t.abort)
	})
}

func (t *test) perrorFail(what string, err error) {
	t.fail(func() { tool.Perror(t.stderr, what, err) })
}

func (t *test) printfFail(format string, args ...any) {
	t.fail(func() { fmt.Fprintf(t.stdout, format, args...) })
}

// errorfFail reports a failure of cmrt's own on stderr.
func (t *test) errorfFail(format string, args ...any) {
	t.fail(func() { fmt.Fprintf(t.stderr, format, args...) })
}

func (t *test) aborted() bool {
	select {
	case <-t.abort:
		return true
	default:
		return false
	}
}

func (t *test) printf(format string, args ...any) { fmt.Fprintf(t.stdout, format, args...) }

// --- timing

func (t *test) now() uint64 { return uint64(time.Since(t.epoch).Microseconds()) + 1 }

func (t *test) startPerf(n *node, s step) { t.mu.Lock(); n.times[s][0] = t.now(); t.mu.Unlock() }
func (t *test) endPerf(n *node, s step)   { t.mu.Lock(); n.times[s][1] = t.now(); t.mu.Unlock() }
func (t *test) startTime(s step)          { t.mu.Lock(); t.times[s][0] = t.now(); t.mu.Unlock() }
func (t *test) endTime(s step)            { t.mu.Lock(); t.times[s][1] = t.now(); t.mu.Unlock() }

// complete counts one more connection through step s, and wakes the
// waiter once the count it waits for is reached: waking it for every
// connection cost a goroutine switch per event (rdma-core's main thread
// spins on the counter instead).
func (t *test) complete(s step) int64 {
	v := t.completed[s].Add(1)
	if w := t.awaited[s].Load(); w > 0 && v >= w {
		select {
		case t.kick <- struct{}{}:
		default:
		}
	}
	return v
}

// wait waits until n connections completed step s (the busy waits of
// rdma-core), showing progress on long steps. It returns false when the
// test failed meanwhile.
func (t *test) wait(s step, n int, what string) bool {
	t.prog.begin(what, n)
	defer t.prog.end()
	return t.waitCount(s, n, what)
}

// waitCount is wait within a step whose progress display is already begun.
func (t *test) waitCount(s step, n int, what string) bool {
	tick := time.NewTicker(progressTick)
	defer tick.Stop()
	var dead chan struct{}
	if t.oob != nil {
		dead = t.oob.dead
	}
	// Publish the target before reading the count: a completion that the
	// read misses sees the target and kicks.
	t.awaited[s].Store(int64(n))
	defer t.awaited[s].Store(0)
	for {
		done := int(t.completed[s].Load())
		if done >= n {
			return true
		}
		select {
		case <-t.kick:
		case <-t.abort:
			return false
		case <-dead:
			t.errorfFail("%s: %v while waiting for %s (%d of %d done)\n", prog, errOOBClosed, what, done, n)
			return false
		case <-tick.C:
			t.prog.update(done)
		}
	}
}

func sleepUS(us uint32) {
	if us > 0 {
		time.Sleep(time.Duration(us) * time.Microsecond)
	}
}

// show prints the table of a test of iter connections (show_perf).
func (t *test) show(iter int) {
	var sum, max, min [stepCnt]uint64
	var span [stepCnt][2]uint64 // the connections' first start and last end
	t.mu.Lock()
	for i := range stepCnt {
		min[i] = ^uint64(0)
		for c := 0; c < iter; c++ {
			tm := &t.nodes[c].times[i]
			if tm[0] != 0 && tm[1] != 0 {
				if span[i][0] == 0 || tm[0] < span[i][0] {
					span[i][0] = tm[0]
				}
				if tm[1] > span[i][1] {
					span[i][1] = tm[1]
				}
				d := tm[1] - tm[0]
				if tm[1] < tm[0] {
					d = 0
				}
				sum[i] += d
				if d > max[i] {
					max[i] = d
				}
				if d < min[i] {
					min[i] = d
				}
			}
		}
		if min[i] == ^uint64(0) {
			min[i] = 0 // print 0 if there is no data
		}
	}
	times := t.times
	t.mu.Unlock()
	sum[stepFullConnect] = 0 // the sum of full connects means nothing

	if t.curQPN.Load() == 0 {
		t.printf("qp_conn        %10d\n", iter)
	} else {
		t.printf("cm_conn        %10d\n", iter)
	}
	t.printf("threads        %10d\n", t.cfg.threads)
	t.printf("step             avg/iter  total(us)    us/conn    sum(us)    max(us)    min(us)\n")
	n := uint64(iter)
	for i := range stepCnt {
		tm := times[i]
		if tm[0] == 0 && tm[1] == 0 {
			// A step timed only per connection (the server's create qp
			// and QP steps): its span over the connections.
			tm = span[i]
		}
		var d uint64
		if tm[0] != 0 && tm[1] >= tm[0] {
			d = tm[1] - tm[0]
		}
		t.printf("%-13s  %10d %10d %10d %10d %10d %10d\n", stepNames[i], d/n, d, sum[i]/n, sum[i], max[i], min[i])
	}
}

// --- the CM

// connParam is init_conn_param: a real QP's number, or the next fake one.
func (t *test) connParam(n *node) *id.ConnParam {
	p := &id.ConnParam{ResponderResources: 1, InitiatorDepth: 1}
	t.mu.Lock()
	hasQP := n.qp
	t.mu.Unlock()
	if hasQP {
		p.QPNum = n.id.QP().Num()
		return p
	}
	qpn := t.curQPN.Add(1) - 1
	if !t.isClient {
		qpn += passiveQPNOffset
	}
	p.QPNum = qpn & 0xFFFFFF
	return p
}

// sharedCQ returns the completion queue every QP of the run uses for both
// directions, made on cm's device by the first QP's connection, or nil
// where the fabric makes no queue apart from a QP. rdma-core's cmtime
// allocates its PD and one CQ for all its QPs the same way, before the
// first create qp step begins its clock. (cmrt gives each id a protection
// domain of its own: that part stays in the step.)
func (t *test) sharedCQ(cm *id.ID) id.SharedCQ {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.cq == nil && !t.noSharedCQ {
		t.printf("\tAllocating verbs resources\n")
		cq, err := cm.CreateCQ(1)
		if err != nil {
			t.noSharedCQ = true
			return nil
		}
		t.cq = cq
	}
	return t.cq
}

// createQP creates the connection's QP, or sleeps -m microseconds for a
// simulated one.
func (t *test) createQP(n *node) bool {
	realQP := t.curQPN.Load() == 0 // not the simulated QPs of a "no QPs" test
	var cq id.SharedCQ
	if realQP {
		cq = t.sharedCQ(n.id)
	}
	t.startPerf(n, stepCreateQP)
	if realQP {
		attr := &id.QPInitAttr{Cap: id.QPCap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}, SigAll: true,
			SendCQ: cq, RecvCQ: cq}
		if err := n.id.CreateQP(attr); err != nil {
			t.perrorFail("ibv_create_qp", err)
			return false
		}
		t.mu.Lock()
		n.qp = true
		t.mu.Unlock()
	} else {
		sleepUS(t.mimicDelay.Load())
	}
	t.endPerf(n, stepCreateQP)
	t.complete(stepCreateQP)
	return true
}

// modifyQP asks the CM for the attributes of moving the connection's QP to
// state (timed as attrStep) and "modifies" the QP (attrStep+1), which with
// no verbs QP is the -m sleep. Real QPs need nothing: the fabric moves
// them itself, as librdmacm moves the QPs of rdma_create_qp.
func (t *test) modifyQP(n *node, state kernel.QPState, attrStep step) bool {
	t.mu.Lock()
	real := n.qp
	t.mu.Unlock()
	if real {
		t.complete(attrStep + 1)
		return true
	}
	if !t.qpAttr {
		return true
	}
	ep, _ := n.id.Endpoint().(qpAttrEndpoint)
	t.startPerf(n, attrStep)
	if _, err := ep.InitQPAttr(state); err != nil {
		t.perrorFail("rdma_init_qp_attr", err)
		return false
	}
	t.endPerf(n, attrStep)
	t.startPerf(n, attrStep+1)
	sleepUS(t.mimicDelay.Load())
	t.endPerf(n, attrStep+1)
	t.complete(attrStep + 1)
	return true
}

func (t *test) resolveAddr(n *node) {
	t.mu.Lock()
	n.retries = t.cfg.retries
	t.mu.Unlock()
	t.startPerf(n, stepResolveAddr)
	if err := n.id.ResolveAddr(t.src, t.dst, t.timeout); err != nil {
		t.perrorFail("rdma_resolve_addr", err)
	}
}

func (t *test) resolveRoute(n *node) {
	t.mu.Lock()
	n.retries = t.cfg.retries
	t.mu.Unlock()
	t.startPerf(n, stepResolveRoute)
	if err := n.id.ResolveRoute(t.timeout); err != nil {
		t.perrorFail("rdma_resolve_route", err)
	}
}

func (t *test) connect(n *node) bool {
	p := t.connParam(n)
	t.startPerf(n, stepConnect)
	if err := n.id.Connect(p); err != nil {
		t.perrorFail("rdma_connect", err)
		return false
	}
	return true
}

// connectResponse completes a QP-less connection: RTR, RTS, establish.
func (t *test) connectResponse(n *node) {
	if !t.modifyQP(n, kernel.QPStateRTR, stepRTRQPAttr) || !t.modifyQP(n, kernel.QPStateRTS, stepRTSQPAttr) {
		return
	}
	t.startPerf(n, stepEstablish)
	if err := n.id.Establish(); err != nil {
		t.perrorFail("rdma_establish", err)
		return
	}
	t.endPerf(n, stepEstablish)
	t.connected(n)
}

// connected ends a client connection's connect.
func (t *test) connected(n *node) {
	t.endPerf(n, stepConnect)
	t.endPerf(n, stepFullConnect)
	t.complete(stepConnect)
}

// request handles a connection request on the server: QP, its states,
// accept.
func (t *test) request(n *node) {
	if !t.createQP(n) ||
		!t.modifyQP(n, kernel.QPStateInit, stepInitQPAttr) ||
		!t.modifyQP(n, kernel.QPStateRTR, stepRTRQPAttr) ||
		!t.modifyQP(n, kernel.QPStateRTS, stepRTSQPAttr) {
		return
	}
	if err := n.id.Accept(t.connParam(n)); err != nil {
		t.perrorFail("failure accepting", err)
	}
}

func (t *test) clientDisconnect(n *node) {
	t.startPerf(n, stepDisconnect)
	_ = n.id.Disconnect() // rdma-core ignores the result too
	t.endPerf(n, stepDisconnect)
	t.complete(stepDisconnect)
}

func (t *test) serverDisconnect(n *node) {
	t.startPerf(n, stepDisconnect)
	_ = n.id.Disconnect()
	t.endPerf(n, stepDisconnect)
	t.mu.Lock()
	conns := t.connections
	t.mu.Unlock()
	if t.discEvents.Load() >= int64(conns) {
		t.endTime(stepDisconnect)
	}
	t.complete(stepDisconnect)
}

// handle is cma_handler, run by the event goroutine for each event.
func (t *test) handle(ev *id.Event) {
	n, _ := ev.ID.Context().(*node)
	switch ev.Type {
	case id.EventAddrResolved:
		t.endPerf(n, stepResolveAddr)
		t.complete(stepResolveAddr)
	case id.EventRouteResolved:
		t.endPerf(n, stepResolveRoute)
		t.complete(stepResolveRoute)
	case id.EventConnectRequest:
		t.mu.Lock()
		if t.nodeIndex >= t.connections {
			t.mu.Unlock()
			// More requests than this test has connections.
			t.printf("failing connection request\n")
			_ = ev.ID.Reject(nil)
			_ = ev.ID.Destroy()
			return
		}
		if t.nodeIndex == 0 {
			t.printf("\tAccepting\n")
			t.times[stepConnect][0] = t.now()
		}
		n = &t.nodes[t.nodeIndex]
		t.nodeIndex++
		n.id = ev.ID
		t.mu.Unlock()
		ev.ID.SetContext(n)
		t.wq.insert(func() { t.request(n) })
	case id.EventConnectResponse:
		t.wq.insert(func() { t.connectResponse(n) })
	case id.EventEstablished:
		if t.isClient {
			// A fabric that moves the QP itself: no CONNECT_RESPONSE.
			t.connected(n)
			break
		}
		t.mu.Lock()
		conns := t.connections
		t.mu.Unlock()
		if t.complete(stepConnect) >= int64(conns) {
			t.endTime(stepConnect)
		}
	case id.EventAddrError:
		if t.retry(n) && ev.ID.ResolveAddr(t.src, t.dst, t.timeout) == nil {
			break
		}
		t.printfFail("RDMA_CM_EVENT_ADDR_ERROR, error: %d\n", ev.Status)
	case id.EventRouteError:
		if t.retry(n) && ev.ID.ResolveRoute(t.timeout) == nil {
			break
		}
		t.printfFail("RDMA_CM_EVENT_ROUTE_ERROR, error: %d\n", ev.Status)
	case id.EventConnectError, id.EventUnreachable, id.EventRejected:
		t.printfFail("event: %s, error: %d\n", ev.Type, ev.Status)
	case id.EventDisconnected:
		// The client's disconnect phase ends when it has called
		// rdma_disconnect; the out-of-band sync does the rest.
		if !t.isClient {
			if t.discEvents.Add(1) == 1 {
				t.printf("\tDisconnecting\n")
				t.startTime(stepDisconnect)
			}
			t.wq.insert(func() { t.serverDisconnect(n) })
		}
	case id.EventTimewaitExit:
	default:
		t.printfFail("Unhandled event: %d (%s)\n", int(ev.Type), ev.Type)
	}
}

// retry uses up one of the connection's retries (rdma-core's n->retries--).
func (t *test) retry(n *node) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	ok := n.retries != 0
	n.retries--
	return ok
}

// events is the event goroutine (process_events).
func (t *test) events(ctx context.Context, done chan<- struct{}) {
	defer close(done)
	for {
		ev, err := t.ch.GetEventContext(ctx)
		if err != nil {
			if ctx.Err() == nil {
				t.perrorFail("rdma_get_cm_event", err)
			}
			return
		}
		t.handle(ev)
		_ = ev.Ack()
	}
}

// --- tests

// reset prepares a test of iter connections and syncs with the peer.
func (t *test) reset(iter int) bool {
	t.mu.Lock()
	t.nodeIndex = 0
	t.connections = iter
	t.times = [stepCnt][2]uint64{}
	clear(t.nodes[:iter])
	t.mu.Unlock()
	t.discEvents.Store(0)
	for i := range t.completed {
		t.completed[i].Store(0)
	}
	return t.sync(0)
}

// sync is the out-of-band sync point after step s (0: a test starts).
func (t *test) sync(s step) bool {
	if t.oob == nil {
		return !t.aborted()
	}
	var err error
	if t.isClient {
		err = t.oob.sendRecv(byte(s), t.abort)
	} else {
		err = t.oob.recvSend(byte(s), t.abort)
	}
	if err != nil {
		if !errors.Is(err, errAborted) {
			t.errorfFail("%s: out-of-band sync: %v\n", prog, err)
		}
		return false
	}
	return true
}

// each queues fn for each of the first iter connections.
func (t *test) each(iter int, fn func(n *node)) {
	for i := 0; i < iter; i++ {
		n := &t.nodes[i]
		t.wq.insert(func() {
			if !t.aborted() {
				fn(n)
			}
		})
	}
}

func (t *test) destroyQPs(iter int) {
	t.startTime(stepDestroyQP)
	for i := 0; i < iter; i++ {
		n := &t.nodes[i]
		t.startPerf(n, stepDestroyQP)
		t.mu.Lock()
		cm, qp := n.id, n.qp
		n.qp = false
		t.mu.Unlock()
		if qp {
			_ = cm.DestroyQP()
		}
		t.endPerf(n, stepDestroyQP)
	}
	t.endTime(stepDestroyQP)
}

func (t *test) destroyIDs(iter int) {
	t.startTime(stepDestroyID)
	for i := 0; i < iter; i++ {
		n := &t.nodes[i]
		t.startPerf(n, stepDestroyID)
		t.mu.Lock()
		cm := n.id
		n.id = nil
		t.mu.Unlock()
		if cm != nil {
			_ = cm.Destroy()
		}
		t.endPerf(n, stepDestroyID)
	}
	t.endTime(stepDestroyID)
}

// destroyAll releases whatever a failed test left.
func (t *test) destroyAll() {
	t.destroyQPs(len(t.nodes))
	t.destroyIDs(len(t.nodes))
}

func (t *test) clientConnect(iter int) bool {
	if !t.reset(iter) {
		return false
	}
	t.startTime(stepFullConnect)
	t.printf("\tCreating IDs\n")
	t.startTime(stepCreateID)
	for i := 0; i < iter; i++ {
		n := &t.nodes[i]
		t.startPerf(n, stepFullConnect)
		t.startPerf(n, stepCreateID)
		cm, err := id.Create(t.ch, n, id.PSTCP)
		if err != nil {
			t.perrorFail("rdma_create_id", err)
			return false
		}
		t.mu.Lock()
		n.id = cm
		t.mu.Unlock()
		t.endPerf(n, stepCreateID)
	}
	t.endTime(stepCreateID)

	if t.cfg.src != "" {
		t.printf("\tBinding addresses\n")
		t.startTime(stepBind)
		for i := 0; i < iter; i++ {
			n := &t.nodes[i]
			t.startPerf(n, stepBind)
			if err := n.id.Bind(t.src); err != nil {
				t.perrorFail("rdma_bind_addr", err)
				return false
			}
			t.endPerf(n, stepBind)
		}
		t.endTime(stepBind)
	}

	t.printf("\tResolving addresses\n")
	t.startTime(stepResolveAddr)
	t.each(iter, t.resolveAddr)
	if !t.wait(stepResolveAddr, iter, "resolve addr") {
		return false
	}
	t.endTime(stepResolveAddr)

	t.printf("\tResolving routes\n")
	t.startTime(stepResolveRoute)
	t.each(iter, t.resolveRoute)
	if !t.wait(stepResolveRoute, iter, "resolve route") {
		return false
	}
	t.endTime(stepResolveRoute)

	t.printf("\tCreating QPs\n")
	t.startTime(stepCreateQP)
	t.each(iter, func(n *node) { t.createQP(n) })
	if !t.wait(stepCreateQP, iter, "create qp") {
		return false
	}
	t.endTime(stepCreateQP)

	if t.qpAttr {
		t.printf("\tModify QPs to INIT\n")
		t.startTime(stepInitQP)
		t.each(iter, func(n *node) { t.modifyQP(n, kernel.QPStateInit, stepInitQPAttr) })
		if !t.wait(stepInitQP, iter, "init qp") {
			return false
		}
		t.endTime(stepInitQP)
	}

	t.printf("\tConnecting\n")
	t.startTime(stepConnect)
	t.prog.begin("cm connect", iter)
	for i := 0; i < iter; i++ {
		// Keep no more requests outstanding than a listener holds.
		if i >= connectWindow && !t.waitCount(stepConnect, i-connectWindow+1, "cm connect") {
			t.prog.end()
			return false
		}
		if !t.connect(&t.nodes[i]) {
			t.prog.end()
			return false
		}
	}
	ok := t.waitCount(stepConnect, iter, "cm connect")
	t.prog.end()
	if !ok {
		return false
	}
	t.endTime(stepConnect)
	t.endTime(stepFullConnect)
	if !t.sync(stepConnect) {
		return false
	}

	t.printf("\tDisconnecting\n")
	t.startTime(stepDisconnect)
	t.each(iter, t.clientDisconnect)
	if !t.wait(stepDisconnect, iter, "disconnect") {
		return false
	}
	t.endTime(stepDisconnect)
	if !t.sync(stepDisconnect) {
		return false
	}

	t.printf("\tDestroying QPs\n")
	t.destroyQPs(iter)
	t.printf("\tDestroying IDs\n")
	t.destroyIDs(iter)
	return true
}

func (t *test) serverConnect(iter int) bool {
	if !t.reset(iter) ||
		!t.wait(stepConnect, iter, "accept") ||
		!t.sync(stepConnect) ||
		!t.wait(stepDisconnect, iter, "disconnect") ||
		!t.sync(stepDisconnect) {
		return false
	}
	t.destroyQPs(iter)
	t.destroyIDs(iter)
	return true
}

// simulated says whether the QPs test simulates its QPs: with -m, or on a
// fabric with no data path.
func (t *test) simulated() bool { return t.cfg.mimic || !t.dataPath }

func (t *test) runClient(iter int) bool {
	if t.oob == nil {
		// No sync: one test, as rdma-core's cmtime before v52.
		t.title("Connect", iter)
		if !t.clientConnect(iter) {
			return false
		}
		t.show(iter)
		return true
	}
	t.printf("Client warmup\n")
	if !t.clientConnect(1) {
		return false
	}
	t.title("Connect", iter)
	if !t.clientConnect(iter) {
		return false
	}
	t.show(iter)
	t.printf("Connect (%d) test - no QPs\n", iter)
	t.noQPs()
	if !t.clientConnect(iter) {
		return false
	}
	t.show(iter)
	return true
}

func (t *test) runServer(iter int) bool {
	if t.oob == nil {
		t.title("Accept", iter)
		if !t.serverConnect(iter) {
			return false
		}
		t.show(iter)
		return true
	}
	t.printf("Server warmup\n")
	if !t.serverConnect(1) {
		return false
	}
	t.title("Accept", iter)
	if !t.serverConnect(iter) {
		return false
	}
	t.show(iter)
	t.printf("Accept (%d) test - no QPs\n", iter)
	t.noQPs()
	if !t.serverConnect(iter) {
		return false
	}
	t.show(iter)
	return true
}

// title starts the QPs test.
func (t *test) title(verb string, iter int) {
	if !t.simulated() {
		t.printf("%s (%d) QPs test\n", verb, iter)
		return
	}
	t.printf("%s (%d) simulated QPs test (delay %d us)\n", verb, iter, t.mimicDelay.Load())
	t.startFakeQPNs()
}

func (t *test) noQPs() {
	t.startFakeQPNs()
	t.mimicDelay.Store(0)
}

// startFakeQPNs switches to fake QP numbers, starting at -q. They keep
// counting across tests (rdma-core restarts them at -q).
func (t *test) startFakeQPNs() {
	if t.curQPN.Load() == 0 {
		t.curQPN.Store(max(t.cfg.baseQPN, 1))
	}
}

// --- setup

// addresses resolves -b, -s and -p as rdma-core's get_rdma_addr.
func (t *test) addresses() bool {
	var err error
	if !t.isClient {
		t.src, err = tool.Getaddrinfo(t.cfg.src, t.cfg.port, true)
	} else {
		if t.cfg.src != "" {
			t.src, err = tool.Getaddrinfo(t.cfg.src, "", true)
		}
		if err == nil {
			t.dst, err = tool.Getaddrinfo(t.cfg.dst, t.cfg.port, false)
		}
	}
	if err != nil {
		t.printf("rdma_getaddrinfo error: %v\n", err)
		fmt.Fprintf(t.stderr, "get_rdma_addr: %v\n", err)
		return false
	}
	return true
}

// probe finds out what the fabric offers, on an id of the channel (the
// server's listener, or a throw-away id on the client).
func (t *test) probe(cm *id.ID) {
	t.dataPath = tool.HasDataPath(cm)
	_, t.qpAttr = cm.Endpoint().(qpAttrEndpoint)
	if !t.dataPath {
		t.startFakeQPNs()
	}
}

// oobPort is the out-of-band port: -O, or -p (+1 on fabrics whose rdma_cm
// port is a TCP port).
func (t *test) oobPort() uint16 {
	if t.cfg.oobPort >= 0 {
		return uint16(t.cfg.oobPort)
	}
	p := t.src.Port()
	if t.isClient {
		p = t.dst.Port()
	}
	if t.ch.Fabric().Name() == "soft" {
		p++
	}
	return p
}

func (t *test) main() int {
	if !t.addresses() {
		return tool.ExitFailure
	}
	var err error
	if t.ch, err = tool.CreateEventChannel(t.stderr); err != nil {
		// rdma-core's cmtime adds its own perror line (its account came
		// with the first line).
		if e, ok := tool.Errno(err); ok {
			fmt.Fprintf(t.stderr, "create_event_channel: %s\n", tool.Strerror(e))
		}
		return tool.ExitFailure
	}
	defer t.ch.Close()
	ctx, cancel := context.WithCancel(context.Background())
	evDone := make(chan struct{})
	go t.events(ctx, evDone)
	t.wq = newWorkQueue(t.cfg.threads)

	var ok bool
	switch {
	case t.cfg.sockTest && t.isClient:
		t.curQPN.Store(1)
		ok = t.sockClient(t.cfg.iter)
	case t.cfg.sockTest:
		t.curQPN.Store(1)
		ok = t.sockServer(t.cfg.iter)
	case t.isClient:
		ok = t.client()
	default:
		ok = t.server()
	}

	t.wq.stop()
	cancel()
	<-evDone
	if t.oob != nil {
		t.oob.close()
	}
	t.destroyAll()
	if t.cq != nil {
		if err := t.cq.Destroy(); err != nil {
			t.perrorFail("ibv_destroy_cq", err)
		}
	}
	if !ok || t.aborted() {
		return tool.ExitFailure
	}
	return tool.ExitSuccess
}

func (t *test) client() bool {
	cm, err := id.Create(t.ch, nil, id.PSTCP)
	if err != nil {
		t.perrorFail("rdma_create_id", err)
		return false
	}
	t.probe(cm)
	_ = cm.Destroy()
	if port := t.oobPort(); port != 0 {
		t.oob, err = oobDial(t.dst.Addr(), port)
		if err != nil {
			t.perrorFail(fmt.Sprintf("%s: out-of-band connection to %s", prog, netip.AddrPortFrom(t.dst.Addr(), port)), err)
			return false
		}
	}
	return t.runClient(t.cfg.iter)
}

func (t *test) server() bool {
	// Listen before the out-of-band setup, so the client finds the
	// listener once the sync connection is up.
	listener, err := id.Create(t.ch, nil, id.PSTCP)
	if err != nil {
		t.perrorFail("rdma_create_id", err)
		return false
	}
	defer listener.Destroy()
	t.probe(listener)
	if err := listener.Bind(t.src); err != nil {
		t.perrorFail("rdma_bind_addr", err)
		return false
	}
	if err := listener.Listen(0); err != nil {
		t.perrorFail("rdma_listen", err)
		return false
	}
	if port := t.oobPort(); port != 0 {
		var a netip.Addr
		if t.cfg.src != "" {
			a = t.src.Addr()
		}
		t.oob, err = oobListen(a, port)
		if err != nil {
			t.perrorFail(fmt.Sprintf("%s: out-of-band listen on port %d", prog, port), err)
			return false
		}
	}
	return t.runServer(t.cfg.iter)
}
