package soft_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cmrt/cmrt/fabric/soft"
	"github.com/cmrt/cmrt/id"
	"github.com/cmrt/cmrt/internal/iwarp"
)

// TestRCCloseLeavesEpollSet: a connection's socket leaves its loop's epoll
// set as it is closed. One never duplicated is only forgotten by the loop
// (no EPOLL_CTL_DEL: the kernel drops the item with the socket's last
// descriptor); one whose direct reader duplicated it (rc_rxwait.go) is
// taken out explicitly, since the duplicate, still open in a parked
// waiter as the socket closes, would keep the item in the set.
func TestRCCloseLeavesEpollSet(t *testing.T) {
	for _, tc := range []struct {
		name   string
		dup    bool // a direct reader made a duplicate
		parked bool // and its waiter is parked as the connection closes
	}{
		{"never-duplicated", false, false},
		{"duplicate-released", true, false},
		{"duplicate-parked", true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newPair(t, pairOpts{})
			var errc <-chan error
			stop := func() {}
			if tc.dup {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				stop = cancel
				errc = parkedOn(t, ctx, p.cli.qp, p.cli.qp.RecvCQ())
				if !tc.parked {
					// Flush the wait out: destroying the QP ends it.
					if err := p.cli.id.DestroyQP(); err != nil {
						t.Fatal(err)
					}
					if err := waitReturn(t, errc); err == nil {
						t.Fatal("wait returned no error")
					}
					waitFor(t, func() bool { return !soft.DirectWaiting(p.cli.qp) })
					errc = nil
				}
			}
			inSet, err := soft.CloseConnInEpoll(p.cli.id.Endpoint())
			if err != nil {
				t.Fatal(err)
			}
			if inSet {
				t.Fatal("the closed socket is still in an epoll set")
			}
			if errc != nil {
				// The waiter, kicked by the close, waits on for a completion
				// the loop's way: end it.
				stop()
				_ = waitReturn(t, errc)
			}
			p.srvCh.want(t, id.EventDisconnected)
			p.close()
		})
	}
}

// TestRCDestroyDeliversQueuedData: a connection whose id is disconnected
// and destroyed while its socket still holds bytes the peer has not taken
// (the peer's receive window is full) delivers them all, then its FIN,
// even though the peer goes on sending meanwhile (as an rsockets peer
// sends credit updates while it reads the end of the stream). Closing the
// socket at the Destroy made Linux answer the peer's next bytes with a
// RST, which dropped what was still queued: the peer read ECONNRESET
// before the end of the data.
func TestRCDestroyDeliversQueuedData(t *testing.T) {
	// A raw responder with a tiny receive buffer: what the Go side sends
	// waits in the Go side's socket.
	lc := net.ListenConfig{Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		err := rc.Control(func(fd uintptr) {
			serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF, 1024)
		})
		return errors.Join(err, serr)
	}}
	ln, err := lc.Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	f := soft.New()
	ch := newRCChan(t, f)
	const nMsg, msgLen = 8, 1024
	msg := pattern(nMsg*msgLen, 3)
	var m id.MR
	e := dial(t, ch, uint16(ln.Addr().(*net.TCPAddr).Port), id.QPInitAttr{Cap: id.QPCap{MaxSendWR: nMsg, MaxRecvWR: 1}}, nil,
		func(tb testing.TB, e *rcEnd) { m = reg(tb, e, msg, 0) })
	raw, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	if req, _ := readMPA(t, raw); req.CRC {
		t.Fatalf("request %+v", req)
	}
	rep := iwarp.MPAFrame{Reply: true, Rev: 2, Enhanced: true, IRD: 1, ORD: 1}
	b, _ := iwarp.AppendMPA(nil, &rep)
	if _, err := raw.Write(b); err != nil {
		t.Fatal(err)
	}
	ch.want(t, id.EventEstablished)
	for k := 0; k < nMsg; k++ {
		if err := e.id.PostSend(uint64(k), msg[k*msgLen:(k+1)*msgLen], m, id.SendSignaled); err != nil {
			t.Fatal(err)
		}
	}
	for k := 0; k < nMsg; k++ {
		wantWC(t, comp(t, e.qp.SendCQ()), id.WCSuccess, id.WCSend)
	}
	// Every message is in the Go side's socket (or the peer's): the
	// consumer disconnects and destroys, as rsocket's Close does.
	if err := e.id.Disconnect(); err != nil {
		t.Fatal(err)
	}
	ch.want(t, id.EventDisconnected)
	if err := e.id.Destroy(); err != nil {
		t.Fatal(err)
	}
	// The peer sends while it reads (what the Go side discards), until
	// it has read to the end.
	done := make(chan struct{})
	wrote := make(chan struct{})
	go func() {
		defer close(wrote)
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		zw := soft.FPDU(iwarp.Header{Op: iwarp.OpWrite, Last: true, STag: 1}, nil, false)
		for {
			select {
			case <-done:
				return
			case <-tick.C:
				if _, err := raw.Write(zw); err != nil {
					return
				}
			}
		}
	}()
	_ = raw.SetReadDeadline(time.Now().Add(10 * time.Second))
	got, err := io.ReadAll(raw)
	close(done)
	<-wrote
	if err != nil {
		t.Fatalf("after %d bytes: %v", len(got), err)
	}
	var all []byte
	for k := 0; len(got) > 0; k++ {
		u, n, err := iwarp.ParseFPDU(got, false)
		if err != nil || len(u) < iwarp.UntaggedHeaderLen {
			t.Fatalf("FPDU %d from the fabric: %v (%d bytes)", k, err, len(u))
		}
		all = append(all, u[iwarp.UntaggedHeaderLen:]...)
		got = got[n:]
	}
	if !bytes.Equal(all, msg) {
		t.Fatal("the messages differ from what was sent")
	}
	_ = raw.Close()
	_ = ch.src.Close()
	quiesceFabs(t, f)
}
