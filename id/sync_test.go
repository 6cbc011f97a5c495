package id

import (
	"errors"
	"net/netip"
	"syscall"
	"testing"
	"time"

	"github.com/cmrt/cmrt/internal/fakefab"
)

// TestDestroyBetweenSyncTakeAndKeep: a synchronous id destroyed from
// another goroutine after its blocked call took the event that answers it
// and before the id kept that event. Destroy counts the event among those
// it waits for, but has already released the id's current event; before
// the fix the call then kept the event on the destroyed id, nobody ever
// acknowledged it, and Destroy waited forever (make diff-kernel found it:
// a synchronous Disconnect on rxe0 whose DISCONNECTED came as the id was
// destroyed). Now the call acknowledges the event, fails with ErrClosed
// and EBADF, and Destroy returns with the id's counts balanced.
func TestDestroyBetweenSyncTakeAndKeep(t *testing.T) {
	f := fakefab.New("fake", false)
	cm, err := Create(nil, nil, PSTCP, WithFabric(f))
	if err != nil {
		t.Fatal(err)
	}
	destroyed := make(chan error, 1)
	testHookSyncTaken = func() {
		testHookSyncTaken = nil
		go func() { destroyed <- cm.Destroy() }()
		for deadline := time.Now().Add(2 * time.Second); !cm.destroyed.Load(); time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Error("Destroy did not start")
				return
			}
		}
	}
	defer func() { testHookSyncTaken = nil }()
	got := make(chan error, 1)
	go func() {
		got <- cm.ResolveAddr(netip.AddrPort{}, netip.MustParseAddrPort("127.0.0.1:7471"), time.Second)
	}()
	for deadline := time.Now().Add(2 * time.Second); cm.State() != StateAddrQuery; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("ResolveAddr did not start")
		}
	}
	if !cm.Endpoint().(*fakefab.Endpoint).Inject(EventAddrResolved, 0, nil) {
		t.Fatal("inject")
	}
	select {
	case err = <-got:
	case <-time.After(5 * time.Second):
		t.Fatal("ResolveAddr still blocked")
	}
	if !errors.Is(err, ErrClosed) || !errors.Is(err, syscall.EBADF) {
		t.Errorf("ResolveAddr on an id destroyed as its event came: %v, want ErrClosed and EBADF", err)
	}
	select {
	case err = <-destroyed:
		if err != nil {
			t.Errorf("destroy: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Destroy waits for an event nobody can acknowledge")
	}
	if r, c := cm.reported.Load(), cm.completed.Load(); r != 1 || c != 1 {
		t.Errorf("events reported %d, completed %d: want 1 and 1", r, c)
	}
}
