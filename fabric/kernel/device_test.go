package kernel_test

import (
	"context"
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/cmrt/cmrt/channel"
	"github.com/cmrt/cmrt/fabric"
	"github.com/cmrt/cmrt/fabric/kernel"
	"github.com/cmrt/cmrt/id"
	"github.com/cmrt/cmrt/reactor"
)

type handlerFunc func(*id.Event) error

func (f handlerFunc) HandleEvent(ev *id.Event) error { return f(ev) }

// TestChannelSelection checks how the kernel fabric is chosen: by
// channel.WithFabric, id.WithFabric or CMRT_FABRIC, and that a missing
// device file is ENODEV with a message saying what to load.
func TestChannelSelection(t *testing.T) {
	missing := kernel.New(kernel.WithDevicePath(filepath.Join(t.TempDir(), "rdma_cm")))
	_, err := channel.New(channel.WithFabric(missing))
	if !errors.Is(err, syscall.ENODEV) || !strings.Contains(err.Error(), "rdma_ucm") {
		t.Fatalf("channel.New on a missing device: %v", err)
	}
	_, err = id.Create(nil, nil, id.PSTCP, id.WithFabric(missing))
	if !errors.Is(err, syscall.ENODEV) {
		t.Fatalf("synchronous id on a missing device: %v", err)
	}
	if id.Live() != 0 {
		t.Fatalf("%d ids live after failed creates", id.Live())
	}
	if _, err := os.Stat("/dev/infiniband/rdma_cm"); err == nil {
		t.Log("this host has rdma_cm: CMRT_FABRIC=kernel opens it")
		return
	}
	t.Setenv(fabric.Env, "kernel")
	_, err = channel.New()
	if !errors.Is(err, syscall.ENODEV) {
		t.Fatalf("CMRT_FABRIC=kernel without the device: %v", err)
	}
	t.Logf("CMRT_FABRIC=kernel here: %v", err)
}

// device returns the address of an RDMA device that can connect without a
// QP (InfiniBand transport: IB or RoCE; iWARP needs a real QP), or skips.
func device(t *testing.T) (fabric.Device, netip.Addr) {
	t.Helper()
	src, err := kernel.Default().Open()
	if err != nil {
		t.Skipf("kernel RDMA CM unavailable: %v", err)
	}
	_ = src.Close()
	devs, err := kernel.Default().Devices()
	if err != nil {
		t.Skipf("no RDMA devices: %v", err)
	}
	for _, d := range devs {
		if d.Transport != "InfiniBand" {
			continue
		}
		for _, a := range d.Addrs {
			if a.Is4() {
				return d, a
			}
		}
	}
	t.Skipf("no InfiniBand/RoCE device with an IPv4 address among %v", devs)
	return fabric.Device{}, netip.Addr{}
}

func newChannel(t *testing.T, opts ...channel.Option) *channel.Channel {
	t.Helper()
	ch, err := channel.New(append([]channel.Option{channel.WithFabric(kernel.Default())}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := ch.Close(); err != nil {
			t.Errorf("channel close: %v", err)
		}
	})
	return ch
}

func want(t *testing.T, ch *channel.Channel, types ...id.EventType) *id.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ev, err := ch.GetEventContext(ctx)
	if err != nil {
		t.Fatalf("waiting for %v: %v", types, err)
	}
	for _, w := range types {
		if ev.Type == w {
			return ev
		}
	}
	t.Fatalf("got %s status %d, want %v", ev.Type, ev.Status, types)
	return nil
}

func create(t *testing.T, ch *channel.Channel, ps id.PortSpace) *id.ID {
	t.Helper()
	i, err := id.Create(ch, nil, ps)
	if err != nil {
		t.Fatal(err)
	}
	return i
}

func destroy(t *testing.T, ids ...*id.ID) {
	t.Helper()
	for _, i := range ids {
		if i != nil {
			if err := i.Destroy(); err != nil {
				t.Errorf("destroy: %v", err)
			}
		}
	}
}

// listen binds a listener to addr:0 and returns it with its address.
func listen(t *testing.T, ch *channel.Channel, ps id.PortSpace, addr netip.Addr) (*id.ID, netip.AddrPort) {
	t.Helper()
	l := create(t, ch, ps)
	if err := l.Bind(netip.AddrPortFrom(addr, 0)); err != nil {
		t.Fatal(err)
	}
	if err := l.Listen(0); err != nil {
		t.Fatal(err)
	}
	return l, l.LocalAddr()
}

// resolve resolves an id to dst, address and route.
func resolve(t *testing.T, ch *channel.Channel, c *id.ID, dst netip.AddrPort) {
	t.Helper()
	if err := c.ResolveAddr(netip.AddrPort{}, dst, 2*time.Second); err != nil {
		t.Fatal(err)
	}
	_ = want(t, ch, id.EventAddrResolved).Ack()
	if err := c.ResolveRoute(2 * time.Second); err != nil {
		t.Fatal(err)
	}
	_ = want(t, ch, id.EventRouteResolved).Ack()
}

var qpn uint32 = uint32(os.Getpid()&0x3fff) << 8

func nextQPN() uint32 { qpn++; return qpn }

// TestDevice runs the QP-less flows on the host's first RoCE/IB device:
// it skips, saying why, where there is none (this includes any machine
// without /dev/infiniband/rdma_cm).
func TestDevice(t *testing.T) {
	dev, addr := device(t)
	t.Logf("device %s (%s on %s), address %s", dev.Name, dev.Transport, dev.Netdev, addr)
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())

	t.Run("RC", func(t *testing.T) {
		sch, cch := newChannel(t), newChannel(t)
		l, laddr := listen(t, sch, id.PSTCP, addr)
		if r := l.Route(); r.Device != dev.Name || r.PortNum != 1 || laddr.Port() == 0 {
			t.Errorf("listener route %+v", r)
		}
		c := create(t, cch, id.PSTCP)
		resolve(t, cch, c, laddr)
		if r := c.Route(); r.Device != dev.Name || r.Dst != laddr || r.NumPaths != 1 || r.MTU < 256 {
			t.Errorf("client route %+v", r)
		}
		cq := nextQPN()
		if err := c.Connect(&id.ConnParam{QPNum: cq, ResponderResources: 1, InitiatorDepth: 1, RetryCount: 5,
			RNRRetryCount: 7, PrivateData: []byte("hello")}); err != nil {
			t.Fatal(err)
		}
		ev := want(t, sch, id.EventConnectRequest)
		child := ev.ID
		if ev.ListenID != l || ev.Conn.QPNum != cq || !strings.HasPrefix(string(ev.Conn.PrivateData), "hello") ||
			len(ev.Conn.PrivateData) != 56 || ev.Conn.ResponderResources != 1 || ev.Conn.InitiatorDepth != 1 {
			t.Errorf("request: %+v", ev.Conn)
		}
		_ = ev.Ack()
		if r := child.Route(); r.Dst != c.LocalAddr() || r.Src != laddr || r.Device != dev.Name {
			t.Errorf("child route %+v, client at %s", r, c.LocalAddr())
		}
		sq := nextQPN()
		if err := child.Accept(&id.ConnParam{QPNum: sq, PrivateData: []byte("welcome")}); err != nil {
			t.Fatal(err)
		}
		ev = want(t, cch, id.EventConnectResponse)
		if ev.Conn.QPNum != sq || !strings.HasPrefix(string(ev.Conn.PrivateData), "welcome") {
			t.Errorf("response: %+v", ev.Conn)
		}
		_ = ev.Ack()
		if c.State() != id.StateConnectResponse {
			t.Errorf("client state %s", c.State())
		}
		if err := c.Establish(); err != nil {
			t.Fatal(err)
		}
		_ = want(t, sch, id.EventEstablished).Ack()
		if child.State() != id.StateEstablished || c.State() != id.StateEstablished {
			t.Errorf("states %s / %s", child.State(), c.State())
		}
		if err := c.Disconnect(); err != nil {
			t.Fatal(err)
		}
		_ = want(t, sch, id.EventDisconnected).Ack()
		if err := child.Disconnect(); err != nil {
			t.Fatal(err)
		}
		_ = want(t, cch, id.EventDisconnected).Ack()
		destroy(t, c, child, l)
	})

	t.Run("Reject", func(t *testing.T) {
		sch, cch := newChannel(t), newChannel(t)
		l, laddr := listen(t, sch, id.PSTCP, addr)
		c := create(t, cch, id.PSTCP)
		resolve(t, cch, c, laddr)
		if err := c.Connect(&id.ConnParam{QPNum: nextQPN()}); err != nil {
			t.Fatal(err)
		}
		ev := want(t, sch, id.EventConnectRequest)
		child := ev.ID
		_ = ev.Ack()
		if err := child.Reject([]byte("no thanks")); err != nil {
			t.Fatal(err)
		}
		ev = want(t, cch, id.EventRejected)
		if ev.Status != 28 || !strings.HasPrefix(string(ev.Conn.PrivateData), "no thanks") {
			t.Errorf("rejected: status %d, private data %q", ev.Status, ev.Conn.PrivateData)
		}
		_ = ev.Ack()
		destroy(t, c, child)

		// Nobody listening: REJ reason 8, invalid service id.
		n := create(t, cch, id.PSTCP)
		resolve(t, cch, n, netip.AddrPortFrom(addr, laddr.Port()+1))
		if err := n.Connect(&id.ConnParam{QPNum: nextQPN()}); err != nil {
			t.Fatal(err)
		}
		ev = want(t, cch, id.EventRejected)
		if ev.Status != 8 {
			t.Errorf("no listener: status %d, want 8", ev.Status)
		}
		_ = ev.Ack()
		destroy(t, n, l)
	})

	t.Run("UD", func(t *testing.T) {
		sch, cch := newChannel(t), newChannel(t)
		l, laddr := listen(t, sch, id.PSUDP, addr)
		for _, rej := range []bool{false, true} {
			c := create(t, cch, id.PSUDP)
			resolve(t, cch, c, laddr)
			if err := c.Connect(&id.ConnParam{QPNum: nextQPN(), PrivateData: []byte("sidr")}); err != nil {
				t.Fatal(err)
			}
			ev := want(t, sch, id.EventConnectRequest)
			child := ev.ID
			if child.QPType() != id.UD || !strings.HasPrefix(string(ev.UD.PrivateData), "sidr") || len(ev.UD.PrivateData) != 180 {
				t.Errorf("UD request: %s, private data %d bytes", child.QPType(), len(ev.UD.PrivateData))
			}
			_ = ev.Ack()
			sq := nextQPN()
			if rej {
				if err := child.Reject(nil); err != nil {
					t.Fatal(err)
				}
				ev = want(t, cch, id.EventUnreachable)
				if ev.Status != 2 { // IB_SIDR_REJECT
					t.Errorf("UD reject: status %d, want 2", ev.Status)
				}
			} else {
				if err := child.Accept(&id.ConnParam{QPNum: sq}); err != nil {
					t.Fatal(err)
				}
				ev = want(t, cch, id.EventEstablished)
				if ev.UD.QPNum != sq || ev.UD.QKey != id.UDPQKey || ev.UD.AH.Addr() != addr {
					t.Errorf("UD established: qpn %#x qkey %#x ah %s", ev.UD.QPNum, ev.UD.QKey, ev.UD.AH.Addr())
				}
			}
			_ = ev.Ack()
			destroy(t, c, child)
		}
		destroy(t, l)
	})

	t.Run("Multicast", func(t *testing.T) {
		ch := newChannel(t)
		j := create(t, ch, id.PSUDP)
		if err := j.Bind(netip.AddrPortFrom(addr, 0)); err != nil {
			t.Fatal(err)
		}
		g := netip.MustParseAddr("239.1.2.3")
		if err := j.JoinMulticast(g, "ctx"); err != nil {
			t.Fatal(err)
		}
		ev := want(t, ch, id.EventMulticastJoin)
		if ev.Group != g || ev.JoinContext != "ctx" || ev.UD.QPNum != fabric.MulticastQPNum || ev.UD.QKey != id.UDPQKey {
			t.Errorf("join: group %s ctx %v qpn %#x qkey %#x", ev.Group, ev.JoinContext, ev.UD.QPNum, ev.UD.QKey)
		}
		_ = ev.Ack()
		if err := j.LeaveMulticast(g); err != nil {
			t.Fatal(err)
		}
		if err := j.LeaveMulticast(g); !errors.Is(err, syscall.EADDRNOTAVAIL) {
			t.Errorf("second leave: %v", err)
		}
		destroy(t, j)
	})

	t.Run("ChannelSemantics", func(t *testing.T) {
		ch := newChannel(t, channel.WithNonblocking())
		if _, err := ch.GetEvent(); !errors.Is(err, syscall.EAGAIN) {
			t.Fatalf("non-blocking GetEvent on an empty channel: %v", err)
		}
		ch.SetNonblocking(false)
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		t0 := time.Now()
		_, err := ch.GetEventContext(ctx)
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) || time.Since(t0) > 2*time.Second {
			t.Fatalf("blocking GetEvent with a deadline: %v after %s", err, time.Since(t0))
		}
		// Events of an id move with it to another channel.
		ch2 := newChannel(t)
		c := create(t, ch, id.PSTCP)
		if err := c.ResolveAddr(netip.AddrPort{}, netip.AddrPortFrom(addr, 7), time.Second); err != nil {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond) // let ADDR_RESOLVED queue on ch
		if err := c.Migrate(ch2); err != nil {
			t.Fatal(err)
		}
		_ = want(t, ch2, id.EventAddrResolved).Ack()
		ch.SetNonblocking(true)
		if _, err := ch.GetEvent(); !errors.Is(err, syscall.EAGAIN) {
			t.Fatalf("old channel after migrate: %v", err)
		}
		if err := ch2.Close(); !errors.Is(err, syscall.EBUSY) {
			t.Errorf("closing a channel with ids: %v", err)
		}
		destroy(t, c)
		// A waiter is woken by the source's Close.
		src, err := kernel.Default().Open()
		if err != nil {
			t.Fatal(err)
		}
		errc := make(chan error, 1)
		go func() {
			var raw fabric.RawEvent
			errc <- src.Next(context.Background(), true, &raw)
		}()
		time.Sleep(50 * time.Millisecond)
		_ = src.Close()
		select {
		case err := <-errc:
			if !errors.Is(err, syscall.EBADF) {
				t.Errorf("Next after Close: %v", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("Close did not wake a blocked Next")
		}
	})

	t.Run("Reactor", func(t *testing.T) {
		// The reactor polls the rdma_cm fd itself with epoll.
		r, err := reactor.New(reactor.WithWorkers(2))
		if err != nil {
			t.Fatal(err)
		}
		sch, cch := newChannel(t), newChannel(t)
		got := make(chan id.EventType, 8)
		var children []*id.ID
		h := handlerFunc(func(ev *id.Event) error {
			switch ev.Type {
			case id.EventConnectRequest:
				children = append(children, ev.ID) // handlers of one channel run in order
				if err := ev.ID.Accept(&id.ConnParam{QPNum: 0x700000 | uint32(len(children))}); err != nil {
					return err
				}
			}
			got <- ev.Type
			return nil
		})
		if err := r.Register(sch, h); err != nil {
			t.Fatal(err)
		}
		l, laddr := listen(t, sch, id.PSTCP, addr)
		c := create(t, cch, id.PSTCP)
		resolve(t, cch, c, laddr)
		if err := c.Connect(&id.ConnParam{QPNum: nextQPN()}); err != nil {
			t.Fatal(err)
		}
		_ = want(t, cch, id.EventConnectResponse).Ack()
		if err := c.Establish(); err != nil {
			t.Fatal(err)
		}
		for _, w := range []id.EventType{id.EventConnectRequest, id.EventEstablished} {
			select {
			case e := <-got:
				if e != w {
					t.Fatalf("reactor handled %s, want %s", e, w)
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("reactor: no %s", w)
			}
		}
		if err := c.Disconnect(); err != nil {
			t.Fatal(err)
		}
		select {
		case e := <-got:
			if e != id.EventDisconnected {
				t.Fatalf("reactor handled %s", e)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("reactor: no DISCONNECTED")
		}
		if err := r.Unregister(sch); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := r.Close(ctx); err != nil {
			t.Fatal(err)
		}
		destroy(t, c, l)
		destroy(t, children...)
	})

	t.Run("Sync", func(t *testing.T) {
		kf := id.WithFabric(kernel.Default())
		l, err := id.Create(nil, nil, id.PSTCP, kf)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Bind(netip.AddrPortFrom(addr, 0)); err != nil {
			t.Fatal(err)
		}
		if err := l.Listen(0); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		type res struct {
			child *id.ID
			err   error
		}
		rc := make(chan res, 1)
		go func() {
			child, err := l.GetRequestContext(ctx)
			if err == nil {
				err = child.AcceptContext(ctx, &id.ConnParam{QPNum: nextQPNSync()})
			}
			rc <- res{child, err}
		}()
		c, err := id.Create(nil, nil, id.PSTCP, kf)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.ResolveAddrContext(ctx, netip.AddrPort{}, l.LocalAddr(), 2*time.Second); err != nil {
			t.Fatal(err)
		}
		if err := c.ResolveRouteContext(ctx, 2*time.Second); err != nil {
			t.Fatal(err)
		}
		if err := c.ConnectContext(ctx, &id.ConnParam{QPNum: nextQPN()}); err != nil {
			t.Fatal(err)
		}
		if c.Event().Type != id.EventConnectResponse {
			t.Fatalf("sync connect returned with %s", c.Event().Type)
		}
		if err := c.Establish(); err != nil {
			t.Fatal(err)
		}
		r := <-rc
		if r.err != nil {
			t.Fatalf("server: %v", r.err)
		}
		if r.child.Event().Type != id.EventEstablished {
			t.Fatalf("sync accept returned with %s", r.child.Event().Type)
		}
		derr := make(chan error, 1)
		go func() { derr <- r.child.DisconnectContext(ctx) }()
		if err := c.DisconnectContext(ctx); err != nil {
			t.Fatal(err)
		}
		if err := <-derr; err != nil {
			t.Fatal(err)
		}
		destroy(t, c, r.child, l)
	})
	if n := id.Live(); n != 0 {
		t.Errorf("%d ids live after the tests", n)
	}
}

var syncQPN uint32 = 0x800000 | uint32(os.Getpid()&0x3fff)<<8

func nextQPNSync() uint32 { syncQPN++; return syncQPN }
