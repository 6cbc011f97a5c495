// Package fakefab is an in-memory fabric for tests and benchmarks: its
// endpoints record the calls made on them and report events the test
// injects, or (in auto mode) the events a perfect network would produce. It
// exercises the id, channel and reactor layers without sockets.
package fakefab

import (
	"context"
	"fmt"
	"net/netip"
	"sync"
	"syscall"
	"time"

	"github.com/cmrt/cmrt/id"
	"github.com/cmrt/cmrt/internal/evq"
)

// Fabric is a fake fabric.
type Fabric struct {
	name string
	// Auto makes endpoints answer calls with the events of a perfect
	// network: ADDR_RESOLVED, ROUTE_RESOLVED, ESTABLISHED, DISCONNECTED,
	// MULTICAST_JOIN.
	Auto bool

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

// Name implements id.Fabric.
func (f *Fabric) Name() string { return f.name }

// Devices implements id.Fabric.
func (f *Fabric) Devices() ([]id.Device, error) {
	return []id.Device{{Name: "fake0", Transport: "iWARP", MaxQPRdAtom: 16, MaxQPInitRdAtom: 16}}, nil
}

// Open implements id.Fabric.
func (f *Fabric) Open() (id.EventSource, error) {
	q, err := evq.New()
	if err != nil {
		return nil, err
	}
	return &Source{f: f, q: q, eps: make(map[*Endpoint]bool)}, nil
}

// Source is a fake event source.
type Source struct {
	f *Fabric
	q *evq.Queue

	mu  sync.Mutex
	eps map[*Endpoint]bool
}

// Fabric implements id.EventSource.
func (s *Source) Fabric() id.Fabric { return s.f }

// Fd implements id.EventSource.
func (s *Source) Fd() int { return s.q.Fd() }

// Endpoints returns how many endpoints report to the source.
func (s *Source) Endpoints() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.eps)
}

// Len returns how many events are queued.
func (s *Source) Len() int { return s.q.Len() }

// Create implements id.EventSource.
func (s *Source) Create(uid uint64, ps id.PortSpace, qp id.QPType) (id.Endpoint, error) {
	if err := s.f.failure("create"); err != nil {
		return nil, err
	}
	ep := &Endpoint{src: s, uid: uid, PS: ps, QP: qp}
	s.mu.Lock()
	s.eps[ep] = true
	s.mu.Unlock()
	return ep, nil
}

// Next implements id.EventSource.
func (s *Source) Next(ctx context.Context, block bool, ev *id.RawEvent) error {
	return s.q.Pop(ctx, block, ev)
}

// Migrate implements id.EventSource.
func (s *Source) Migrate(e id.Endpoint) error {
	ep := e.(*Endpoint)
	ep.mu.Lock()
	defer ep.mu.Unlock()
	old := ep.src
	if old == s {
		return nil
	}
	if ep.destroyed {
		return fmt.Errorf("fakefab: migrate of a destroyed endpoint: %w", syscall.EINVAL)
	}
	if ep.uid != 0 {
		uid := ep.uid
		moved := old.q.Extract(func(r *id.RawEvent) bool { return r.UID == uid })
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
		if err := s.q.PushAll(moved); err != nil {
			return err
		}
	}
	old.mu.Lock()
	delete(old.eps, ep)
	old.mu.Unlock()
	s.mu.Lock()
	s.eps[ep] = true
	s.mu.Unlock()
	ep.src = s
	return nil
}

// Close implements id.EventSource.
func (s *Source) Close() error {
	s.mu.Lock()
	eps := make([]*Endpoint, 0, len(s.eps))
	for ep := range s.eps {
		eps = append(eps, ep)
	}
	s.mu.Unlock()
	for _, ep := range eps {
		_ = ep.Destroy()
	}
	for _, r := range s.q.Close() {
		if r.Child != nil {
			_ = r.Child.Destroy()
		}
	}
	return nil
}

// Endpoint is a fake endpoint. Its exported fields are for tests to read.
type Endpoint struct {
	PS id.PortSpace
	QP id.QPType

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
	return src.q.Len()
}

// Inject queues an event of type t with status for the endpoint; it reports
// false if the endpoint is destroyed or not yet accepted.
func (e *Endpoint) Inject(t id.EventType, status int32, pd []byte) bool {
	r := id.RawEvent{Type: t, Status: status}
	r.SetPrivateData(pd)
	return e.push(&r)
}

// InjectRaw queues r (its UID is set to the endpoint's).
func (e *Endpoint) InjectRaw(r *id.RawEvent) bool { return e.push(r) }

func (e *Endpoint) push(r *id.RawEvent) bool {
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
	r := id.RawEvent{Type: id.EventConnectRequest, Child: child, ResponderResources: 3, InitiatorDepth: 4}
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

func (e *Endpoint) auto(t id.EventType) {
	if e.src.f.Auto {
		e.Inject(t, 0, nil)
	}
}

// Bind implements id.Endpoint.
func (e *Endpoint) Bind(a netip.AddrPort) error {
	if err := e.call("bind"); err != nil {
		return err
	}
	e.mu.Lock()
	e.local = a
	e.mu.Unlock()
	return nil
}

// ResolveAddr implements id.Endpoint.
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
	e.auto(id.EventAddrResolved)
	return nil
}

// ResolveRoute implements id.Endpoint.
func (e *Endpoint) ResolveRoute(time.Duration) error {
	if err := e.call("resolve_route"); err != nil {
		return err
	}
	e.auto(id.EventRouteResolved)
	return nil
}

// Listen implements id.Endpoint.
func (e *Endpoint) Listen(int) error { return e.call("listen") }

// Connect implements id.Endpoint.
func (e *Endpoint) Connect(p *id.ConnParam) error {
	if err := e.call("connect"); err != nil {
		return err
	}
	if e.src.f.Auto {
		e.Inject(id.EventEstablished, 0, []byte("auto"))
	}
	return nil
}

// Accept implements id.Endpoint.
func (e *Endpoint) Accept(uid uint64, _ *id.ConnParam) error {
	if err := e.call("accept"); err != nil {
		return err
	}
	e.mu.Lock()
	e.uid = uid
	e.mu.Unlock()
	if e.QP == id.RC {
		e.auto(id.EventEstablished)
	}
	return nil
}

// Reject implements id.Endpoint.
func (e *Endpoint) Reject([]byte) error { return e.call("reject") }

// Establish implements id.Endpoint.
func (e *Endpoint) Establish() error { return e.call("establish") }

// Disconnect implements id.Endpoint.
func (e *Endpoint) Disconnect() error {
	if err := e.call("disconnect"); err != nil {
		return err
	}
	e.auto(id.EventDisconnected)
	return nil
}

// SetOption implements id.Endpoint.
func (e *Endpoint) SetOption(id.OptionLevel, id.OptionName, []byte) error {
	return e.call("set_option")
}

// Join implements id.Endpoint.
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
		r := id.RawEvent{UID: uid, Type: id.EventMulticastJoin, QPNum: id.MulticastQPNum, QKey: id.UDPQKey, Group: group}
		_ = src.q.Push(&r)
	}
	return nil
}

// InjectJoin queues a multicast event for the join of group.
func (e *Endpoint) InjectJoin(group netip.Addr, t id.EventType, status int32) bool {
	e.mu.Lock()
	uid, ok := e.groups[group]
	src := e.src
	e.mu.Unlock()
	if !ok {
		return false
	}
	r := id.RawEvent{UID: uid, Type: t, Status: status, QPNum: id.MulticastQPNum, QKey: id.UDPQKey, Group: group}
	return src.q.Push(&r) == nil
}

// Leave implements id.Endpoint.
func (e *Endpoint) Leave(group netip.Addr) error {
	if err := e.call("leave"); err != nil {
		return err
	}
	e.mu.Lock()
	delete(e.groups, group)
	e.mu.Unlock()
	return nil
}

// Notify implements id.Endpoint.
func (e *Endpoint) Notify(id.AsyncEvent) error { return e.call("notify") }

// Query implements id.Endpoint.
func (e *Endpoint) Query() (id.Route, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return id.Route{Src: e.local, Dst: e.remote, Device: "fake0", PortNum: 1}, nil
}

// Destroy implements id.Endpoint: queued events are dropped.
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
		for _, r := range src.q.Extract(func(r *id.RawEvent) bool { return r.UID == uid }) {
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
