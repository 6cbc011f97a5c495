package rsocket

import (
	"bytes"
	"io"
	"net"
	"testing"
	"time"

	"golang.org/x/net/nettest"

	"github.com/cmrt/cmrt/fabric/soft"
	"github.com/cmrt/cmrt/id"
)

// transports are the two ways rsockets sends its message words, each with
// the options that put a connection on a fabric speaking it: iWARP (the
// software fabric: a Send after each Write) and InfiniBand (immFabric:
// Writes with Immediate).
var transports = []struct {
	name    string
	msgSend bool
	opts    []Option
}{
	{"iwarp", true, nil},
	{"ib", false, []Option{WithFabric(ibFabric)}},
}

// with returns opts after the transport's options.
func with(tr []Option, opts ...Option) []Option {
	return append(append([]Option(nil), tr...), opts...)
}

// immCounts is a snapshot of an immFabric's counters.
type immCounts struct{ imms, sends, sendRcv, badRcv int64 }

func (f *immFabric) counts() immCounts {
	return immCounts{f.imms.Load(), f.sends.Load(), f.sendRcv.Load(), f.badRcv.Load()}
}

func ibCounts() immCounts { return ibFabric.counts() }

func (c immCounts) sub(d immCounts) immCounts {
	return immCounts{c.imms - d.imms, c.sends - d.sends, c.sendRcv - d.sendRcv, c.badRcv - d.badRcv}
}

// TestMessageMode checks that each side picks its mode from its device's
// transport, as rs_create_ep does, and that on InfiniBand every message
// word (data, credits with and without an SGL entry, the closing
// disconnect) goes as a Write with Immediate and none as a Send.
func TestMessageMode(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			before := ibCounts()
			c1, c2, stop := pipe(t, with(tr.opts, WithRecvBuffer(4096), WithRQSize(16))...)
			// A mode that loses credits or slots stalls: fail, not hang.
			c1.SetDeadline(time.Now().Add(20 * time.Second))
			c2.SetDeadline(time.Now().Add(20 * time.Second))
			if c1.msgSend != tr.msgSend || c2.msgSend != tr.msgSend {
				t.Fatalf("msgSend %v/%v, want %v", c1.msgSend, c2.msgSend, tr.msgSend)
			}
			// Enough data to use up both halves of the receive buffer
			// and the credits a few times over: credit messages with and
			// without a new SGL entry go both ways.
			want := make([]byte, 64<<10)
			for k := range want {
				want[k] = byte(k * 31)
			}
			transfer(t, c1, c2, want, 4)
			// Once every send has completed, the send queue and control
			// slots are all back: a mode that frees more slots than its
			// messages took (or fewer) would show here.
			for _, c := range []*Conn{c1, c2} {
				settled(t, c)
			}
			stop()
			after := ibCounts()
			d := after.sub(before)
			imms, sends, bad := d.imms, d.sends, d.badRcv+d.sendRcv
			if tr.msgSend {
				if imms != 0 {
					t.Fatalf("%d Writes with Immediate on iWARP", imms)
				}
				return
			}
			// 64 KiB in messages of at most 2 KiB (half the buffer).
			if imms < 4*32 || sends != 0 || bad != 0 {
				t.Fatalf("%d Writes with Immediate, %d Sends posted, %d received: want >= %d, 0, 0", imms, sends, bad, 4*32)
			}
		})
	}
}

// TestImmNettestConn runs the conformance suite in the InfiniBand mode
// with the smallest queues and buffers: credits and buffer halves wrap all
// the time, and the send queue (16, enforced by immFabric) is full often.
func TestImmNettestConn(t *testing.T) {
	before := ibCounts()
	nettest.TestConn(t, func() (c1, c2 net.Conn, stop func(), err error) {
		a, b, s := pipe(t, WithFabric(ibFabric), WithSQSize(16), WithRQSize(16), WithRecvBuffer(4096),
			WithSendBuffer(4096), WithInline(0))
		return a, b, s, nil
	})
	if c := ibCounts().sub(before); c.sends != 0 || c.sendRcv != 0 || c.badRcv != 0 {
		t.Fatalf("%d Sends posted in the InfiniBand mode", c.sends)
	}
}

// TestWCMessage checks how a receive completion yields its message word,
// in both forms.
func TestWCMessage(t *testing.T) {
	mbuf := []byte{0, 0, 0, 0, 0x78, 0x56, 0x34, 0x12}
	for _, tc := range []struct {
		name string
		wc   id.WC
		m    uint32
		slot int
		ok   bool
	}{
		{"imm", id.WC{WRID: recvFlag | 1, WithImm: true, ImmData: 0xdeadbeef, ByteLen: 2048}, 0xdeadbeef, 1, true},
		{"imm-zero-length", id.WC{WRID: recvFlag, WithImm: true, ImmData: 7}, 7, 0, true},
		{"send", id.WC{WRID: recvFlag | 1, ByteLen: 4}, 0x12345678, 1, true},
		{"send-short", id.WC{WRID: recvFlag | 1, ByteLen: 3}, 0, 0, false},
		{"send-long", id.WC{WRID: recvFlag | 1, ByteLen: 16}, 0, 0, false},
		{"no-slot", id.WC{WRID: recvFlag | 2, WithImm: true}, 0, 0, false},
		{"send-id", id.WC{WRID: 1, WithImm: true}, 0, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wc := tc.wc
			m, slot, err := wcMessage(&wc, mbuf, peerOrder(0))
			if (err == nil) != tc.ok || m != tc.m || slot != tc.slot {
				t.Fatalf("wcMessage = %#x, %d, %v; want %#x, %d, ok %v", m, slot, err, tc.m, tc.slot, tc.ok)
			}
		})
	}
}

// settled waits (up to 10 s) until c has no send in flight, judged by the
// fabric, not by c's own accounting: every work request posted has
// completed once a zero-length Write posted last has. It then checks the
// accounting has every send-queue and control slot back.
func settled(t *testing.T, c *Conn) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	kas := c.keepalives
	deadline := time.Now().Add(10 * time.Second)
	// Control messages still in flight (credit updates) hold every slot
	// until their completions are polled: poll until one is back.
	for c.pollCQs(); !c.ctrlAvail(); c.pollCQs() {
		if time.Now().After(deadline) {
			t.Fatal("after 10 s: no control slot for the probe")
		}
		c.mu.Unlock()
		time.Sleep(time.Millisecond)
		c.mu.Lock()
	}
	c.ctrlSeq++
	if err := c.cm.PostWrite(sendID(kKeepalive, 1, 0), nil, nil, id.SendSignaled, 0, 0); err != nil {
		t.Fatal(err)
	}
	// Handling completions may post credits (updateCredits); a fabric that
	// completes a post before it returns has their completions queued by
	// then: poll until they are in too.
	for c.pollCQs(); c.keepalives == kas || !c.allSendsDone(); c.pollCQs() {
		if time.Now().After(deadline) {
			t.Fatalf("after 10 s: probe done %v, %d send-queue slots of %d and %d control slots of %d back", c.keepalives != kas, c.sqeAvail, c.cfg.sqSize-ctrlSlots, c.ctrlMax-c.ctrlSeq, ctrlSlots)
		}
		c.mu.Unlock()
		time.Sleep(time.Millisecond)
		c.mu.Lock()
	}
	if c.sqeAvail != c.cfg.sqSize-ctrlSlots || c.ctrlMax-c.ctrlSeq != ctrlSlots {
		t.Fatalf("settled with %d send-queue slots of %d and %d control slots of %d",
			c.sqeAvail, c.cfg.sqSize-ctrlSlots, c.ctrlMax-c.ctrlSeq, ctrlSlots)
	}
}

// TestMixedModes connects a side that sends its message words as Sends
// (its device says iWARP) to one that sends them as Writes with Immediate
// (InfiniBand), both ways round, over one wire that carries both: each
// side sends in its own mode and takes the peer's, as a receiver must
// (rsockets decides the mode per side, and its receive path reads
// immediate data or the Send alike). Data both ways, a buffer's worth of
// credit updates, and the half close all get through, and every slot comes
// back.
func TestMixedModes(t *testing.T) {
	for _, tc := range []struct {
		name         string
		dial, listen *immFabric
	}{
		{"sends-dial-imm", iwFabric, ibFabric},
		{"imm-dial-sends", ibFabric, iwFabric},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ib0, iw0 := ibFabric.counts(), iwFabric.counts()
			small := []Option{WithRecvBuffer(4096), WithRQSize(16), WithSQSize(16)}
			c1, c2, stop := pipeWith(t, with([]Option{WithFabric(tc.dial)}, small...),
				with([]Option{WithFabric(tc.listen)}, small...))
			defer stop()
			c1.SetDeadline(time.Now().Add(20 * time.Second))
			c2.SetDeadline(time.Now().Add(20 * time.Second))
			if want := tc.dial == iwFabric; c1.msgSend != want || c2.msgSend == want {
				t.Fatalf("msgSend %v/%v, want %v/%v", c1.msgSend, c2.msgSend, want, !want)
			}
			want := make([]byte, 32<<10)
			for k := range want {
				want[k] = byte(k * 13)
			}
			for _, dir := range [][2]*Conn{{c1, c2}, {c2, c1}} {
				errc := make(chan error, 1)
				go func() {
					_, err := dir[0].Write(want)
					errc <- err
				}()
				got := make([]byte, len(want))
				if _, err := io.ReadFull(dir[1], got); err != nil {
					t.Fatal(err)
				}
				if err := <-errc; err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(got, want) {
					t.Fatal("data differs")
				}
			}
			settled(t, c1)
			settled(t, c2)
			if err := c1.CloseWrite(); err != nil {
				t.Fatal(err)
			}
			if b, err := io.ReadAll(c2); err != nil || len(b) != 0 {
				t.Fatalf("after CloseWrite: %d bytes, %v", len(b), err)
			}
			ib, iw := ibFabric.counts().sub(ib0), iwFabric.counts().sub(iw0)
			// 32 KiB each way in messages of at most 2 KiB: at least 16
			// message words each way, in the sender's form, received in it.
			if ib.imms < 16 || ib.sends != 0 || iw.sends < 16 || iw.imms != 0 {
				t.Fatalf("imm side posted %d Writes with Immediate and %d Sends, Sends side %d and %d",
					ib.imms, ib.sends, iw.imms, iw.sends)
			}
			if ib.sendRcv < 16 || ib.badRcv != 0 || iw.badRcv != 0 || iw.sendRcv != 0 {
				t.Fatalf("Sends received: imm side %d (%d failed), Sends side %d (%d failed)",
					ib.sendRcv, ib.badRcv, iw.sendRcv, iw.badRcv)
			}
		})
	}
}

// TestResponderWaitsForInitiator: on iWARP the accepting side sends
// nothing (credits, data, control) until the initiator's first message
// has arrived, as MPA asks of a responder: siw as initiator fails the
// connection when an FPDU reaches it before it has read the MPA reply (a
// C client's connect failing against a Go server on the kernel fabric).
// The initiator speaks at once; on InfiniBand neither side waits.
func TestResponderWaitsForInitiator(t *testing.T) {
	for _, tr := range []string{transportIWARP, "InfiniBand"} {
		t.Run(tr, func(t *testing.T) {
			f := &immFabric{inner: soft.Default(), transport: tr}
			c1, c2, stop := pipe(t, WithFabric(f), WithRecvBuffer(4096), WithRQSize(16))
			defer stop()
			c1.SetDeadline(time.Now().Add(10 * time.Second))
			c2.SetDeadline(time.Now().Add(10 * time.Second))
			// The accepting side speaks first at the application level.
			errc := make(chan error, 1)
			go func() {
				_, err := c2.Write([]byte("hello"))
				errc <- err
			}()
			b := make([]byte, 5)
			if _, err := io.ReadFull(c1, b); err != nil || string(b) != "hello" {
				t.Fatalf("read %q, %v", b, err)
			}
			if err := <-errc; err != nil {
				t.Fatal(err)
			}
			f.qpMu.Lock()
			qps := append([]*immQP(nil), f.qps...)
			f.qpMu.Unlock()
			if len(qps) != 2 {
				t.Fatalf("%d queue pairs, want 2", len(qps))
			}
			first := func(q *immQP) int { q.mu.Lock(); defer q.mu.Unlock(); return q.firstSend }
			dialer, acceptor := first(qps[0]), first(qps[1])
			if dialer != 0 {
				t.Errorf("the initiator first sent after %d receives, want 0 (it speaks at once)", dialer)
			}
			if tr == transportIWARP && acceptor < 1 {
				t.Errorf("the iWARP responder first sent after %d receives, want at least 1", acceptor)
			}
			if acceptor < 0 {
				t.Errorf("the responder never sent")
			}
		})
	}
}

// TestSendBufferNotByReference checks that on iWARP no data Write leaves
// the send buffer unsignaled. siw sends an unsignaled Write of a page or
// more by reference (zero copy): TCP reads its bytes from the send buffer
// after the Send behind it has completed, so a buffer released at that
// Send's completion was overwritten by the next Write's copy while its
// old bytes were still on their way (a C client read corrupted data from
// a Go server on the kernel fabric over siw0). rsockets signals every
// request, and siw copies a signaled one. The data must arrive whole and
// every send-queue slot and the whole send buffer come back, now that a
// message completes twice.
func TestSendBufferNotByReference(t *testing.T) {
	before := siwFabric.byRef.Load()
	c1, c2, stop := pipe(t, WithFabric(siwFabric), WithRecvBuffer(64<<10), WithSendBuffer(32<<10))
	defer stop()
	c1.SetDeadline(time.Now().Add(20 * time.Second))
	c2.SetDeadline(time.Now().Add(20 * time.Second))
	if !c1.msgSend || !c2.msgSend {
		t.Fatal("siwFabric: want message words as Sends")
	}
	want := make([]byte, 1<<20)
	for k := range want {
		want[k] = byte(k*7 + k>>12)
	}
	transfer(t, c1, c2, want, 3)
	for _, c := range []*Conn{c1, c2} {
		settled(t, c)
	}
	c1.mu.Lock()
	used := c1.sUsed
	c1.mu.Unlock()
	if used != 0 {
		t.Errorf("send buffer: %d bytes still held after every send completed", used)
	}
	if n := siwFabric.byRef.Load() - before; n != 0 {
		t.Errorf("%d unsignaled Writes of a page or more from the send buffer (siw sends them by reference)", n)
	}
}

// transfer writes want on w and reads it whole from r, rounds times,
// failing t if either side fails or the bytes differ.
func transfer(t *testing.T, w, r *Conn, want []byte, rounds int) {
	t.Helper()
	for round := 0; round < rounds; round++ {
		errc := make(chan error, 1)
		go func() {
			_, err := w.Write(want)
			errc <- err
		}()
		got := make([]byte, len(want))
		if _, err := io.ReadFull(r, got); err != nil {
			t.Fatalf("round %d: read: %v (writer: %v)", round, err, <-errc)
		}
		if err := <-errc; err != nil {
			t.Fatalf("round %d: write: %v", round, err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("round %d: data differs", round)
		}
	}
}
