// Package fakefab is an in-memory fabric for tests and benchmarks: its
// endpoints record the calls made on them and report events the test
// injects, or (in auto mode) the events a perfect network would produce. It
// exercises the id, channel and reactor layers without sockets.
package fakefab

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cmrt/cmrt/fabric"
	"github.com/cmrt/cmrt/internal/evq"
	"github.com/cmrt/cmrt/internal/hooks"
)

// Fabric is a fake fabric.
type Fabric struct {
	name string
	// Auto makes endpoints answer calls with the events of a perfect
	// network: ADDR_RESOLVED, ROUTE_RESOLVED, ESTABLISHED, DISCONNECTED,
	// MULTICAST_JOIN.
	Auto bool
	// BeforeClose, if set, runs at the start of every Source.Close: tests
	// use it to order a step inside a caller that closes a source.
	BeforeClose func()
	// QuietMigrate, set before the sources are opened, makes Migrate
	// behave as the kernel's MIGRATE_ID: the events it moves are read by
	// the next Next (after the events queued on the source before them),
	// but the source's descriptor does not report them, and a Next blocked
	// before the Migrate is not woken for them. Migrate then calls the
	// source's OnMigrate functions (fabric.MigrateNotifier).
	QuietMigrate bool

	mu   sync.Mutex
	fail map[string]error
}

// New returns a fake fabric named name (not registered).
func New(name string, auto bool) *Fabric {
	return &Fabric{name: name, Auto: auto, fail: make(map[string]error)}
}

// Fail makes every later call named op ("bind", "connect", ...) fail with
// err; a nil err clears it.
func (f *Fabric) Fail(op string, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err == nil {
		delete(f.fail, op)
	} else {
		f.fail[op] = err
	}
}

func (f *Fabric) failure(op string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.fail[op]
}

// Name implements fabric.Fabric.
func (f *Fabric) Name() string { return f.name }

// Devices implements fabric.Fabric.
func (f *Fabric) Devices() ([]fabric.Device, error) {
	return []fabric.Device{{Name: "fake0", Transport: "iWARP", MaxQPRdAtom: 16, MaxQPInitRdAtom: 16}}, nil
}

// Open implements fabric.Fabric.
func (f *Fabric) Open() (fabric.EventSource, error) {
	q, err := evq.New()
	if err != nil {
		return nil, err
	}
	s := &Source{f: f, q: q, eps: make(map[*Endpoint]bool)}
	if f.QuietMigrate {
		s.moved, _ = evq.New() // its Fd is never asked for: no eventfd
	}
	return s, nil
}

// Source is a fake event source.
type Source struct {
	f     *Fabric
	q     *evq.Queue
	moved *evq.Queue // with QuietMigrate: the events Migrate moved here

	mu        sync.Mutex
	eps       map[*Endpoint]bool
	onMigrate hooks.Set
}

// Fabric implements fabric.EventSource.
func (s *Source) Fabric() fabric.Fabric { return s.f }

// Fd implements fabric.EventSource.
func (s *Source) Fd() int { return s.q.Fd() }

// Endpoints returns how many endpoints report to the source.
func (s *Source) Endpoints() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.eps)
}

// Len returns how many events are queued.
func (s *Source) Len() int {
	if s.moved != nil {
		return s.q.Len() + s.moved.Len()
	}
	return s.q.Len()
}

// extract takes the queued events match selects.
func (s *Source) extract(match func(*fabric.RawEvent) bool) []fabric.RawEvent {
	rs := s.q.Extract(match)
	if s.moved != nil {
		rs = append(rs, s.moved.Extract(match)...)
	}
	return rs
}

// OnMigrate implements fabric.MigrateNotifier: with QuietMigrate, f runs
// after every Migrate to the source that moved an endpoint, until stop or
// Close.
func (s *Source) OnMigrate(f func()) (stop func() bool) {
	return s.onMigrate.Add(f)
}

// MigrateHooks returns how many OnMigrate functions are installed.
func (s *Source) MigrateHooks() int { return s.onMigrate.Len() }

// Migrated calls the OnMigrate functions, as a Migrate in QuietMigrate
// mode does: tests use it to call them at a chosen time.
func (s *Source) Migrated() { s.onMigrate.Run() }

// Create implements fabric.EventSource.
func (s *Source) Create(uid uint64, ps fabric.PortSpace, qp fabric.QPType) (fabric.Endpoint, error) {
	if err := s.f.failure("create"); err != nil {
		return nil, err
	}
	ep := &Endpoint{src: s, uid: uid, PS: ps, QP: qp}
	s.mu.Lock()
	s.eps[ep] = true
	s.mu.Unlock()
	return ep, nil
}

// Next implements fabric.EventSource.
func (s *Source) Next(ctx context.Context, block bool, ev *fabric.RawEvent) error {
	if s.moved == nil {
		return s.q.Pop(ctx, block, ev)
	}
	err := s.q.Pop(ctx, false, ev)
	if !errors.Is(err, syscall.EAGAIN) {
		return err
	}
	if s.moved.Pop(ctx, false, ev) == nil {
		return nil
	}
	return s.q.Pop(ctx, block, ev)
}

var _ fabric.GuardedSource = (*Source)(nil)

// NextUnless implements fabric.GuardedSource.
func (s *Source) NextUnless(stop *atomic.Bool, ev *fabric.RawEvent) error {
	err := s.q.PopUnless(stop, ev)
	if s.moved == nil || !errors.Is(err, syscall.EAGAIN) {
		return err
	}
	return s.moved.PopUnless(stop, ev)
}

// Fence implements fabric.GuardedSource.
func (s *Source) Fence() {
	s.q.Fence()
	if s.moved != nil {
		s.moved.Fence()
	}
}

// Migrate implements fabric.EventSource.
func (s *Source) Migrate(e fabric.Endpoint) error {
	moved, err := s.migrate(e)
	if moved && s.moved != nil {
		s.Migrated()
	}
	return err
}

func (s *Source) migrate(e fabric.Endpoint) (bool, error) {
	ep := e.(*Endpoint)
	ep.mu.Lock()
	defer ep.mu.Unlock()
	old := ep.src
	if old == s {
		return false, nil
	}
	if ep.destroyed {
		return false, fmt.Errorf("fakefab: migrate of a destroyed endpoint: %w", syscall.EINVAL)
	}
	if ep.uid != 0 {
		uid := ep.uid
		moved := old.extract(func(r *fabric.RawEvent) bool { return r.UID == uid })
		// The new endpoints of queued requests move with them: the old
		// source may close before they are delivered.
		for k := range moved {
			if c, ok := moved[k].Child.(*Endpoint); ok {
				c.mu.Lock()
				if c.src == old {
					old.mu.Lock()
					delete(old.eps, c)
					old.mu.Unlock()
					s.mu.Lock()
					s.eps[c] = true
					s.mu.Unlock()
					c.src = s
				}
				c.mu.Unlock()
			}
		}
		q := s.q
		if s.moved != nil {
			q = s.moved
		}
		if err := q.PushAll(moved); err != nil {
			return false, err
		}
	}
	old.mu.Lock()
	delete(old.eps, ep)
	old.mu.Unlock()
	s.mu.Lock()
	s.eps[ep] = true
	s.mu.Unlock()
	ep.src = s
	return true, nil
}

// Close implements fabric.EventSource.
func (s *Source) Close() error {
	if h := s.f.BeforeClose; h != nil {
		h()
	}
	s.mu.Lock()
	s.onMigrate.Close()
	eps := make([]*Endpoint, 0, len(s.eps))
	for ep := range s.eps {
		eps = append(eps, ep)
	}
	s.mu.Unlock()
	for _, ep := range eps {
		_ = ep.Destroy()
	}
	left := s.q.Close()
	if s.moved != nil {
		left = append(left, s.moved.Close()...)
	}
	for _, r := range left {
		if r.Child != nil {
			_ = r.Child.Destroy()
		}
	}
	return nil
}

// Endpoint is a fake endpoint. Its exported fields are for tests to read.
type Endpoint struct {
	PS fabric.PortSpace
	QP fabric.QPType

	mu        sync.Mutex
	src       *Source
	uid       uint64
	calls     []string
	destroyed bool
	local     netip.AddrPort
	remote    netip.AddrPort
	peer      *Endpoint // the child a connect in auto mode pairs with, if any
	groups    map[netip.Addr]uint64
}

// Calls returns the names of the calls made so far.
func (e *Endpoint) Calls() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]string(nil), e.calls...)
}

// UID returns the uid events of the endpoint carry.
func (e *Endpoint) UID() uint64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.uid
}

// Destroyed reports whether Destroy was called.
func (e *Endpoint) Destroyed() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.destroyed
}

// Queued returns how many events wait on the endpoint's source (for a
// synchronous id, its private channel: all of them are the id's).
func (e *Endpoint) Queued() int {
	e.mu.Lock()
	src := e.src
	e.mu.Unlock()
	return src.Len()
}

// Inject queues an event of type t with status for the endpoint; it reports
// false if the endpoint is destroyed or not yet accepted.
func (e *Endpoint) Inject(t fabric.EventType, status int32, pd []byte) bool {
	r := fabric.RawEvent{Type: t, Status: status}
	r.SetPrivateData(pd)
	return e.push(&r)
}

// InjectRaw queues r (its UID is set to the endpoint's).
func (e *Endpoint) InjectRaw(r *fabric.RawEvent) bool { return e.push(r) }

func (e *Endpoint) push(r *fabric.RawEvent) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.destroyed || e.uid == 0 {
		return false
	}
	r.UID = e.uid
	return e.src.q.Push(r) == nil
}

// InjectRequest queues a CONNECT_REQUEST on a listening endpoint and returns
// the new endpoint.
func (e *Endpoint) InjectRequest(pd []byte) *Endpoint {
	e.mu.Lock()
	src := e.src
	e.mu.Unlock()
	child := &Endpoint{src: src, PS: e.PS, QP: e.QP}
	src.mu.Lock()
	src.eps[child] = true
	src.mu.Unlock()
	r := fabric.RawEvent{Type: fabric.EventConnectRequest, Child: child, ResponderResources: 3, InitiatorDepth: 4}
	r.SetPrivateData(pd)
	if !e.push(&r) {
		_ = child.Destroy()
		return nil
	}
	return child
}

func (e *Endpoint) call(name string) error {
	e.mu.Lock()
	e.calls = append(e.calls, name)
	destroyed := e.destroyed
	e.mu.Unlock()
	if destroyed {
		return fmt.Errorf("fakefab: %s on a destroyed endpoint: %w", name, syscall.EINVAL)
	}
	return e.src.f.failure(name)
}

func (e *Endpoint) auto(t fabric.EventType) {
	if e.src.f.Auto {
		e.Inject(t, 0, nil)
	}
}

// Bind implements fabric.Endpoint.
func (e *Endpoint) Bind(a netip.AddrPort) error {
	if err := e.call("bind"); err != nil {
		return err
	}
	e.mu.Lock()
	e.local = a
	e.mu.Unlock()
	return nil
}

// ResolveAddr implements fabric.Endpoint.
func (e *Endpoint) ResolveAddr(src, dst netip.AddrPort, _ time.Duration) error {
	if err := e.call("resolve_addr"); err != nil {
		return err
	}
	e.mu.Lock()
	e.remote = dst
	if !e.local.IsValid() {
		e.local = netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), 40000)
	}
	e.mu.Unlock()
	e.auto(fabric.EventAddrResolved)
	return nil
}

// ResolveRoute implements fabric.Endpoint.
func (e *Endpoint) ResolveRoute(time.Duration) error {
	if err := e.call("resolve_route"); err != nil {
		return err
	}
	e.auto(fabric.EventRouteResolved)
	return nil
}

// Listen implements fabric.Endpoint.
func (e *Endpoint) Listen(int) error { return e.call("listen") }

// Connect implements fabric.Endpoint.
func (e *Endpoint) Connect(p *fabric.ConnParam) error {
	if err := e.call("connect"); err != nil {
		return err
	}
	if e.src.f.Auto {
		e.Inject(fabric.EventEstablished, 0, []byte("auto"))
	}
	return nil
}

// Accept implements fabric.Endpoint.
func (e *Endpoint) Accept(uid uint64, _ *fabric.ConnParam) error {
	if err := e.call("accept"); err != nil {
		return err
	}
	e.mu.Lock()
	e.uid = uid
	e.mu.Unlock()
	if e.QP == fabric.RC {
		e.auto(fabric.EventEstablished)
	}
	return nil
}

// Reject implements fabric.Endpoint.
func (e *Endpoint) Reject([]byte) error { return e.call("reject") }

// Establish implements fabric.Endpoint.
func (e *Endpoint) Establish() error { return e.call("establish") }

// Disconnect implements fabric.Endpoint.
func (e *Endpoint) Disconnect() error {
	if err := e.call("disconnect"); err != nil {
		return err
	}
	e.auto(fabric.EventDisconnected)
	return nil
}

// SetOption implements fabric.Endpoint.
func (e *Endpoint) SetOption(fabric.OptionLevel, fabric.OptionName, []byte) error {
	return e.call("set_option")
}

// Join implements fabric.Endpoint.
func (e *Endpoint) Join(uid uint64, group netip.Addr, _ bool) error {
	if err := e.call("join"); err != nil {
		return err
	}
	e.mu.Lock()
	if e.groups == nil {
		e.groups = make(map[netip.Addr]uint64)
	}
	e.groups[group] = uid
	src := e.src
	e.mu.Unlock()
	if e.src.f.Auto {
		r := fabric.RawEvent{UID: uid, Type: fabric.EventMulticastJoin, QPNum: fabric.MulticastQPNum, QKey: fabric.UDPQKey, Group: group}
		_ = src.q.Push(&r)
	}
	return nil
}

// InjectJoin queues a multicast event for the join of group.
func (e *Endpoint) InjectJoin(group netip.Addr, t fabric.EventType, status int32) bool {
	e.mu.Lock()
	uid, ok := e.groups[group]
	src := e.src
	e.mu.Unlock()
	if !ok {
		return false
	}
	r := fabric.RawEvent{UID: uid, Type: t, Status: status, QPNum: fabric.MulticastQPNum, QKey: fabric.UDPQKey, Group: group}
	return src.q.Push(&r) == nil
}

// Leave implements fabric.Endpoint.
func (e *Endpoint) Leave(group netip.Addr) error {
	if err := e.call("leave"); err != nil {
		return err
	}
	e.mu.Lock()
	delete(e.groups, group)
	e.mu.Unlock()
	return nil
}

// Notify implements fabric.Endpoint.
func (e *Endpoint) Notify(fabric.AsyncEvent) error { return e.call("notify") }

// Query implements fabric.Endpoint.
func (e *Endpoint) Query() (fabric.Route, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return fabric.Route{Src: e.local, Dst: e.remote, Device: "fake0", PortNum: 1}, nil
}

// Destroy implements fabric.Endpoint: queued events are dropped.
func (e *Endpoint) Destroy() error {
	e.mu.Lock()
	if e.destroyed {
		e.mu.Unlock()
		return nil
	}
	e.destroyed = true
	e.calls = append(e.calls, "destroy")
	uid, src := e.uid, e.src
	e.mu.Unlock()
	if uid != 0 {
		for _, r := range src.extract(func(r *fabric.RawEvent) bool { return r.UID == uid }) {
			if r.Child != nil {
				_ = r.Child.Destroy()
			}
		}
	}
	src.mu.Lock()
	delete(src.eps, e)
	src.mu.Unlock()
	return nil
}
