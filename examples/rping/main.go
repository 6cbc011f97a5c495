// Command rping is rdma-core's rping (librdmacm/examples/rping.c) over
// cmrt: a client and a server that ping with RDMA Reads and Writes.
//
// Each ping: the client sends the server the address, rkey and size of its
// source buffer; the server RDMA Reads it and sends a go-ahead; the client
// sends its sink buffer; the server RDMA Writes the data back there and
// sends a go-ahead; the client may check (-V) and print (-v) the data.
//
//	rping -s [-vVd] [-S size] [-C count] [-a addr] [-p port] [-P]
//	rping -c [-vVd] [-S size] [-C count] [-I addr] -a addr [-p port]
//
// Defaults as the C program: port 7174, size 64, count 0 (forever). It
// runs on the software fabric by default ($CMRT_FABRIC selects another;
// see fabric.go for the software fabric's CMRT_SOFT_* knobs). The exit
// status is the C program's: 0 on success.
package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cmrt/cmrt/channel"
	"github.com/cmrt/cmrt/examples/internal/tool"
	"github.com/cmrt/cmrt/id"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := runContext(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// testState is enum test_state.
type testState int32

const (
	stIdle testState = iota + 1
	stConnectRequest
	stAddrResolved
	stRouteResolved
	stConnected
	stRDMAReadAdv
	stRDMAReadComplete
	stRDMAWriteAdv
	stRDMAWriteComplete
	stDisconnected
	stError
)

const (
	rpingBufSize = 64 * 1024 // RPING_BUFSIZE
	rpingSQDepth = 16        // RPING_SQ_DEPTH
	rpingMsgFmt  = "rdma-ping-%d: "
	// rpingMinBufSize is sizeof(stringify(INT_MAX)) + sizeof(RPING_MSG_FMT):
	// rping.c does not include limits.h, so INT_MAX stringifies as itself
	// and the C program's minimum is 23 (checked against rdma-core 44).
	rpingMinBufSize = len("INT_MAX") + 1 + len(rpingMsgFmt) + 1
	infoLen         = 16 // struct rping_rdma_info: be64 buf, be32 rkey, be32 size
)

// output serializes the prints of the goroutines (the C threads share
// stdio's lock).
type output struct {
	mu       sync.Mutex
	out, err io.Writer
	debug    bool
}

func (o *output) printf(format string, a ...any) {
	o.mu.Lock()
	fmt.Fprintf(o.out, format, a...)
	o.mu.Unlock()
}

func (o *output) eprintf(format string, a ...any) {
	o.mu.Lock()
	fmt.Fprintf(o.err, format, a...)
	o.mu.Unlock()
}

func (o *output) debugf(format string, a ...any) {
	if o.debug {
		o.printf(format, a...)
	}
}

// perror prints a failed call the way perror(3) does, with cmrt's account.
func (o *output) perror(what string, err error) { o.eprintf("%s\n", tool.PerrorText(what, err)) }

// cb is the control block, as struct rping_cb.
type cb struct {
	o          *output
	ctx        context.Context
	server     bool
	verbose    bool
	validate   bool
	count      int
	size       int
	sin        netip.AddrPort
	ssource    netip.Addr
	persistent bool

	ch    *channel.Channel
	cmID  *id.ID // the connection on the client, the listener on the server
	child *id.ID // the connection on the server

	qp       id.QP
	recvBuf  []byte
	recvMR   id.MR
	sendBuf  []byte
	sendMR   id.MR
	rdmaBuf  []byte // RDMA sink
	rdmaMR   id.MR
	startBuf []byte // RDMA Read source (client)
	startMR  id.MR

	remoteRKey uint32
	remoteAddr uint64
	remoteLen  uint32

	state       atomic.Int32
	sem         chan struct{}
	acceptReady chan struct{}
	cqStop      atomic.Bool
	cqDone      chan struct{}
}

func newCB(o *output, ctx context.Context) *cb {
	c := &cb{o: o, ctx: ctx, size: 64, sem: make(chan struct{}, 1024), acceptReady: make(chan struct{}, 1)}
	c.state.Store(int32(stIdle))
	c.acceptReady <- struct{}{}
	return c
}

func (c *cb) st() testState   { return testState(c.state.Load()) }
func (c *cb) set(s testState) { c.state.Store(int32(s)) }
func (c *cb) post()           { c.sem <- struct{}{} }
func (c *cb) side() string    { return map[bool]string{true: "server", false: "client"}[c.server] }
func (c *cb) postRecv() error { return c.qp.PostRecv(&id.RecvWR{Buf: c.recvBuf, MR: c.recvMR}) }
func (c *cb) postGoAhead() error {
	return c.qp.PostSend(&id.SendWR{Opcode: id.WRSend, Flags: id.SendSignaled, Buf: c.sendBuf, MR: c.sendMR})
}

// wait is sem_wait; it reports false when the program is stopping.
func (c *cb) wait() bool {
	select {
	case <-c.sem:
		return true
	case <-c.ctx.Done():
		return false
	}
}

// cmaEventHandler handles one CM event, as rping_cma_event_handler.
func (c *cb) cmaEventHandler(ev *id.Event) int {
	ret := 0
	rel := "child"
	if ev.ID == c.cmID {
		rel = "parent"
	}
	c.o.debugf("cma_event type %s cma_id %p (%s)\n", ev.Type, ev.ID, rel)
	switch ev.Type {
	case id.EventAddrResolved:
		c.set(stAddrResolved)
		if err := ev.ID.ResolveRoute(2000 * time.Millisecond); err != nil {
			c.set(stError)
			c.o.perror("rdma_resolve_route", err)
			c.post()
		}
	case id.EventRouteResolved:
		c.set(stRouteResolved)
		c.post()
	case id.EventConnectRequest:
		select {
		case <-c.acceptReady:
		case <-c.ctx.Done():
			return -1
		}
		c.set(stConnectRequest)
		c.child = ev.ID
		c.o.debugf("child cma %p\n", c.child)
		c.post()
	case id.EventConnectResponse:
		c.o.debugf("CONNECT_RESPONSE\n")
		c.set(stConnected)
		c.post()
	case id.EventEstablished:
		c.o.debugf("ESTABLISHED\n")
		if !c.server { // the server wakes up when the first receive completes
			c.set(stConnected)
		}
		c.post()
	case id.EventAddrError, id.EventRouteError, id.EventConnectError, id.EventUnreachable, id.EventRejected:
		c.o.eprintf("cma event %s, error %d\n", ev.Type, ev.Status)
		c.set(stError)
		c.post()
		ret = -1
	case id.EventDisconnected:
		c.o.eprintf("%s DISCONNECT EVENT...\n", c.side())
		c.set(stDisconnected)
		c.post()
	case id.EventDeviceRemoval:
		c.o.eprintf("cma detected device removal!!!!\n")
		c.set(stError)
		c.post()
		ret = -1
	default:
		c.o.eprintf("unhandled event: %s, ignoring\n", ev.Type)
	}
	return ret
}

// cmThread delivers CM events to the control block each id belongs to.
func cmThread(ctx context.Context, ch *channel.Channel, o *output, done chan<- struct{}) {
	defer close(done)
	for {
		ev, err := ch.GetEventContext(ctx)
		if err != nil {
			if ctx.Err() == nil {
				o.perror("rdma_get_cm_event", err)
			}
			return
		}
		if c, ok := ev.ID.Context().(*cb); ok {
			c.cmaEventHandler(ev)
		}
		_ = ev.Ack()
	}
}

func (c *cb) serverRecv(wc *id.WC) error {
	if wc.ByteLen != infoLen {
		c.o.eprintf("Received bogus data, size %d\n", wc.ByteLen)
		return errors.New("bogus data")
	}
	c.remoteAddr = binary.BigEndian.Uint64(c.recvBuf[0:8])
	c.remoteRKey = binary.BigEndian.Uint32(c.recvBuf[8:12])
	c.remoteLen = binary.BigEndian.Uint32(c.recvBuf[12:16])
	c.o.debugf("Received rkey %x addr %x len %d from peer\n", c.remoteRKey, c.remoteAddr, c.remoteLen)
	if s := c.st(); s <= stConnected || s == stRDMAWriteComplete {
		c.set(stRDMAReadAdv)
	} else {
		c.set(stRDMAWriteAdv)
	}
	return nil
}

func (c *cb) clientRecv(wc *id.WC) error {
	if wc.ByteLen != infoLen {
		c.o.eprintf("Received bogus data, size %d\n", wc.ByteLen)
		return errors.New("bogus data")
	}
	if c.st() == stRDMAReadAdv {
		c.set(stRDMAWriteAdv)
	} else {
		c.set(stRDMAWriteComplete)
	}
	return nil
}

// cqEventHandler handles the queued completions, as
// rping_cq_event_handler: it reports whether a flushed completion was seen
// (the connection is gone) and fails on any other error.
func (c *cb) cqEventHandler() (flushed bool, err error) {
	var wcs [1]id.WC
	for {
		n := c.qp.SendCQ().Poll(wcs[:])
		if n == 0 {
			n = c.qp.RecvCQ().Poll(wcs[:])
		}
		if n == 0 {
			return flushed, nil
		}
		wc := &wcs[0]
		if wc.Status != id.WCSuccess {
			if wc.Status == id.WCWRFlushErr {
				flushed = true
				continue
			}
			c.o.eprintf("cq completion failed status %d\n", wc.Status)
			err = fmt.Errorf("completion status %s", wc.Status)
			break
		}
		switch wc.Opcode {
		case id.WCSend:
			c.o.debugf("send completion\n")
		case id.WCRDMAWrite:
			c.o.debugf("rdma write completion\n")
			c.set(stRDMAWriteComplete)
			c.post()
		case id.WCRDMARead:
			c.o.debugf("rdma read completion\n")
			c.set(stRDMAReadComplete)
			c.post()
		case id.WCRecv:
			c.o.debugf("recv completion\n")
			if c.server {
				err = c.serverRecv(wc)
			} else {
				err = c.clientRecv(wc)
			}
			if err != nil {
				c.o.eprintf("recv wc error: %d\n", -1)
				break
			}
			if err = c.postRecv(); err != nil {
				c.o.eprintf("post recv error: %v\n", err)
				break
			}
			c.post()
		default:
			c.o.debugf("unknown!!!!! completion\n")
			err = errors.New("unknown completion")
		}
		if err != nil {
			break
		}
	}
	c.set(stError)
	c.post()
	return flushed, err
}

// cqThread waits on both completion queues' descriptors and handles what
// arrives, until the connection is flushed, an error, or a stop.
func (c *cb) cqThread() {
	defer close(c.cqDone)
	c.o.debugf("cq_thread started.\n")
	fds := []unix.PollFd{{Fd: int32(c.qp.SendCQ().Fd()), Events: unix.POLLIN}, {Fd: int32(c.qp.RecvCQ().Fd()), Events: unix.POLLIN}}
	for !c.cqStop.Load() {
		if _, err := unix.Poll(fds, 100); err != nil && err != unix.EINTR {
			c.o.eprintf("Failed to get cq event!\n")
			return
		}
		if flushed, err := c.cqEventHandler(); flushed || err != nil {
			return
		}
	}
}

// joinCQThread waits for the completion goroutine, which ends when the
// connection's work requests are flushed; it is told to stop if that takes
// long.
func (c *cb) joinCQThread() {
	if c.cqDone == nil {
		return
	}
	select {
	case <-c.cqDone:
	case <-time.After(5 * time.Second):
		c.cqStop.Store(true)
		<-c.cqDone
	}
}

func (c *cb) setupQP(cm *id.ID) error {
	attr := id.QPInitAttr{Cap: id.QPCap{MaxSendWR: rpingSQDepth, MaxRecvWR: 2, MaxSendSGE: 1, MaxRecvSGE: 1}}
	if err := cm.CreateQP(&attr); err != nil {
		c.o.perror("rdma_create_qp", err)
		return err
	}
	c.qp = cm.QP()
	c.o.debugf("created qp %p\n", c.qp)
	return nil
}

func (c *cb) setupBuffers() error {
	c.o.debugf("rping_setup_buffers called on cb %p\n", c)
	var err error
	c.recvBuf, c.sendBuf = make([]byte, infoLen), make([]byte, infoLen)
	if c.recvMR, err = c.qp.RegMR(c.recvBuf, id.AccessLocalWrite); err != nil {
		c.o.eprintf("recv_buf reg_mr failed\n")
		return err
	}
	if c.sendMR, err = c.qp.RegMR(c.sendBuf, 0); err != nil {
		c.o.eprintf("send_buf reg_mr failed\n")
		return err
	}
	rw := id.AccessLocalWrite | id.AccessRemoteRead | id.AccessRemoteWrite
	c.rdmaBuf = make([]byte, c.size)
	if c.rdmaMR, err = c.qp.RegMR(c.rdmaBuf, rw); err != nil {
		c.o.eprintf("rdma_buf reg_mr failed\n")
		return err
	}
	if !c.server {
		c.startBuf = make([]byte, c.size)
		if c.startMR, err = c.qp.RegMR(c.startBuf, rw); err != nil {
			c.o.eprintf("start_buf reg_mr failed\n")
			return err
		}
	}
	c.o.debugf("allocated & registered buffers...\n")
	return nil
}

// formatSend puts buf's address, rkey and the ping size into the send buffer.
func (c *cb) formatSend(mr id.MR) {
	binary.BigEndian.PutUint64(c.sendBuf[0:8], mr.Addr())
	binary.BigEndian.PutUint32(c.sendBuf[8:12], mr.RKey())
	binary.BigEndian.PutUint32(c.sendBuf[12:16], uint32(c.size))
	c.o.debugf("RDMA addr %x rkey %x len %d\n", mr.Addr(), mr.RKey(), c.size)
}

// cstr is the C string at the start of b.
func cstr(b []byte) []byte {
	if k := bytes.IndexByte(b, 0); k >= 0 {
		return b[:k]
	}
	return b
}

func (c *cb) testServer() int {
	ret := 0
	for {
		if !c.wait() {
			return 0
		}
		if s := c.st(); s != stRDMAReadAdv {
			c.o.eprintf("wait for RDMA_READ_ADV state %d\n", s)
			ret = -1
			break
		}
		c.o.debugf("server received sink adv\n")
		if int(c.remoteLen) > len(c.rdmaBuf) {
			c.o.eprintf("post send error %d\n", syscall.ENOMEM)
			ret = -1
			break
		}
		err := c.qp.PostSend(&id.SendWR{Opcode: id.WRRead, Flags: id.SendSignaled, Buf: c.rdmaBuf[:c.remoteLen], MR: c.rdmaMR,
			RemoteAddr: c.remoteAddr, RKey: c.remoteRKey})
		if err != nil {
			c.o.eprintf("post send error %v\n", err)
			ret = -1
			break
		}
		c.o.debugf("server posted rdma read req \n")
		if !c.wait() {
			return 0
		}
		if s := c.st(); s != stRDMAReadComplete {
			c.o.eprintf("wait for RDMA_READ_COMPLETE state %d\n", s)
			ret = -1
			break
		}
		c.o.debugf("server received read complete\n")
		if c.verbose {
			c.o.printf("server ping data: %s\n", cstr(c.rdmaBuf))
		}
		if err := c.postGoAhead(); err != nil {
			c.o.eprintf("post send error %v\n", err)
			ret = -1
			break
		}
		c.o.debugf("server posted go ahead\n")
		if !c.wait() {
			return 0
		}
		if s := c.st(); s != stRDMAWriteAdv {
			c.o.eprintf("wait for RDMA_WRITE_ADV state %d\n", s)
			ret = -1
			break
		}
		c.o.debugf("server received sink adv\n")
		n := min(len(cstr(c.rdmaBuf))+1, len(c.rdmaBuf))
		c.o.debugf("rdma write from lkey %x laddr %x len %d\n", c.rdmaMR.LKey(), c.rdmaMR.Addr(), n)
		err = c.qp.PostSend(&id.SendWR{Opcode: id.WRWrite, Flags: id.SendSignaled, Buf: c.rdmaBuf[:n], MR: c.rdmaMR,
			RemoteAddr: c.remoteAddr, RKey: c.remoteRKey})
		if err != nil {
			c.o.eprintf("post send error %v\n", err)
			ret = -1
			break
		}
		if !c.wait() {
			return 0
		}
		if s := c.st(); s != stRDMAWriteComplete {
			c.o.eprintf("wait for RDMA_WRITE_COMPLETE state %d\n", s)
			ret = -1
			break
		}
		c.o.debugf("server rdma write complete \n")
		if err := c.postGoAhead(); err != nil {
			c.o.eprintf("post send error %v\n", err)
			ret = -1
			break
		}
		c.o.debugf("server posted go ahead\n")
	}
	if c.st() == stDisconnected {
		return 0
	}
	return ret
}

func (c *cb) bindServer() error {
	if err := c.cmID.Bind(c.sin); err != nil {
		c.o.perror("rdma_bind_addr", err)
		return err
	}
	c.o.debugf("rdma_bind_addr successful\n")
	c.o.debugf("rdma_listen\n")
	if err := c.cmID.Listen(3); err != nil {
		c.o.perror("rdma_listen", err)
		return err
	}
	return nil
}

// accept accepts the child and waits for the connection.
func (c *cb) accept() error {
	c.o.debugf("accepting client connection request\n")
	if err := c.child.Accept(nil); err != nil {
		c.o.perror("rdma_accept", err)
		return err
	}
	if !c.wait() {
		return context.Canceled
	}
	if s := c.st(); s == stError {
		c.o.eprintf("wait for CONNECTED state %d\n", s)
		return errors.New("connection failed")
	}
	return nil
}

// prepare readies cm's side of a connection as rping does on both sides:
// QP, buffers, the first receive and the CQ goroutine, then connect (accept
// or connect); on a failure it prints rping's message and stops the CQ
// goroutine. It returns 0 or -1.
func (c *cb) prepare(cm *id.ID, connect func() error) int {
	if err := c.setupQP(cm); err != nil {
		c.o.eprintf("setup_qp failed: %d\n", -1)
		return -1
	}
	if err := c.setupBuffers(); err != nil {
		c.o.eprintf("rping_setup_buffers failed: %d\n", -1)
		return -1
	}
	if err := c.postRecv(); err != nil {
		c.o.eprintf("ibv_post_recv failed: %v\n", err)
		return -1
	}
	c.cqDone = make(chan struct{})
	go c.cqThread()
	if err := connect(); err != nil {
		c.o.eprintf("connect error %d\n", -1)
		c.cqStop.Store(true)
		c.joinCQThread()
		return -1
	}
	return 0
}

// serveChild runs one accepted connection: QP, buffers, accept, pings,
// disconnect.
func (c *cb) serveChild() int {
	if c.prepare(c.child, c.accept) != 0 {
		return -1
	}
	ret := c.testServer()
	if ret != 0 {
		c.o.eprintf("rping server failed: %d\n", ret)
	}
	_ = c.child.Disconnect()
	c.joinCQThread()
	return ret
}

func (c *cb) runServer() int {
	if err := c.bindServer(); err != nil {
		return -1
	}
	if !c.wait() {
		return 0
	}
	if s := c.st(); s != stConnectRequest {
		c.o.eprintf("wait for CONNECT_REQUEST state %d\n", s)
		return -1
	}
	ret := c.serveChild()
	_ = c.child.Destroy()
	return ret
}

// runPersistentServer serves connections one after the other, each on its
// own goroutine with a copy of the control block, until the program stops.
func (c *cb) runPersistentServer() int {
	if err := c.bindServer(); err != nil {
		return -1
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		if !c.wait() {
			return 0
		}
		if s := c.st(); s != stConnectRequest {
			c.o.eprintf("wait for CONNECT_REQUEST state %d\n", s)
			return -1
		}
		cc := newCB(c.o, c.ctx)
		cc.server, cc.verbose, cc.validate, cc.count, cc.size = true, c.verbose, c.validate, c.count, c.size
		cc.child = c.child
		cc.state.Store(c.state.Load())
		cc.child.SetContext(cc)
		c.acceptReady <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			cc.serveChild()
			_ = cc.child.Destroy()
		}()
	}
}

func (c *cb) testClient() int {
	ret := 0
	start := byte(65)
	for ping := 0; c.count == 0 || ping < c.count; ping++ {
		c.set(stRDMAReadAdv)
		// Some ASCII text in the buffer.
		msg := fmt.Sprintf(rpingMsgFmt, ping)
		cc := copy(c.startBuf[:c.size-1], msg)
		ch := start
		for i := cc; i < c.size; i++ {
			c.startBuf[i] = ch
			if ch++; ch > 122 {
				ch = 65
			}
		}
		if start++; start > 122 {
			start = 65
		}
		c.startBuf[c.size-1] = 0

		c.formatSend(c.startMR)
		if err := c.postGoAhead(); err != nil {
			c.o.eprintf("post send error %v\n", err)
			ret = -1
			break
		}
		// Wait for the server to ack.
		if !c.wait() {
			return 0
		}
		if s := c.st(); s != stRDMAWriteAdv {
			c.o.eprintf("wait for RDMA_WRITE_ADV state %d\n", s)
			ret = -1
			break
		}
		c.formatSend(c.rdmaMR)
		if err := c.postGoAhead(); err != nil {
			c.o.eprintf("post send error %v\n", err)
			ret = -1
			break
		}
		// Wait for the server to say the RDMA Write is complete.
		if !c.wait() {
			return 0
		}
		if s := c.st(); s != stRDMAWriteComplete {
			c.o.eprintf("wait for RDMA_WRITE_COMPLETE state %d\n", s)
			ret = -1
			break
		}
		if c.validate && !bytes.Equal(c.startBuf, c.rdmaBuf) {
			c.o.eprintf("data mismatch!\n")
			ret = -1
			break
		}
		if c.verbose {
			c.o.printf("ping data: %s\n", cstr(c.rdmaBuf))
		}
	}
	if c.st() == stDisconnected {
		return 0
	}
	return ret
}

func (c *cb) bindClient() error {
	var src netip.AddrPort
	if c.ssource.IsValid() {
		src = netip.AddrPortFrom(c.ssource, 0)
	}
	if err := c.cmID.ResolveAddr(src, c.sin, 2000*time.Millisecond); err != nil {
		c.o.perror("rdma_resolve_addr", err)
		return err
	}
	if !c.wait() {
		return context.Canceled
	}
	if s := c.st(); s != stRouteResolved {
		c.o.eprintf("waiting for addr/route resolution state %d\n", s)
		return errors.New("no route")
	}
	c.o.debugf("rdma_resolve_addr - rdma_resolve_route successful\n")
	return nil
}

func (c *cb) connectClient() error {
	p := id.ConnParam{ResponderResources: 1, InitiatorDepth: 1, RetryCount: 7, RNRRetryCount: 7}
	if err := c.cmID.Connect(&p); err != nil {
		c.o.perror("rdma_connect", err)
		return err
	}
	if !c.wait() {
		return context.Canceled
	}
	if s := c.st(); s != stConnected {
		c.o.eprintf("wait for CONNECTED state %d\n", s)
		return errors.New("not connected")
	}
	c.o.debugf("rdma_connect successful\n")
	return nil
}

func (c *cb) runClient() int {
	if err := c.bindClient(); err != nil {
		return -1
	}
	if c.prepare(c.cmID, c.connectClient) != 0 {
		return -1
	}
	ret := c.testClient()
	if ret != 0 {
		c.o.eprintf("rping client failed: %d\n", ret)
	}
	_ = c.cmID.Disconnect()
	c.awaitDisconnect(2 * time.Second)
	c.joinCQThread()
	return ret
}

// awaitDisconnect waits, at most d, until the CM thread has handled the
// id's DISCONNECTED, so that its message is printed before the client
// ends (rping's C client does not wait, and prints it only sometimes).
func (c *cb) awaitDisconnect(d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	for {
		switch testState(c.state.Load()) {
		case stDisconnected, stError:
			return
		}
		select {
		case <-c.sem:
		case <-t.C:
			return
		case <-c.ctx.Done():
			return
		}
	}
}

// getAddr resolves a host name or address, as rping's get_addr: it
// returns getaddrinfo's status (0, or the EAI_* code it printed).
func getAddr(o *output, host string) (netip.Addr, int) {
	a, err := tool.LookupHost(host)
	if err != nil {
		o.printf("getaddrinfo failed (%v) - invalid hostname or IP address\n", err)
		var e *tool.GAIError
		if errors.As(err, &e) {
			return netip.Addr{}, e.Code
		}
		return netip.Addr{}, -1
	}
	return a, 0
}

func usage(o *output) {
	o.printf("rping -s [-vVd] [-S size] [-C count] [-a addr] [-p port]\n")
	o.printf("rping -c [-vVd] [-S size] [-C count] [-I addr] -a addr [-p port]\n")
	o.printf("\t-c\t\tclient side\n")
	o.printf("\t-I\t\tSource address to bind to for client.\n")
	o.printf("\t-s\t\tserver side.  To bind to any address with IPv6 use -a ::0\n")
	o.printf("\t-v\t\tdisplay ping data to stdout\n")
	o.printf("\t-V\t\tvalidate ping data\n")
	o.printf("\t-d\t\tdebug printfs\n")
	o.printf("\t-S size \tping data size\n")
	o.printf("\t-C count\tping count times\n")
	o.printf("\t-a addr\t\taddress\n")
	o.printf("\t-p port\t\tport\n")
	o.printf("\t-P\t\tpersistent server mode allowing multiple connections\n")
	o.printf("\t-q\t\tuse self-created, self-modified QP\n")
}

// run is the program without a stop signal.
func run(args []string, stdout, stderr io.Writer) int {
	return runContext(context.Background(), args, stdout, stderr)
}

// runContext is the program: it returns the exit status. Cancelling ctx
// stops a server (a persistent one runs until then).
func runContext(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	o := &output{out: stdout, err: stderr}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	c := newCB(o, ctx)
	server := -1
	port := 7174
	c.sin = netip.AddrPortFrom(netip.IPv4Unspecified(), 0)
	opts, _, err := tool.Getopt(args, "a:I:Pp:C:S:t:scvVdq")
	ret := 0
	if err != nil {
		usage(o)
		return int(syscall.EINVAL)
	}
	for _, op := range opts {
		switch op.Name {
		case 'a':
			var a netip.Addr
			a, ret = getAddr(o, op.Arg)
			c.sin = netip.AddrPortFrom(a, 0)
		case 'I':
			c.ssource, ret = getAddr(o, op.Arg)
		case 'P':
			c.persistent = true
		case 'p':
			port, _ = strconv.Atoi(op.Arg)
			o.debugf("port %d\n", port)
		case 's':
			server = 1
			o.debugf("server\n")
		case 'c':
			server = 0
			o.debugf("client\n")
		case 'S':
			c.size, _ = strconv.Atoi(op.Arg)
			if c.size < rpingMinBufSize || c.size > rpingBufSize-1 {
				o.eprintf("Invalid size %d (valid range is %d to %d)\n", c.size, rpingMinBufSize, rpingBufSize)
				ret = int(syscall.EINVAL)
			} else {
				o.debugf("size %d\n", c.size)
			}
		case 'C':
			c.count, _ = strconv.Atoi(op.Arg)
			if c.count < 0 {
				o.eprintf("Invalid count %d\n", c.count)
				ret = int(syscall.EINVAL)
			} else {
				o.debugf("count %d\n", c.count)
			}
		case 'v':
			c.verbose = true
			o.debugf("verbose\n")
		case 'V':
			c.validate = true
			o.debugf("validate data\n")
		case 'd':
			o.debug = true
		case 'q':
			o.eprintf("rping: -q ignored: QPs are always created through the CM here\n")
		case 't':
			// rping parses -t (type of service) but does not use it.
		}
	}
	if ret != 0 {
		return tool.ExitStatus(ret)
	}
	if server == -1 {
		usage(o)
		return int(syscall.EINVAL)
	}
	c.server = server == 1
	c.sin = netip.AddrPortFrom(c.sin.Addr(), uint16(port))

	if c.ch, err = tool.CreateEventChannel(stderr); err != nil {
		return tool.ExitStatus(int(errnoOf(err))) // rping returns errno
	}
	if c.cmID, err = id.Create(c.ch, c, id.PSTCP); err != nil {
		o.perror("rdma_create_id", err)
		_ = c.ch.Close()
		return tool.ExitStatus(-1)
	}
	o.debugf("created cm_id %p\n", c.cmID)
	cmDone := make(chan struct{})
	go cmThread(ctx, c.ch, o, cmDone)

	switch {
	case c.server && c.persistent:
		ret = c.runPersistentServer()
	case c.server:
		ret = c.runServer()
	default:
		ret = c.runClient()
	}

	o.debugf("destroy cm_id %p\n", c.cmID)
	_ = c.cmID.Destroy()
	cancel()
	<-cmDone
	if err := c.ch.Close(); err != nil {
		o.perror("rdma_destroy_event_channel", err)
	}
	return tool.ExitStatus(ret)
}

func errnoOf(err error) syscall.Errno {
	var e syscall.Errno
	if errors.As(err, &e) {
		return e
	}
	return syscall.EIO
}
