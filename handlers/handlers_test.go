package handlers_test

import (
	"errors"
	"fmt"
	"sync"
	"syscall"
	"testing"

	"github.com/cmrt/cmrt/fabric"
	"github.com/cmrt/cmrt/handlers"
	"github.com/cmrt/cmrt/id"
)

// TestTypedMethodsRouteTheirType registers one handler per event type with
// the typed methods and checks each type reaches exactly its own.
func TestTypedMethodsRouteTheirType(t *testing.T) {
	m := handlers.New()
	var got []id.EventType
	rec := func(want id.EventType) func(*id.Event) error {
		return func(ev *id.Event) error {
			if ev.Type != want {
				t.Errorf("handler for %s got %s", want, ev.Type)
			}
			got = append(got, want)
			return nil
		}
	}
	regs := map[id.EventType]func(func(*id.Event) error) *handlers.Mux{
		id.EventAddrResolved: m.OnAddrResolved, id.EventAddrError: m.OnAddrError,
		id.EventRouteResolved: m.OnRouteResolved, id.EventRouteError: m.OnRouteError,
		id.EventConnectRequest: m.OnConnectRequest, id.EventConnectResponse: m.OnConnectResponse,
		id.EventConnectError: m.OnConnectError, id.EventUnreachable: m.OnUnreachable,
		id.EventRejected: m.OnRejected, id.EventEstablished: m.OnEstablished,
		id.EventDisconnected: m.OnDisconnected, id.EventDeviceRemoval: m.OnDeviceRemoval,
		id.EventMulticastJoin: m.OnMulticastJoin, id.EventMulticastError: m.OnMulticastError,
		id.EventAddrChange: m.OnAddrChange, id.EventTimewaitExit: m.OnTimewaitExit,
		id.EventAddrInfoResolved: m.OnAddrInfoResolved, id.EventAddrInfoError: m.OnAddrInfoError,
		id.EventUser: m.OnUser,
	}
	if len(regs) != fabric.NumEventTypes {
		t.Fatalf("%d typed methods for %d event types", len(regs), fabric.NumEventTypes)
	}
	for typ, on := range regs {
		on(rec(typ))
	}
	for typ := id.EventType(0); typ < fabric.NumEventTypes; typ++ {
		if err := m.HandleEvent(&id.Event{Type: typ}); err != nil {
			t.Fatal(err)
		}
	}
	if len(got) != fabric.NumEventTypes {
		t.Fatalf("%d dispatches, want %d", len(got), fabric.NumEventTypes)
	}
	for k, typ := range got {
		if typ != id.EventType(k) {
			t.Fatalf("dispatch %d went to the handler of %s", k, typ)
		}
	}
}

func TestDefaultRemoveAndLookup(t *testing.T) {
	m := handlers.New()
	if err := m.HandleEvent(&id.Event{Type: id.EventUser}); err != nil {
		t.Fatalf("empty mux: %v", err)
	}
	calls := map[string]int{}
	m.OnEstablished(func(*id.Event) error { calls["established"]++; return nil })
	m.DefaultFunc(func(ev *id.Event) error { calls["default"]++; return fmt.Errorf("unexpected %s", ev.Type) })
	_ = m.HandleEvent(&id.Event{Type: id.EventEstablished})
	if err := m.HandleEvent(&id.Event{Type: id.EventRejected}); err == nil {
		t.Fatal("default handler's error lost")
	}
	m.Remove(id.EventEstablished)
	_ = m.HandleEvent(&id.Event{Type: id.EventEstablished})
	if calls["established"] != 1 || calls["default"] != 2 {
		t.Fatalf("calls %v", calls)
	}
	if m.Lookup(id.EventEstablished) == nil || m.Lookup(99) == nil {
		t.Fatal("Lookup should fall back to the default")
	}
}

// A nil handler, or an event type out of range, is refused with EINVAL as
// every cmrt call refuses a bad argument: the registration is not made,
// nothing panics, the chain goes on, and Err reports the first refusal.
func TestRegistrationMisuseIsEINVAL(t *testing.T) {
	ok := func(*id.Event) error { return nil }
	for name, reg := range map[string]func(*handlers.Mux) *handlers.Mux{
		"nil handler":   func(m *handlers.Mux) *handlers.Mux { return m.Handle(id.EventUser, nil) },
		"nil Func":      func(m *handlers.Mux) *handlers.Mux { return m.Handle(id.EventUser, handlers.Func(nil)) },
		"nil *Mux":      func(m *handlers.Mux) *handlers.Mux { return m.Handle(id.EventUser, (*handlers.Mux)(nil)) },
		"nil func":      func(m *handlers.Mux) *handlers.Mux { return m.HandleFunc(id.EventUser, nil) },
		"typed nil":     func(m *handlers.Mux) *handlers.Mux { return m.OnUser(nil) },
		"type too big":  func(m *handlers.Mux) *handlers.Mux { return m.HandleFunc(fabric.NumEventTypes, ok) },
		"negative type": func(m *handlers.Mux) *handlers.Mux { return m.Remove(-1) },
		"nil default":   func(m *handlers.Mux) *handlers.Mux { return m.Default(nil) },
		"nil default f": func(m *handlers.Mux) *handlers.Mux { return m.DefaultFunc(nil) },
	} {
		m := handlers.New().OnUser(ok)
		if m.Err() != nil {
			t.Fatalf("%s: Err %v before any misuse", name, m.Err())
		}
		if got := reg(m).OnEstablished(ok); got != m {
			t.Fatalf("%s: the chain broke", name)
		}
		if err := m.Err(); !errors.Is(err, syscall.EINVAL) {
			t.Errorf("%s: Err() = %v, want EINVAL", name, err)
		}
		if m.Lookup(id.EventUser) == nil || m.Lookup(id.EventEstablished) == nil {
			t.Errorf("%s: the refusal undid or blocked other registrations", name)
		}
		if err := m.HandleEvent(&id.Event{Type: id.EventUser}); err != nil {
			t.Errorf("%s: dispatch after a refusal: %v", name, err)
		}
		first := m.Err()
		m.Remove(99)
		if m.Err() != first {
			t.Errorf("%s: Err changed to %v, want the first refusal", name, m.Err())
		}
	}
}

// TestRegisterWhileDispatching runs under -race: the table is copied on
// write, so readers never see a torn update.
func TestRegisterWhileDispatching(t *testing.T) {
	m := handlers.New()
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for k := 0; k < 4; k++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
					_ = m.HandleEvent(&id.Event{Type: id.EventUser})
				}
			}
		}()
	}
	for k := 0; k < 1000; k++ {
		n := k
		m.OnUser(func(*id.Event) error { _ = n; return nil })
	}
	close(stop)
	wg.Wait()
}
