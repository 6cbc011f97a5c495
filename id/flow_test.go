package id_test

import (
	"bytes"
	"context"
	"errors"
	"net/netip"
	"syscall"
	"testing"
	"time"

	"github.com/cmrt/cmrt/fabric"
	"github.com/cmrt/cmrt/id"
	"github.com/cmrt/cmrt/internal/fakefab"
)

func TestAsyncClientFlow(t *testing.T) {
	f := fakefab.New("fake", true)
	ch := newChan(t, f)
	cm := newID(t, ch, id.PSTCP)
	defer cm.Destroy()
	if cm.Synchronous() || cm.Channel() != ch || cm.State() != id.StateIdle {
		t.Fatalf("new id: sync %v state %s", cm.Synchronous(), cm.State())
	}
	steps := []struct {
		call  func() error
		event id.EventType
		state id.State
	}{
		{func() error { return cm.ResolveAddr(anyAddr, dst, time.Second) }, id.EventAddrResolved, id.StateAddrResolved},
		{func() error { return cm.ResolveRoute(time.Second) }, id.EventRouteResolved, id.StateRouteResolved},
		{func() error { return cm.Connect(nil) }, id.EventEstablished, id.StateEstablished},
		{cm.Disconnect, id.EventDisconnected, id.StateDisconnected},
	}
	for _, s := range steps {
		if err := s.call(); err != nil {
			t.Fatal(err)
		}
		ev := expect(t, ch, s.event, cm)
		if ev.ID.State() != s.state {
			t.Fatalf("after %s state %s, want %s", s.event, ev.ID.State(), s.state)
		}
		if err := ch.Ack(ev); err != nil {
			t.Fatal(err)
		}
	}
	// A second disconnect after DISCONNECTED is harmless and reports nothing.
	if err := cm.Disconnect(); err != nil {
		t.Fatalf("disconnect after DISCONNECTED: %v", err)
	}
}

func TestSyncClientFlow(t *testing.T) {
	f := fakefab.New("fake", true)
	cm, err := id.Create(nil, "ctx", id.PSTCP, id.WithFabric(f))
	if err != nil {
		t.Fatal(err)
	}
	defer cm.Destroy()
	if !cm.Synchronous() || cm.Channel() != nil || cm.Context() != "ctx" {
		t.Fatal("sync id: wrong channel or context")
	}
	if err := cm.ResolveAddr(anyAddr, dst, time.Second); err != nil {
		t.Fatal(err)
	}
	ev := cm.Event()
	if ev == nil || ev.Type != id.EventAddrResolved || cm.State() != id.StateAddrResolved {
		t.Fatalf("after sync resolve: event %v state %s", ev, cm.State())
	}
	if err := ev.Ack(); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("user ack of a sync id's event = %v, want EINVAL", err)
	}
	if err := cm.ResolveRoute(time.Second); err != nil || cm.Event().Type != id.EventRouteResolved {
		t.Fatalf("route: %v %v", err, cm.Event())
	}
	if err := cm.Connect(&id.ConnParam{PrivateData: []byte("hi")}); err != nil {
		t.Fatal(err)
	}
	if got := cm.Event(); got.Type != id.EventEstablished || string(got.PrivateData()) != "auto" {
		t.Fatalf("connect event %s %q", got.Type, got.PrivateData())
	}
	if err := cm.Disconnect(); err != nil || cm.Event().Type != id.EventDisconnected {
		t.Fatalf("disconnect: %v", err)
	}
	// Already disconnected: the call returns at once instead of waiting for
	// an event that will never come.
	if hung, _ := blocks(func() { _ = cm.Disconnect() }, time.Second); hung {
		t.Fatal("second sync disconnect blocked")
	}
}

func TestSyncStatusBecomesErrno(t *testing.T) {
	for _, c := range []struct {
		event  id.EventType
		status int32
		want   syscall.Errno
	}{
		{id.EventRejected, 28, syscall.ECONNREFUSED},
		{id.EventUnreachable, -int32(syscall.ETIMEDOUT), syscall.ETIMEDOUT},
		{id.EventConnectError, -int32(syscall.EPROTO), syscall.EPROTO},
		{id.EventUnreachable, 1, syscall.Errno(1)},
	} {
		t.Run(c.event.String(), func(t *testing.T) {
			f := fakefab.New("fake", true)
			cm, _ := id.Create(nil, nil, id.PSTCP, id.WithFabric(f))
			defer cm.Destroy()
			_ = cm.ResolveAddr(anyAddr, dst, time.Second)
			_ = cm.ResolveRoute(time.Second)
			f.Auto = false
			go func() {
				time.Sleep(10 * time.Millisecond)
				ep(cm).Inject(c.event, c.status, []byte("why"))
			}()
			err := cm.Connect(nil)
			wantErrno(t, err, c.want)
			if ev := cm.Event(); ev.Type != c.event || ev.Status != int(c.status) || string(ev.PrivateData()) != "why" {
				t.Fatalf("event %s status %d pd %q", ev.Type, ev.Status, ev.PrivateData())
			}
			if cm.State() != id.StateFailed {
				t.Fatalf("state %s, want FAILED", cm.State())
			}
		})
	}
}

func TestSyncContextDeadlineAbandonsTheID(t *testing.T) {
	f := fakefab.New("fake", true)
	cm, _ := id.Create(nil, nil, id.PSTCP, id.WithFabric(f))
	_ = cm.ResolveAddr(anyAddr, dst, time.Second)
	_ = cm.ResolveRoute(time.Second)
	f.Auto = false
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := cm.ConnectContext(ctx, nil)
	if !errors.Is(err, id.ErrCanceled) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("ConnectContext = %v, want ErrCanceled and DeadlineExceeded", err)
	}
	if time.Since(start) > time.Second {
		t.Fatalf("deadline not honoured: %v", time.Since(start))
	}
	if cm.State() != id.StateCanceled {
		t.Fatalf("state %s, want CANCELED", cm.State())
	}
	// The late answer must not be taken for the answer to another call.
	ep(cm).Inject(id.EventEstablished, 0, nil)
	wantErrno(t, cm.Disconnect(), syscall.EINVAL)
	if err := cm.Destroy(); err != nil {
		t.Fatal(err)
	}
}

func TestWrongStateIsEINVALAndNeverReachesTheFabric(t *testing.T) {
	f := fakefab.New("fake", true)
	ch := newChan(t, f)
	cm := newID(t, ch, id.PSTCP)
	defer cm.Destroy()
	wantErrno(t, cm.Connect(nil), syscall.EINVAL)              // before route
	wantErrno(t, cm.ResolveRoute(time.Second), syscall.EINVAL) // before addr
	wantErrno(t, cm.Accept(nil), syscall.EINVAL)               // not a request
	wantErrno(t, cm.Reject(nil), syscall.EINVAL)               //
	wantErrno(t, cm.Establish(), syscall.EINVAL)               //
	wantErrno(t, cm.Disconnect(), syscall.EINVAL)              // not connected
	wantErrno(t, cm.Bind(netip.AddrPort{}), syscall.EINVAL)    // no address
	wantErrno(t, cm.ResolveAddr(anyAddr, netip.AddrPort{}, time.Second), syscall.EINVAL)
	wantErrno(t, cm.ResolveAddr(netip.MustParseAddrPort("[::1]:1"), dst, time.Second), syscall.EINVAL) // families differ
	if got := ep(cm).Calls(); len(got) != 0 {
		t.Fatalf("fabric saw %v", got)
	}
	if err := cm.Bind(netip.MustParseAddrPort("127.0.0.1:0")); err != nil {
		t.Fatal(err)
	}
	wantErrno(t, cm.Bind(netip.MustParseAddrPort("127.0.0.1:0")), syscall.EINVAL) // bind twice
	if err := cm.ResolveAddr(anyAddr, dst, time.Second); err != nil {
		t.Fatal(err)
	}
	wantErrno(t, cm.Listen(0), syscall.EINVAL) // resolved: cannot listen
	if got := ep(cm).Calls(); len(got) != 2 {
		t.Fatalf("fabric saw %v, want bind and resolve_addr", got)
	}
	ev := expect(t, ch, id.EventAddrResolved, cm)
	_ = ev.Ack()
}

func TestFabricErrnoPassesThrough(t *testing.T) {
	f := fakefab.New("fake", true)
	ch := newChan(t, f)
	cm := newID(t, ch, id.PSTCP)
	defer cm.Destroy()
	f.Fail("bind", syscall.EADDRINUSE)
	err := cm.Bind(netip.MustParseAddrPort("127.0.0.1:7471"))
	wantErrno(t, err, syscall.EADDRINUSE)
	var e *id.Error
	if !errors.As(err, &e) || e.Op != "bind" {
		t.Fatalf("error %v is not an *id.Error for bind", err)
	}
	if cm.State() != id.StateIdle {
		t.Fatalf("failed bind moved the state to %s", cm.State())
	}
	f.Fail("bind", nil)
	if err := cm.Bind(netip.MustParseAddrPort("127.0.0.1:7471")); err != nil {
		t.Fatal(err)
	}
}

func TestPrivateDataLimits(t *testing.T) {
	f := fakefab.New("fake", true)
	ch := newChan(t, f)
	routed := func(ps id.PortSpace) *id.ID {
		cm := newID(t, ch, ps)
		_ = cm.ResolveAddr(anyAddr, dst, time.Second)
		_ = expect(t, ch, id.EventAddrResolved, cm).Ack()
		_ = cm.ResolveRoute(time.Second)
		_ = expect(t, ch, id.EventRouteResolved, cm).Ack()
		return cm
	}
	request := func(ps id.PortSpace) (*id.ID, *id.ID) {
		l := newID(t, ch, ps)
		_ = l.Listen(0)
		ep(l).InjectRequest([]byte("req"))
		ev := expect(t, ch, id.EventConnectRequest, nil)
		child := ev.ID
		_ = ev.Ack()
		return l, child
	}
	for _, c := range []struct {
		name string
		ps   id.PortSpace
		max  int
		call func(ps id.PortSpace, pd []byte) error
	}{
		{"connect RC", id.PSTCP, 56, func(ps id.PortSpace, pd []byte) error {
			cm := routed(ps)
			defer cm.Destroy()
			err := cm.Connect(&id.ConnParam{PrivateData: pd})
			if err == nil {
				_ = expect(t, ch, id.EventEstablished, cm).Ack()
			}
			return err
		}},
		{"connect UD", id.PSUDP, 180, func(ps id.PortSpace, pd []byte) error {
			cm := routed(ps)
			defer cm.Destroy()
			err := cm.Connect(&id.ConnParam{PrivateData: pd})
			if err == nil {
				_ = expect(t, ch, id.EventEstablished, cm).Ack()
			}
			return err
		}},
		{"accept RC", id.PSTCP, 196, func(ps id.PortSpace, pd []byte) error {
			l, c := request(ps)
			defer l.Destroy()
			defer c.Destroy()
			err := c.Accept(&id.ConnParam{PrivateData: pd})
			if err == nil {
				_ = expect(t, ch, id.EventEstablished, c).Ack()
			}
			return err
		}},
		{"accept UD", id.PSUDP, 136, func(ps id.PortSpace, pd []byte) error {
			l, c := request(ps)
			defer l.Destroy()
			defer c.Destroy()
			return c.Accept(&id.ConnParam{PrivateData: pd})
		}},
		{"reject RC", id.PSTCP, 148, func(ps id.PortSpace, pd []byte) error {
			l, c := request(ps)
			defer l.Destroy()
			defer c.Destroy()
			return c.Reject(pd)
		}},
		{"reject UD", id.PSUDP, 136, func(ps id.PortSpace, pd []byte) error {
			l, c := request(ps)
			defer l.Destroy()
			defer c.Destroy()
			return c.Reject(pd)
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			if err := c.call(c.ps, bytes.Repeat([]byte{1}, c.max)); err != nil {
				t.Fatalf("at the limit (%d): %v", c.max, err)
			}
			wantErrno(t, c.call(c.ps, bytes.Repeat([]byte{1}, c.max+1)), syscall.EINVAL)
		})
	}
}

func TestSetOption(t *testing.T) {
	f := fakefab.New("fake", true)
	ch := newChan(t, f)
	cm := newID(t, ch, id.PSTCP)
	defer cm.Destroy()
	wantErrno(t, cm.SetOption(id.OptionLevelID, id.OptionTOS, []byte{1, 2}), syscall.EINVAL)
	wantErrno(t, cm.SetOption(id.OptionLevelID, id.OptionReuseAddr, []byte{1}), syscall.EINVAL)
	wantErrno(t, cm.SetOption(id.OptionLevelID, 99, []byte{1}), syscall.ENOSYS)
	wantErrno(t, cm.SetOption(7, 0, []byte{1}), syscall.ENOSYS)
	wantErrno(t, cm.SetOption(id.OptionLevelIB, id.OptionIBPath, make([]byte, 71)), syscall.EINVAL)
	for _, fn := range []func() error{
		func() error { return cm.SetTOS(0x10) },
		func() error { return cm.SetReuseAddr(true) },
		func() error { return cm.SetAFOnly(true) },
		func() error { return cm.SetAckTimeout(14) },
	} {
		if err := fn(); err != nil {
			t.Fatal(err)
		}
	}
	_ = cm.Listen(0)
	wantErrno(t, cm.SetReuseAddr(true), syscall.EINVAL) // a listener is never reusable
	wantErrno(t, cm.SetAFOnly(false), syscall.EINVAL)   // only before bind
	ud := newID(t, ch, id.PSUDP)
	defer ud.Destroy()
	wantErrno(t, ud.SetAckTimeout(14), syscall.EINVAL) // RC only
}

func TestCreateQPType(t *testing.T) {
	f := fakefab.New("fake", true)
	ch := newChan(t, f)
	for _, c := range []struct {
		ps   id.PortSpace
		opt  []id.Option
		want id.QPType
		err  bool
	}{
		{id.PSTCP, nil, id.RC, false},
		{id.PSUDP, nil, id.UD, false},
		{id.PSIPoIB, nil, id.UD, false},
		{id.PSIB, nil, id.RC, false},
		{id.PSIB, []id.Option{id.WithQPType(id.UD)}, id.UD, false},
		{id.PSTCP, []id.Option{id.WithQPType(id.UD)}, 0, true},
		{id.PSUDP, []id.Option{id.WithQPType(id.RC)}, 0, true},
	} {
		cm, err := id.Create(ch, nil, c.ps, c.opt...)
		if c.err {
			wantErrno(t, err, syscall.EINVAL)
			continue
		}
		if err != nil || cm.QPType() != c.want || ep(cm).QP != c.want {
			t.Fatalf("%s: %v, qp %v", c.ps, err, cm.QPType())
		}
		_ = cm.Destroy()
	}
}

func TestNoFabricRegisteredIsENODEV(t *testing.T) {
	t.Setenv(fabric.Env, "nope")
	_, err := id.Create(nil, nil, id.PSTCP)
	wantErrno(t, err, syscall.ENODEV)
}
