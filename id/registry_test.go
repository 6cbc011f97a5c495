package id

import (
	"context"
	"errors"
	"net/netip"
	"syscall"
	"testing"

	"github.com/cmrt/cmrt/fabric"
	"github.com/cmrt/cmrt/internal/fakefab"
	"github.com/cmrt/cmrt/internal/handle"
)

// TestStaleUIDNeverReachesALiveID: an event queued with the uid of a
// destroyed id is dropped, also when a new id took the destroyed one's
// slot of the handle table.
func TestStaleUIDNeverReachesALiveID(t *testing.T) {
	f := fakefab.New("fake", false)
	src, _ := f.Open()
	defer src.Close()
	a, err := Create(nil, nil, PSTCP, WithFabric(f))
	if err != nil {
		t.Fatal(err)
	}
	stale := a.Handle()
	if err := a.Destroy(); err != nil {
		t.Fatal(err)
	}
	b, err := Create(nil, nil, PSTCP, WithFabric(f))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Destroy()
	if handle.Index(b.Handle()) != handle.Index(stale) || b.Handle() == stale {
		t.Fatalf("slot not reused: %#x after %#x", b.Handle(), stale)
	}
	ev := &Event{}
	if deliver(ev, &fabric.RawEvent{UID: stale, Type: EventAddrResolved}) {
		t.Fatalf("event of stale uid %#x delivered to id %#x", stale, ev.ID.Handle())
	}
	if b.reported.Load() != 0 {
		t.Fatal("stale event counted against the slot's new id")
	}
}

// TestLeaveRacingDeliverDropsTheEvent: an event whose join is left between
// the lookup of its uid and its count is dropped, with its counts
// balanced, instead of reaching the user after LeaveMulticast returned
// without waiting for it. Without deliver's second lookup the event is
// delivered.
func TestLeaveRacingDeliverDropsTheEvent(t *testing.T) {
	f := fakefab.New("fake", false)
	ch, err := f.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	cm, err := Create(chanOf{ch}, nil, PSUDP)
	if err != nil {
		t.Fatal(err)
	}
	defer cm.Destroy()
	group := netip.MustParseAddr("239.1.2.3")
	if err := cm.Bind(netip.MustParseAddrPort("127.0.0.1:0")); err != nil {
		t.Fatal(err)
	}
	if err := cm.JoinMulticast(group, nil); err != nil {
		t.Fatal(err)
	}
	cm.mu.Lock()
	mc := cm.mcs[group]
	cm.mu.Unlock()
	if !cm.Endpoint().(*fakefab.Endpoint).InjectJoin(group, EventMulticastJoin, 0) {
		t.Fatal("inject")
	}
	left := make(chan error, 1)
	testHookLoaded = func() {
		testHookLoaded = nil
		go func() { left <- cm.LeaveMulticast(group) }()
		if err := <-left; err != nil {
			t.Errorf("leave: %v", err)
		}
	}
	defer func() { testHookLoaded = nil }()
	ev, err := NextEvent(context.Background(), ch, false)
	if err == nil {
		_ = ev.Ack()
		t.Fatalf("%s delivered after LeaveMulticast returned", ev)
	}
	if !errors.Is(err, syscall.EAGAIN) {
		t.Fatal(err)
	}
	if mc.reported.Load() != mc.completed.Load() || cm.reported.Load() != cm.completed.Load() {
		t.Fatalf("counts unbalanced: join %d/%d, id %d/%d", mc.completed.Load(), mc.reported.Load(),
			cm.completed.Load(), cm.reported.Load())
	}
}

// chanOf makes an event source an id.Channel.
type chanOf struct{ src fabric.EventSource }

func (c chanOf) Source() fabric.EventSource { return c.src }
