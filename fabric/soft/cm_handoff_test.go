package soft_test

import (
	"net"
	"net/netip"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cmrt/cmrt/fabric/soft"
	"github.com/cmrt/cmrt/id"
)

// The set-up calls that need no loop do not wait for one: each test holds a
// fabric's loop busy and checks that the call returns and its peer
// progresses. Each such trip to the loop was a goroutine hand-off (and a
// wakeup) in every connection's set-up.

// TestAcceptWithoutLoop: Accept writes the MPA Reply on the caller's
// goroutine, so it returns, and the initiator is ESTABLISHED, while the
// responder's loop is busy; the responder's ESTABLISHED (P2P: on the RTR,
// which the loop reads) follows once the loop runs.
func TestAcceptWithoutLoop(t *testing.T) {
	sf, cf := soft.New(soft.WithName("srv-accept")), soft.New(soft.WithName("cli-accept"))
	defer sf.Quiesce()
	defer cf.Quiesce()
	sch, cch := newChannel(t, sf), newChannel(t, cf)
	l := cmListen(t, sch, nil)
	defer l.Destroy()
	cli := connectRC(t, cch, l.LocalAddr(), "hold")
	defer cli.Destroy()
	ev := next(t, sch, id.EventConnectRequest)
	child := ev.ID
	defer child.Destroy()
	_ = ev.Ack()

	release := soft.HoldLoop(sf)
	defer release()
	done := make(chan error, 1)
	go func() { done <- child.Accept(nil) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("accept: %v", err)
		}
	case <-time.After(2 * time.Second):
		release()
		<-done
		t.Fatal("accept waited for the responder's loop")
	}
	_ = next(t, cch, id.EventEstablished).Ack()
	release()
	_ = next(t, sch, id.EventEstablished).Ack()
}

// TestConnectRequestWithoutLoop: when TCP is up as connect(2) returns (on
// loopback it is), Connect writes the MPA Request itself, so the responder
// gets its CONNECT_REQUEST while the initiator's loop is busy; the
// initiator's ESTABLISHED (its loop reads the Reply) follows once the
// loop runs.
func TestConnectRequestWithoutLoop(t *testing.T) {
	sf, cf := soft.New(soft.WithName("srv-connect")), soft.New(soft.WithName("cli-connect"))
	defer sf.Quiesce()
	defer cf.Quiesce()
	sch, cch := newChannel(t, sf), newChannel(t, cf)
	l := cmListen(t, sch, nil)
	defer l.Destroy()
	cli := mkID(t, cch, nil, id.PSTCP)
	defer cli.Destroy()
	resolve(t, cch, cli, l.LocalAddr())

	release := soft.HoldLoop(cf)
	defer release()
	if err := cli.Connect(&id.ConnParam{PrivateData: []byte("early")}); err != nil {
		t.Fatal(err)
	}
	ev, err := nextWithin(sch, 2*time.Second)
	if err != nil {
		t.Fatalf("no CONNECT_REQUEST while the initiator's loop is busy: %v", err)
	}
	if ev.Type != id.EventConnectRequest || string(ev.Conn.PrivateData) != "early" {
		_ = ev.Ack()
		t.Fatalf("got %s with %q", ev.Type, ev.Conn.PrivateData)
	}
	child := ev.ID
	defer child.Destroy()
	_ = ev.Ack()
	if err := child.Accept(nil); err != nil {
		t.Fatal(err)
	}
	release()
	_ = next(t, cch, id.EventEstablished).Ack()
	_ = next(t, sch, id.EventEstablished).Ack()
}

// TestDisconnectWithoutLoop: Disconnect of an established connection
// sends the FIN itself, so the peer reports DISCONNECTED while the
// disconnecting side's loop is busy.
func TestDisconnectWithoutLoop(t *testing.T) {
	sf, cf := soft.New(soft.WithName("srv-disc")), soft.New(soft.WithName("cli-disc"))
	defer sf.Quiesce()
	defer cf.Quiesce()
	sch, cch := newChannel(t, sf), newChannel(t, cf)
	l := cmListen(t, sch, nil)
	defer l.Destroy()
	cli := connectRC(t, cch, l.LocalAddr(), "fin")
	defer cli.Destroy()
	ev := next(t, sch, id.EventConnectRequest)
	child := ev.ID
	defer child.Destroy()
	_ = ev.Ack()
	if err := child.Accept(nil); err != nil {
		t.Fatal(err)
	}
	_ = next(t, cch, id.EventEstablished).Ack()
	_ = next(t, sch, id.EventEstablished).Ack()

	release := soft.HoldLoop(cf)
	defer release()
	if err := cli.Disconnect(); err != nil {
		t.Fatal(err)
	}
	_ = next(t, cch, id.EventDisconnected).Ack()
	ev, err := nextWithin(sch, 2*time.Second)
	if err != nil {
		t.Fatalf("no DISCONNECTED at the peer while the disconnecting side's loop is busy: %v", err)
	}
	if ev.Type != id.EventDisconnected || ev.ID != child {
		_ = ev.Ack()
		t.Fatalf("got %s", ev.Type)
	}
	_ = ev.Ack()
	release()
}

// TestConnectEarlyWriteOutcomes: Connect writes the MPA Request without
// asking the socket's TCP state first; the write's outcome decides. A
// refused connection fails as the loop would report it (REJECTED,
// -ECONNREFUSED), and a handshake still in progress (the SYN dropped:
// the listener's accept queue is full) leaves the Request to the loop,
// which sends it once TCP is up: the peer reads it.
func TestConnectEarlyWriteOutcomes(t *testing.T) {
	t.Run("refused", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		dst := netip.MustParseAddrPort(ln.Addr().String())
		ln.Close()
		cf := soft.New(soft.WithName("cli-refused"))
		defer cf.Quiesce()
		cch := newChannel(t, cf)
		cli := mkID(t, cch, nil, id.PSTCP)
		defer cli.Destroy()
		resolve(t, cch, cli, dst)
		release := soft.HoldLoop(cf)
		defer release()
		_ = cli.Connect(nil)
		release()
		ev := next(t, cch, id.EventRejected)
		if ev.Status != -int(syscall.ECONNREFUSED) {
			t.Fatalf("status %d, want -ECONNREFUSED", ev.Status)
		}
		_ = ev.Ack()
	})
	t.Run("handshake in progress", func(t *testing.T) {
		lfd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer unix.Close(lfd)
		if err := unix.Bind(lfd, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
			t.Fatal(err)
		}
		if err := unix.Listen(lfd, 0); err != nil { // room for one queued connection
			t.Fatal(err)
		}
		sa, err := unix.Getsockname(lfd)
		if err != nil {
			t.Fatal(err)
		}
		dst := netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 0, 0, 1}), uint16(sa.(*unix.SockaddrInet4).Port))
		filler, err := net.Dial("tcp", dst.String()) // fills the accept queue
		if err != nil {
			t.Fatal(err)
		}
		defer filler.Close()

		cf := soft.New(soft.WithName("cli-syn-sent"))
		defer cf.Quiesce()
		cch := newChannel(t, cf)
		cli := mkID(t, cch, nil, id.PSTCP)
		defer cli.Destroy()
		resolve(t, cch, cli, dst)
		if err := cli.Connect(nil); err != nil {
			t.Fatal(err)
		}
		// The SYN was dropped; make room, and the retransmitted one (about
		// a second later) completes the handshake.
		nfd, _, err := unix.Accept4(lfd, unix.SOCK_CLOEXEC)
		if err != nil {
			t.Fatal(err)
		}
		unix.Close(nfd)
		cfd, _, err := unix.Accept4(lfd, unix.SOCK_CLOEXEC)
		if err != nil {
			t.Fatal(err)
		}
		defer unix.Close(cfd)
		tv := unix.NsecToTimeval((10 * time.Second).Nanoseconds())
		_ = unix.SetsockoptTimeval(cfd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
		var req [24]byte
		for got := 0; got < len(req); {
			n, err := unix.Read(cfd, req[got:])
			if err != nil || n <= 0 {
				t.Fatalf("reading the MPA Request: %d bytes, %v", got, err)
			}
			got += n
		}
		if !strings.HasPrefix(string(req[:]), "MPA ID Req Frame") {
			t.Fatalf("peer read %q, want an MPA Request", req)
		}
	})
}
