package reliability_test

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/cmrt/cmrt/id"
	"github.com/cmrt/cmrt/poll"
)

// Traffic: every message is msgSize bytes starting with the connection's
// token and the message's sequence number (both big-endian u64), so the
// receiver checks that it gets each acknowledged message exactly once and
// in order. A client sends up to window messages ahead; the server echoes
// each message back (same sequence number) after reposting its receive, so
// the client never has more in flight than the server has receives posted.
const msgSize = 64

// peer is one connection's data path state, shared by the CQ multiplexer
// goroutine (completions) and the CM handlers (set-up, teardown).
type peer struct {
	mu    sync.Mutex
	cm    *id.ID
	qp    id.QP
	token uint64
	mr    id.MR
	buf   []byte // depth receive buffers
	depth int
	echo  bool // server: answer every message

	// receive side
	expect  uint64 // next sequence number expected
	recv    uint64 // messages received
	bad     uint64 // wrong token, out of order or short
	flushed uint64 // receives completed with an error (flush)
	// send side
	next    uint64 // client: next sequence number to send
	acked   uint64 // send completions with success
	sendErr uint64 // send completions with an error
	postErr error
	sending bool // client: send a new message per echo
	closed  bool
	key     uint64
}

// newPeer creates the QP of cm, registers depth receive buffers and posts
// them.
func newPeer(cm *id.ID, token uint64, depth int, echo bool) (*peer, error) {
	attr := id.QPInitAttr{Cap: id.QPCap{MaxSendWR: 2 * depth, MaxRecvWR: depth}}
	if err := cm.CreateQP(&attr); err != nil {
		return nil, err
	}
	p := &peer{cm: cm, qp: cm.QP(), token: token, depth: depth, echo: echo, buf: make([]byte, depth*msgSize)}
	var err error
	if p.mr, err = cm.RegMsgs(p.buf); err != nil {
		return nil, err
	}
	for k := 0; k < depth; k++ {
		if err := p.postRecv(uint64(k)); err != nil {
			return nil, err
		}
	}
	return p, nil
}

func (p *peer) postRecv(slot uint64) error {
	b := p.buf[int(slot)*msgSize : int(slot+1)*msgSize]
	return p.qp.PostRecv(&id.RecvWR{WRID: slot, Buf: b, MR: p.mr})
}

// sendLocked posts message seq (inline: the buffer is free at once).
func (p *peer) sendLocked(seq uint64) {
	var m [msgSize]byte
	binary.BigEndian.PutUint64(m[0:], p.token)
	binary.BigEndian.PutUint64(m[8:], seq)
	err := p.qp.PostSend(&id.SendWR{WRID: seq, Opcode: id.WRSend, Flags: id.SendInline | id.SendSignaled, Buf: m[:]})
	if err != nil && p.postErr == nil && !p.closed {
		p.postErr = err
	}
}

// start begins a client's traffic: window messages in flight.
func (p *peer) start(window int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.sending = true
	for k := 0; k < window; k++ {
		p.sendLocked(p.next)
		p.next++
	}
}

// stop ends new sends; inFlight reports the messages not yet echoed.
func (p *peer) stop() {
	p.mu.Lock()
	p.sending = false
	p.mu.Unlock()
}

func (p *peer) inFlight() uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.next - p.recv
}

// drain handles every queued completion.
func (p *peer) drain() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.pollLocked(p.qp.SendCQ())
	p.pollLocked(p.qp.RecvCQ())
}

func (p *peer) pollLocked(cq id.CQ) {
	var wcs [32]id.WC
	for {
		n := cq.Poll(wcs[:])
		if n == 0 {
			return
		}
		for k := 0; k < n; k++ {
			p.completeLocked(&wcs[k])
		}
	}
}

func (p *peer) completeLocked(wc *id.WC) {
	if wc.Opcode != id.WCRecv {
		if wc.Status == id.WCSuccess {
			p.acked++
		} else {
			p.sendErr++
		}
		return
	}
	if wc.Status != id.WCSuccess {
		p.flushed++
		return
	}
	slot := int(wc.WRID)
	b := p.buf[slot*msgSize : slot*msgSize+int(wc.ByteLen)]
	var seq uint64
	if len(b) != msgSize || binary.BigEndian.Uint64(b) != p.token {
		p.bad++
	} else if seq = binary.BigEndian.Uint64(b[8:]); seq != p.expect {
		p.bad++
	}
	p.expect = seq + 1
	p.recv++
	if p.closed {
		return
	}
	if err := p.postRecv(uint64(slot)); err != nil && p.postErr == nil {
		p.postErr = err
	}
	switch {
	case p.echo:
		p.sendLocked(seq)
	case p.sending:
		p.sendLocked(p.next)
		p.next++
	}
}

// stats is a connection's final figures.
type stats struct {
	token                             uint64
	recv, bad, flushed, acked, sndErr uint64
	postErr                           error
}

func (p *peer) stats() stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return stats{p.token, p.recv, p.bad, p.flushed, p.acked, p.sendErr, p.postErr}
}

func (s stats) String() string {
	pe := "nil"
	if s.postErr != nil && !errors.Is(s.postErr, syscall.EINVAL) {
		pe = "error"
	}
	return fmt.Sprintf("token=%d recv=%d bad=%d flushed=%d acked=%d senderr=%d posterr=%s",
		s.token, s.recv, s.bad, s.flushed, s.acked, s.sndErr, pe)
}

// cqMux polls the completion queues of many peers from one goroutine with
// epoll (the CQ descriptors are readable while completions are queued).
type cqMux struct {
	p     *poll.Poller
	w     *poll.Waker
	mu    sync.Mutex
	peers map[uint64]*peer
	next  uint64
	stop  atomic.Bool
	done  chan struct{}
}

const muxWakeKey = 0

func newCQMux() (*cqMux, error) {
	p, err := poll.Open(256)
	if err != nil {
		return nil, err
	}
	w, err := poll.NewWaker()
	if err != nil {
		_ = p.Close()
		return nil, err
	}
	if err := p.Add(w.Fd(), poll.In, muxWakeKey); err != nil {
		_ = p.Close()
		_ = w.Close()
		return nil, err
	}
	m := &cqMux{p: p, w: w, peers: make(map[uint64]*peer), next: 2, done: make(chan struct{})}
	go m.loop()
	return m, nil
}

// add starts polling p's completion queues.
func (m *cqMux) add(p *peer) error {
	m.mu.Lock()
	key := m.next
	m.next += 2
	m.peers[key], m.peers[key+1] = p, p
	m.mu.Unlock()
	p.mu.Lock()
	p.key = key
	p.mu.Unlock()
	if err := m.p.Add(p.qp.SendCQ().Fd(), poll.In, key); err != nil {
		return err
	}
	return m.p.Add(p.qp.RecvCQ().Fd(), poll.In, key+1)
}

// remove stops polling p (before its QP is destroyed).
func (m *cqMux) remove(p *peer) {
	p.mu.Lock()
	key := p.key
	p.mu.Unlock()
	m.mu.Lock()
	_, ok := m.peers[key]
	delete(m.peers, key)
	delete(m.peers, key+1)
	m.mu.Unlock()
	if ok {
		_ = m.p.Delete(p.qp.SendCQ().Fd())
		_ = m.p.Delete(p.qp.RecvCQ().Fd())
	}
}

func (m *cqMux) loop() {
	defer close(m.done)
	evs := make([]poll.Event, 256)
	for !m.stop.Load() {
		n, err := m.p.Wait(evs, -1)
		if err != nil {
			continue
		}
		for k := 0; k < n; k++ {
			key := evs[k].Data
			if key == muxWakeKey {
				m.w.Reset()
				continue
			}
			m.mu.Lock()
			p := m.peers[key]
			m.mu.Unlock()
			if p == nil {
				continue // removed after epoll reported it
			}
			p.mu.Lock()
			if key&1 == 0 {
				p.pollLocked(p.qp.SendCQ())
			} else {
				p.pollLocked(p.qp.RecvCQ())
			}
			p.mu.Unlock()
		}
	}
}

// close stops the goroutine and releases the descriptors.
func (m *cqMux) close() {
	m.stop.Store(true)
	_ = m.w.Wake()
	<-m.done
	_ = m.p.Close()
	_ = m.w.Close()
}
