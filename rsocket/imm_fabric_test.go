package rsocket

import (
	"context"
	"encoding/binary"
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/cmrt/cmrt/fabric"
	"github.com/cmrt/cmrt/fabric/soft"
)

// immFabric is the software fabric dressed as an InfiniBand one, to test
// rsockets' Write-with-Immediate mode without a device: its devices report
// the transport named (InfiniBand; iWARP for a side that must send its
// message words as Sends on the same wire), and its RC queue pairs take
// WRWriteWithImm, which the software fabric (iWARP) refuses. A Write with
// Immediate travels as an unsignaled RDMA Write and a Send of an
// immTag-tagged 12-byte frame (tag, immediate data, length); the peer's
// queue pair turns that Send back into the receive completion of a Write
// with Immediate: WCRecvRDMAWithImm, WithImm, ImmData and the length
// written, its receive buffer untouched. A plain Send lands in the
// receive's own buffer, as verbs places it, and where that buffer is too
// small (a C rsocket in that mode posts its receives without one) it is a
// local length error: a side that sends its message words as Sends to a C
// peer fails there.
// The send queue depth is enforced as verbs does, an unsignaled work
// request holding its slot until a later signaled one completes, so a side
// that counts the one work request of a Write with Immediate as two
// overruns it (ENOMEM).
type immFabric struct {
	inner     *soft.Fabric
	transport string // fabric.Device.Transport of every device
	// deafWaits: Wait on its completion queues returns only when its
	// context ends, as a wait whose completion another poller (the
	// reactor) always takes first.
	deafWaits bool
	// outOfProcess: the fabric does not declare its completions made in
	// process (fabric.InProcessCompleter), as a device's fabric would
	// not: connections spin and the reactor polls their queues.
	outOfProcess bool
	name         string // "soft-ib" if empty

	imms    atomic.Int64 // Writes with Immediate posted
	sends   atomic.Int64 // plain Sends posted
	sendRcv atomic.Int64 // plain Sends received into a buffer that holds them
	badRcv  atomic.Int64 // plain Sends received where no buffer holds them
	// byRef counts unsignaled RDMA Writes of a page or more from
	// registered memory: siw transmits such a Write by reference (its
	// zero-copy send), reading the bytes while TCP holds them, after
	// later requests have completed.
	byRef atomic.Int64

	qpMu sync.Mutex
	qps  []*immQP // in the order created
}

// ibFabric and iwFabric are the immFabrics of the tests (engines are kept
// per fabric, so the tests share them): on ibFabric connections send their
// message words as Writes with Immediate, on iwFabric as Sends, and both
// reach each other over the software fabric underneath.
var (
	ibFabric = &immFabric{inner: soft.Default(), transport: "InfiniBand"}
	iwFabric = &immFabric{inner: soft.Default(), transport: transportIWARP}
	// deafFabric is iwFabric whose queue waits never report.
	deafFabric = &immFabric{inner: soft.Default(), transport: transportIWARP, deafWaits: true}
	// outFabric is iwFabric declaring its completions made outside the
	// process, kernFabric iwFabric declaring them made in process under
	// the kernel fabric's name.
	outFabric  = &immFabric{inner: soft.Default(), transport: transportIWARP, outOfProcess: true}
	kernFabric = &immFabric{inner: soft.Default(), transport: transportIWARP, name: "kernel"}
	// siwFabric is a device's iWARP fabric (completions made outside the
	// process), with counters of its own for TestSendBufferNotByReference.
	siwFabric = &immFabric{inner: soft.Default(), transport: transportIWARP, outOfProcess: true, name: "kernel"}
)

// siwSendPageThresh is the size from which siw sends an unsignaled
// request's payload by reference (a page).
const siwSendPageThresh = 4096

// immTag starts the frame a Write with Immediate's Send carries.
const (
	immTag      = 0x1a2b3c4d
	immFrameLen = 12
)

func (f *immFabric) Name() string {
	if f.name == "" {
		return "soft-ib"
	}
	return f.name
}

// CompletesInProcess implements fabric.InProcessCompleter: the software
// fabric underneath makes the completions, unless outOfProcess.
func (f *immFabric) CompletesInProcess() bool { return !f.outOfProcess }

func (f *immFabric) Devices() ([]fabric.Device, error) {
	devs, err := f.inner.Devices()
	for k := range devs {
		devs[k].Transport = f.transport
	}
	return devs, err
}

func (f *immFabric) Open() (fabric.EventSource, error) {
	src, err := f.inner.Open()
	if err != nil {
		return nil, err
	}
	return &immSource{EventSource: src, f: f}, nil
}

// immSource wraps the endpoints of a software event source.
type immSource struct {
	fabric.EventSource
	f *immFabric
}

func (s *immSource) Fabric() fabric.Fabric { return s.f }

func (s *immSource) Create(uid uint64, ps fabric.PortSpace, qp fabric.QPType) (fabric.Endpoint, error) {
	ep, err := s.EventSource.Create(uid, ps, qp)
	if err != nil {
		return nil, err
	}
	return &immEndpoint{Endpoint: ep, f: s.f}, nil
}

func (s *immSource) Next(ctx context.Context, block bool, ev *fabric.RawEvent) error {
	err := s.EventSource.Next(ctx, block, ev)
	if err == nil && ev.Child != nil {
		ev.Child = &immEndpoint{Endpoint: ev.Child, f: s.f}
	}
	return err
}

func (s *immSource) Migrate(ep fabric.Endpoint) error {
	if w, ok := ep.(*immEndpoint); ok {
		ep = w.Endpoint
	}
	return s.EventSource.Migrate(ep)
}

// Endpoints passes the software source's count on (channel.Close asks).
func (s *immSource) Endpoints() int {
	if ec, ok := s.EventSource.(interface{ Endpoints() int }); ok {
		return ec.Endpoints()
	}
	return 0
}

// immEndpoint gives its queue pairs Write with Immediate.
type immEndpoint struct {
	fabric.Endpoint
	f *immFabric
}

func (e *immEndpoint) PD() (fabric.PD, error) { return e.Endpoint.(fabric.PDEndpoint).PD() }

func (e *immEndpoint) CreateQP(attr *fabric.QPInitAttr) (fabric.QP, error) {
	if attr.SigAll || attr.Cap.MaxSendWR <= 0 || attr.Cap.MaxRecvWR <= 0 {
		return nil, fmt.Errorf("immFabric: queue sizes must be given, without SigAll: %w", syscall.EINVAL)
	}
	in := *attr
	in.Cap.MaxSendWR *= 2 // a Write with Immediate takes two of the inner queue's
	qp, err := e.Endpoint.(fabric.QPCreator).CreateQP(&in)
	if err != nil {
		return nil, err
	}
	q := &immQP{QP: qp, f: e.f, sqMax: attr.Cap.MaxSendWR, firstSend: -1,
		stage: make([]byte, 2*attr.Cap.MaxRecvWR*immFrameLen), sq: make([]bool, attr.Cap.MaxSendWR)}
	if q.stageMR, err = qp.RegMR(q.stage, fabric.AccessLocalWrite); err != nil {
		_ = qp.Destroy()
		return nil, err
	}
	q.rq = make([]immRecv, 2*attr.Cap.MaxRecvWR)
	q.scq = &immCQ{CQ: qp.SendCQ(), poll: q.pollSend, deaf: e.f.deafWaits}
	q.rcq = &immCQ{CQ: qp.RecvCQ(), poll: q.pollRecv, deaf: e.f.deafWaits}
	e.f.qpMu.Lock()
	e.f.qps = append(e.f.qps, q)
	e.f.qpMu.Unlock()
	return q, nil
}

// immRecv is a posted receive: the caller's id and buffer, and the
// staging slot the inner receive lands in.
type immRecv struct {
	wrid uint64
	buf  []byte
	slot int
}

// immQP is an RC queue pair of immFabric.
type immQP struct {
	fabric.QP
	f        *immFabric
	stageMR  fabric.MR
	scq, rcq *immCQ

	mu    sync.Mutex
	sqMax int
	sq    []bool // the caller's outstanding send work requests: signaled?
	sqH   int
	sqN   int
	stage []byte    // receive staging slots of immFrameLen bytes
	rq    []immRecv // posted receives, in order (RC completes them in order)
	rqH   int
	rqN   int
	nextS int // the next staging slot
	frame [immFrameLen]byte
	wr    fabric.SendWR
	rwr   fabric.RecvWR
	recvs int // successful receive completions polled
	// firstSend is recvs when the first send work request was posted
	// (-1: none yet).
	firstSend int
}

func (q *immQP) SendCQ() fabric.CQ { return q.scq }
func (q *immQP) RecvCQ() fabric.CQ { return q.rcq }

func (q *immQP) PostSend(wr *fabric.SendWR) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.sqN == q.sqMax {
		return fmt.Errorf("immFabric: send queue of %d full: %w", q.sqMax, syscall.ENOMEM)
	}
	signaled := wr.Flags&fabric.SendSignaled != 0
	if q.firstSend < 0 {
		q.firstSend = q.recvs
	}
	switch wr.Opcode {
	case fabric.WRWriteWithImm:
		if len(wr.Buf) > 0 {
			w := &q.wr
			*w = *wr
			w.Opcode, w.Flags, w.ImmData = fabric.WRWrite, wr.Flags&^fabric.SendSignaled, 0
			err := q.QP.PostSend(w)
			*w = fabric.SendWR{}
			if err != nil {
				return err
			}
		}
		binary.LittleEndian.PutUint32(q.frame[0:], immTag)
		binary.LittleEndian.PutUint32(q.frame[4:], wr.ImmData)
		binary.LittleEndian.PutUint32(q.frame[8:], uint32(len(wr.Buf)))
		w := &q.wr
		*w = fabric.SendWR{WRID: wr.WRID, Opcode: fabric.WRSend, Buf: q.frame[:],
			Flags: fabric.SendInline | wr.Flags&fabric.SendSignaled}
		err := q.QP.PostSend(w)
		*w = fabric.SendWR{}
		if err != nil {
			return err
		}
		q.f.imms.Add(1)
	case fabric.WRSendWithImm:
		return fmt.Errorf("immFabric: Send with Immediate not emulated: %w", syscall.EINVAL)
	default:
		if err := q.QP.PostSend(wr); err != nil {
			return err
		}
		if wr.Opcode == fabric.WRWrite && !signaled && wr.MR != nil && wr.Flags&fabric.SendInline == 0 &&
			len(wr.Buf) >= siwSendPageThresh {
			q.f.byRef.Add(1)
		}
		if wr.Opcode == fabric.WRSend {
			q.f.sends.Add(1)
		}
	}
	q.sq[(q.sqH+q.sqN)%len(q.sq)] = signaled
	q.sqN++
	return nil
}

func (q *immQP) PostRecv(wr *fabric.RecvWR) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.rqN == len(q.rq) {
		return fmt.Errorf("immFabric: receive queue full: %w", syscall.ENOMEM)
	}
	s := q.nextS
	q.nextS = (s + 1) % len(q.rq)
	in := &q.rwr // the QP's own, as q.wr: posting allocates nothing
	*in = fabric.RecvWR{WRID: wr.WRID, Buf: q.stage[s*immFrameLen : (s+1)*immFrameLen], MR: q.stageMR}
	err := q.QP.PostRecv(in)
	*in = fabric.RecvWR{}
	if err != nil {
		return err
	}
	q.rq[(q.rqH+q.rqN)%len(q.rq)] = immRecv{wrid: wr.WRID, buf: wr.Buf, slot: s}
	q.rqN++
	return nil
}

// pollSend releases the send queue slots a completion frees: every
// outstanding work request up to the first signaled one.
func (q *immQP) pollSend(wcs []fabric.WC) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for k := range wcs {
		if wcs[k].Status != fabric.WCSuccess {
			q.sqN = 0 // flushed: nothing more is checked
			continue
		}
		for q.sqN > 0 {
			sig := q.sq[q.sqH]
			q.sqH = (q.sqH + 1) % len(q.sq)
			q.sqN--
			if sig {
				break
			}
		}
	}
}

// pollRecv turns the staged frames back into Write with Immediate
// completions, and places plain Sends in the receives' own buffers (a local
// length error where the buffer is too small).
func (q *immQP) pollRecv(wcs []fabric.WC) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for k := range wcs {
		wc := &wcs[k]
		if q.rqN == 0 {
			panic("immFabric: a receive completion with no receive posted")
		}
		r := q.rq[q.rqH]
		q.rqH = (q.rqH + 1) % len(q.rq)
		q.rqN--
		if r.wrid != wc.WRID {
			panic(fmt.Sprintf("immFabric: receive %#x completed where %#x was posted first", wc.WRID, r.wrid))
		}
		if wc.Status != fabric.WCSuccess {
			continue
		}
		q.recvs++
		b := q.stage[r.slot*immFrameLen:]
		if wc.ByteLen == immFrameLen && binary.LittleEndian.Uint32(b) == immTag {
			wc.Opcode, wc.WithImm = fabric.WCRecvRDMAWithImm, true
			wc.ImmData, wc.ByteLen = binary.LittleEndian.Uint32(b[4:]), binary.LittleEndian.Uint32(b[8:])
			continue
		}
		if int(wc.ByteLen) <= len(r.buf) {
			copy(r.buf, b[:wc.ByteLen])
			q.f.sendRcv.Add(1)
			continue
		}
		q.f.badRcv.Add(1)
		wc.Status = fabric.WCLocLenErr
	}
}

// immCQ is a completion queue of immQP: poll rewrites what the software
// queue gives.
type immCQ struct {
	fabric.CQ
	poll func([]fabric.WC)
	deaf bool // immFabric.deafWaits
}

// Wait is the software queue's, or with deaf, waits for ctx only.
func (c *immCQ) Wait(ctx context.Context) error {
	if c.deaf {
		<-ctx.Done()
		return ctx.Err()
	}
	return c.CQ.Wait(ctx)
}

func (c *immCQ) Poll(wcs []fabric.WC) int {
	n := c.CQ.Poll(wcs)
	c.poll(wcs[:n])
	return n
}
