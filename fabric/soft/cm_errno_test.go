package soft_test

import (
	"net"
	"net/netip"
	"syscall"
	"testing"
	"time"

	"github.com/cmrt/cmrt/fabric/soft"
	"github.com/cmrt/cmrt/id"
)

func TestBindErrnos(t *testing.T) {
	ch := newChannel(t, nil)
	a := mkID(t, ch, nil, id.PSTCP)
	defer a.Destroy()
	if err := a.Bind(netip.AddrPortFrom(lo4, 0)); err != nil {
		t.Fatal(err)
	}
	port := a.SrcPort()
	b := mkID(t, ch, nil, id.PSTCP)
	defer b.Destroy()
	// The same address and port: in use.
	mustErrno(t, b.Bind(netip.AddrPortFrom(lo4, port)), syscall.EADDRINUSE)
	// A wildcard overlapping a held port: the kernel's rdma_cm says
	// EADDRNOTAVAIL (cma_check_port).
	mustErrno(t, b.Bind(netip.AddrPortFrom(netip.IPv4Unspecified(), port)), syscall.EADDRNOTAVAIL)
	// Not a local address.
	mustErrno(t, b.Bind(netip.MustParseAddrPort("198.51.100.9:7000")), syscall.EADDRNOTAVAIL)
	// The failed binds left b unbound: it can bind elsewhere, once.
	if err := b.Bind(netip.AddrPortFrom(lo4, 0)); err != nil {
		t.Fatal(err)
	}
	mustErrno(t, b.Bind(netip.AddrPortFrom(lo4, 0)), syscall.EINVAL)
	// With REUSEADDR on both, the port can be shared until one listens.
	c, d := mkID(t, ch, nil, id.PSTCP), mkID(t, ch, nil, id.PSTCP)
	defer c.Destroy()
	defer d.Destroy()
	_ = c.SetReuseAddr(true)
	_ = d.SetReuseAddr(true)
	if err := c.Bind(netip.AddrPortFrom(lo4, 0)); err != nil {
		t.Fatal(err)
	}
	if err := d.Bind(c.LocalAddr()); err != nil {
		t.Fatalf("REUSEADDR bind: %v", err)
	}
	mustErrno(t, c.Listen(0), syscall.EADDRINUSE)
}

func TestListenOnPortTakenByAnotherSocket(t *testing.T) {
	// Another process's listener holds the port (an in-process net.Listener
	// is the same to the kernel).
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ch := newChannel(t, nil)
	cm := mkID(t, ch, nil, id.PSTCP)
	defer cm.Destroy()
	mustErrno(t, cm.Bind(netip.MustParseAddrPort(ln.Addr().String())), syscall.EADDRINUSE)
}

func TestNoDeviceIsENODEV(t *testing.T) {
	f := soft.New(soft.WithName("soft-nodev"), soft.WithNetdevs("no-such-netdev"))
	ch := newChannel(t, f)
	cm := mkID(t, ch, nil, id.PSTCP)
	defer cm.Destroy()
	mustErrno(t, cm.Bind(netip.AddrPortFrom(lo4, 0)), syscall.ENODEV)
	// Resolution finds the route but no device behind it: ADDR_ERROR.
	if err := cm.ResolveAddr(netip.AddrPort{}, netip.MustParseAddrPort("127.0.0.1:7471"), time.Second); err != nil {
		t.Fatal(err)
	}
	ev := next(t, ch, id.EventAddrError)
	if ev.Status != -int(syscall.ENODEV) || cm.State() != id.StateAddrBound {
		t.Fatalf("ADDR_ERROR status %d, state %s", ev.Status, cm.State())
	}
	_ = ev.Ack()
	if devs, _ := f.Devices(); len(devs) != 0 {
		t.Fatalf("filtered fabric lists %v", devs)
	}
}

func TestDevicesListInterfaces(t *testing.T) {
	devs, err := soft.Default().Devices()
	if err != nil || len(devs) == 0 {
		t.Fatalf("devices %v %v", devs, err)
	}
	var lo bool
	for k, d := range devs {
		if d.Name != "soft"+string(rune('0'+k)) && k < 10 {
			t.Errorf("device %d named %s", k, d.Name)
		}
		if d.Transport != "iWARP" || len(d.Addrs) == 0 || d.MaxQPRdAtom == 0 {
			t.Errorf("device %+v", d)
		}
		for _, a := range d.Addrs {
			lo = lo || a == lo4
		}
	}
	if !lo {
		t.Fatal("no device answers to 127.0.0.1")
	}
}

func TestNonblockingEmptyChannelIsEAGAIN(t *testing.T) {
	ch := newChannel(t, nil)
	ch.SetNonblocking(true)
	_, err := ch.GetEvent()
	mustErrno(t, err, syscall.EAGAIN)
}

func TestConnectBeforeRouteIsEINVAL(t *testing.T) {
	ch := newChannel(t, nil)
	cm := mkID(t, ch, nil, id.PSTCP)
	defer cm.Destroy()
	mustErrno(t, cm.Connect(nil), syscall.EINVAL)
	_ = cm.ResolveAddr(netip.AddrPort{}, netip.MustParseAddrPort("127.0.0.1:9"), time.Second)
	_ = next(t, ch, id.EventAddrResolved).Ack()
	mustErrno(t, cm.Connect(nil), syscall.EINVAL)
	mustErrno(t, cm.Connect(&id.ConnParam{PrivateData: make([]byte, 57)}), syscall.EINVAL)
}

func TestConnectParamOverDeviceCapIsEINVAL(t *testing.T) {
	sch, cch := newChannel(t, nil), newChannel(t, nil)
	l := cmListen(t, sch, nil)
	defer l.Destroy()
	cm := mkID(t, cch, nil, id.PSTCP)
	defer cm.Destroy()
	resolve(t, cch, cm, l.LocalAddr())
	mustErrno(t, cm.Connect(&id.ConnParam{ResponderResources: 200}), syscall.EINVAL)
}
