package reliability_test

// Security of registered memory (issue 18 items 2 and 3), attacked as the
// adversarial test did: a raw iWARP peer (MPA and DDP written by hand)
// against a Go server using only the public API, on loopback.

import (
	"bytes"
	"errors"
	"net"
	"net/netip"
	"os"
	"strconv"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cmrt/cmrt/channel"
	"github.com/cmrt/cmrt/fabric/soft"
	"github.com/cmrt/cmrt/id"
	"github.com/cmrt/cmrt/internal/iwarp"
)

// memMarker is what the application writes into memory it has released.
const memMarker = 0xA5

// memPeer is a raw peer connected to a Go server id of its own.
type memPeer struct {
	f   *soft.Fabric
	ch  *channel.Channel
	lis *id.ID
	srv *id.ID
	c   *net.TCPConn
}

// memConnect starts a server on loopback, connects a raw peer to it (with
// a small receive buffer when stall is set, so the server stalls on it),
// and lets prep register the server id's regions before it accepts.
func memConnect(t *testing.T, stall bool, prep func(*id.ID)) *memPeer {
	t.Helper()
	p := &memPeer{}
	p.f, p.ch = fabric(t, nil)
	p.lis = listenOn(t, p.ch, netip.MustParseAddrPort("127.0.0.1:0"), 0)
	d := net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
		if !stall {
			return nil
		}
		return rc.Control(func(fd uintptr) { _ = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF, 4096) })
	}}
	c, err := d.Dial("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(int(p.lis.SrcPort()))))
	if err != nil {
		t.Fatal(err)
	}
	p.c = c.(*net.TCPConn)
	if _, err := p.c.Write(mpaRequest(t, nil, false)); err != nil {
		t.Fatal(err)
	}
	p.srv = want(t, p.ch, id.EventConnectRequest, 5*time.Second).ID
	if err := p.srv.CreateQP(nil); err != nil {
		t.Fatal(err)
	}
	prep(p.srv)
	if err := p.srv.Accept(nil); err != nil {
		t.Fatal(err)
	}
	want(t, p.ch, id.EventEstablished, 5*time.Second)
	readReply(t, p.c)
	return p
}

func (p *memPeer) send(t *testing.T, h iwarp.Header, payload []byte) {
	t.Helper()
	hdr, err := iwarp.AppendHeader(nil, &h)
	if err != nil {
		t.Fatal(err)
	}
	b, err := iwarp.AppendFPDU(nil, hdr, payload, false)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = p.c.Write(b) // may fail once the server has terminated
}

// readReq asks for size bytes at stag/to.
func (p *memPeer) readReq(t *testing.T, msn uint32, stag uint32, to uint64, size uint32) {
	t.Helper()
	p.send(t, iwarp.Header{Op: iwarp.OpReadRequest, Last: true, MSN: msn,
		Read: iwarp.ReadRequest{SinkSTag: 0x4242, Size: size, SrcSTag: stag, SrcTO: to}}, nil)
}

// memRead is what the peer got: the data messages' payload bytes and the
// Terminate, if any.
type memRead struct {
	payload []byte
	term    *iwarp.Terminate
}

// drain reads until the server closes (10 s at most) and parses the FPDUs.
func (p *memPeer) drain(t *testing.T) memRead {
	t.Helper()
	_ = p.c.SetReadDeadline(time.Now().Add(10 * time.Second))
	var raw []byte
	buf := make([]byte, 1<<20)
	for {
		n, err := p.c.Read(buf)
		raw = append(raw, buf[:n]...)
		if err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				t.Log("the server did not close the connection")
			}
			break
		}
	}
	var r memRead
	for len(raw) > 0 {
		u, n, err := iwarp.ParseFPDU(raw, false)
		if err != nil {
			t.Fatalf("FPDU from the server: %v", err)
		}
		raw = raw[n:]
		var h iwarp.Header
		pl, err := iwarp.ParseULPDU(u, &h)
		if err != nil {
			t.Fatalf("ULPDU from the server: %v", err)
		}
		if h.Op == iwarp.OpTerminate {
			tt := h.Term
			r.term = &tt
			continue
		}
		r.payload = append(r.payload, pl...)
	}
	return r
}

// waitFull waits until the peer's socket holds unread bytes and stops
// filling: the server can send no more.
func (p *memPeer) waitFull(t *testing.T) {
	t.Helper()
	rc, err := p.c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	queued := func() (n int) {
		_ = rc.Control(func(fd uintptr) { n, _ = unix.IoctlGetInt(int(fd), unix.SIOCINQ) })
		return n
	}
	deadline := time.Now().Add(10 * time.Second)
	for last, same := -1, 0; same < 5; {
		if time.Now().After(deadline) {
			t.Fatal("the peer's window never filled")
		}
		time.Sleep(10 * time.Millisecond)
		if n := queued(); n > 0 && n == last {
			same++
		} else {
			last, same = n, 0
		}
	}
}

func (p *memPeer) close(t *testing.T, base *baseline) {
	t.Helper()
	_ = p.c.Close()
	if p.srv != nil {
		_ = p.srv.Destroy()
	}
	_ = p.lis.Destroy()
	if err := p.ch.Close(); err != nil {
		t.Error(err)
	}
	base.verify(t, p.f)
}

func isTerm(tt *iwarp.Terminate, l iwarp.Layer, et, ec uint8) bool {
	return tt != nil && tt.Layer == l && tt.EType == et && tt.ECode == ec
}

// TestSecurityMemReadAfterRelease (issue 18 item 2): the peer asks for a
// whole 32 MiB region by RDMA Read and stalls its window; the application
// deregisters the region (or destroys the QP) and writes a marker into
// every byte. The peer must never receive a marker byte: the response is
// cut with a Terminate.
func TestSecurityMemReadAfterRelease(t *testing.T) {
	need(t)
	const size = 32 << 20
	for _, how := range []string{"DeregMR", "DestroyQP"} {
		t.Run(how, func(t *testing.T) {
			base := snapshot()
			buf := make([]byte, size)
			var m id.MR
			p := memConnect(t, true, func(i *id.ID) {
				var err error
				if m, err = i.RegRead(buf); err != nil {
					t.Fatal(err)
				}
			})
			p.readReq(t, 1, m.RKey(), m.Addr(), size)
			p.waitFull(t)
			var err error
			if how == "DeregMR" {
				err = p.srv.DeregMR(m)
			} else {
				err = p.srv.DestroyQP()
			}
			if err != nil {
				t.Fatal(err)
			}
			for k := range buf {
				buf[k] = memMarker
			}
			r := p.drain(t)
			if k := bytes.IndexByte(r.payload, memMarker); k >= 0 {
				t.Errorf("the peer read %d bytes written after %s returned (first at %d)",
					len(r.payload)-bytes.Count(r.payload, []byte{0}), how, k)
			}
			if len(r.payload) >= size {
				t.Errorf("the whole region went out")
			}
			wantTerm := isTerm(r.term, iwarp.LayerRDMAP, iwarp.RDMAPETypeRemoteProtection, iwarp.RDMAPECodeInvalidSTag)
			if how == "DestroyQP" {
				wantTerm = isTerm(r.term, iwarp.LayerRDMAP, iwarp.RDMAPETypeCatastrophic, iwarp.RDMAPECodeUnspecified)
			}
			if !wantTerm {
				t.Errorf("Terminate %+v", r.term)
			} else {
				want(t, p.ch, id.EventDisconnected, 5*time.Second)
				record(t, "Read of a released region: "+how, "%d of %d bytes out, all before %s; then Terminate %s/%d/%#x",
					len(r.payload), size, how, r.term.Layer, r.term.EType, r.term.ECode)
			}
			p.close(t, base)
		})
	}
}

// TestSecurityMemWriteAfterDestroyQP (issue 18 item 2): the peer places
// the first segment of an RDMA Write (and proves it placed with a Read
// behind it), the application destroys the QP (or deregisters the region)
// and clears the buffer, then the peer sends the rest of the Write and
// walks the region: nothing lands.
func TestSecurityMemWriteAfterDestroyQP(t *testing.T) {
	need(t)
	for _, how := range []string{"DestroyQP", "DeregMR"} {
		t.Run(how, func(t *testing.T) {
			base := snapshot()
			buf := make([]byte, 64<<10)
			probe := make([]byte, 8)
			var m, pm id.MR
			p := memConnect(t, false, func(i *id.ID) {
				var err error
				if m, err = i.RegWrite(buf); err != nil {
					t.Fatal(err)
				}
				if pm, err = i.RegRead(probe); err != nil {
					t.Fatal(err)
				}
			})
			p.send(t, iwarp.Header{Op: iwarp.OpWrite, STag: m.RKey(), TO: m.Addr()}, bytes.Repeat([]byte{'w'}, 1024))
			p.readReq(t, 1, pm.RKey(), pm.Addr(), uint32(len(probe)))
			// The Read Response means the first segment was placed.
			_ = p.c.SetReadDeadline(time.Now().Add(5 * time.Second))
			resp := make([]byte, iwarp.FPDULen(iwarp.TaggedHeaderLen+len(probe)))
			if _, err := readFull(p.c, resp); err != nil {
				t.Fatalf("no Read Response: %v", err)
			}
			var err error
			if how == "DestroyQP" {
				err = p.srv.DestroyQP()
			} else {
				err = p.srv.DeregMR(m)
			}
			if err != nil {
				t.Fatal(err)
			}
			clear(buf)
			after := []byte("AFTER-QP-DESTROYED")
			for off := 1024; off+len(after) <= len(buf); off += 4096 {
				p.send(t, iwarp.Header{Op: iwarp.OpWrite, STag: m.RKey(), TO: m.Addr() + uint64(off)}, after)
			}
			r := p.drain(t)
			if r.term != nil {
				want(t, p.ch, id.EventDisconnected, 5*time.Second)
			}
			srv := p.srv
			p.srv = nil
			_ = srv.Destroy() // orders the server's loop with what follows
			landed := bytes.Index(buf, after)
			if landed >= 0 {
				t.Errorf("a segment sent after %s landed at offset %d", how, landed)
			}
			if r.term == nil {
				t.Errorf("no Terminate")
			} else if landed < 0 {
				record(t, "Write into a released region: "+how, "nothing landed; Terminate %s/%d/%#x", r.term.Layer, r.term.EType, r.term.ECode)
			}
			p.close(t, base)
		})
	}
}

func readFull(c net.Conn, b []byte) (int, error) {
	n := 0
	for n < len(b) {
		k, err := c.Read(b[n:])
		n += k
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// TestSecurityMemSTagCounting (issue 18 item 3): a region with remote
// access that was never advertised is not reachable by counting from one
// that was. The old scheme gave the next region STag+0x101 at base
// (index+1)<<32; a Read or a Write there now fails with a Terminate and
// neither reads nor changes the secret.
func TestSecurityMemSTagCounting(t *testing.T) {
	need(t)
	for _, op := range []iwarp.Opcode{iwarp.OpReadRequest, iwarp.OpWrite} {
		t.Run(op.String(), func(t *testing.T) {
			base := snapshot()
			secret := bytes.Repeat([]byte("SECRET!!"), 8)
			keep := append([]byte(nil), secret...)
			var adv id.MR
			p := memConnect(t, false, func(i *id.ID) {
				var err error
				if adv, err = i.RegRead(make([]byte, 64)); err != nil {
					t.Fatal(err)
				}
				if _, err = i.QP().RegMR(secret, id.AccessLocalWrite|id.AccessRemoteRead|id.AccessRemoteWrite); err != nil {
					t.Fatal(err)
				}
			})
			idx, key := adv.RKey()>>8, adv.RKey()&0xff
			stag := (idx+1)<<8 | (key+1)&0xff
			to := uint64(idx+1) << 32
			if op == iwarp.OpWrite {
				p.send(t, iwarp.Header{Op: iwarp.OpWrite, Last: true, STag: stag, TO: to}, make([]byte, len(secret)))
			} else {
				p.readReq(t, 1, stag, to, uint32(len(secret)))
			}
			r := p.drain(t)
			if bytes.Contains(r.payload, keep[:8]) {
				t.Errorf("the peer read the secret region")
			}
			if r.term == nil {
				t.Errorf("no Terminate")
			} else {
				record(t, "STag counting: "+op.String(), "refused, Terminate %s/%d/%#x", r.term.Layer, r.term.EType, r.term.ECode)
				want(t, p.ch, id.EventDisconnected, 5*time.Second)
			}
			srv := p.srv
			p.srv = nil
			_ = srv.Destroy() // orders the server's loop with what follows
			if !bytes.Equal(secret, keep) {
				t.Errorf("the peer overwrote the secret region")
			}
			p.close(t, base)
		})
	}
}

// TestSecurityMemStaleSTag (issue 18 item 3): an STag the peer was given
// for a region since deregistered does not name the region registered
// 256 registrations later (the old scheme reused the index at once and
// counted the 8-bit key, so it did, at the same base address).
func TestSecurityMemStaleSTag(t *testing.T) {
	need(t)
	base := snapshot()
	secret := bytes.Repeat([]byte("SECRET!!"), 8)
	var stale id.MR
	p := memConnect(t, false, func(i *id.ID) {
		var err error
		if stale, err = i.RegRead(make([]byte, 64)); err != nil {
			t.Fatal(err)
		}
		if err := i.DeregMR(stale); err != nil {
			t.Fatal(err)
		}
		for k := 0; k < 255; k++ {
			m, err := i.RegRead(make([]byte, 64))
			if err != nil {
				t.Fatal(err)
			}
			if err := i.DeregMR(m); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := i.RegRead(secret); err != nil {
			t.Fatal(err)
		}
	})
	p.readReq(t, 1, stale.RKey(), stale.Addr(), uint32(len(secret)))
	r := p.drain(t)
	if bytes.Contains(r.payload, secret[:8]) {
		t.Errorf("a stale STag read the new region")
	}
	if !isTerm(r.term, iwarp.LayerRDMAP, iwarp.RDMAPETypeRemoteProtection, iwarp.RDMAPECodeInvalidSTag) {
		t.Errorf("Terminate %+v, want a protection error for the STag", r.term)
	} else {
		record(t, "stale STag after 256 registrations", "refused, Terminate %s/%d/%#x", r.term.Layer, r.term.EType, r.term.ECode)
		want(t, p.ch, id.EventDisconnected, 5*time.Second)
	}
	p.close(t, base)
}
