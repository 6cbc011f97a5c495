package fabric

import (
	"context"
	"net/netip"
	"sync/atomic"
	"time"
)

// Fabric is a provider of RDMA devices and CM ids: the software fabric or
// the kernel's RDMA CM. Implementations must be safe for concurrent use.
type Fabric interface {
	// Name is the fabric's registered name ("soft", "kernel").
	Name() string
	// Devices lists the fabric's devices, as rdma_get_devices.
	Devices() ([]Device, error)
	// Open creates a fabric event source: the backend of one event channel,
	// as rdma_create_event_channel.
	Open() (EventSource, error)
}

// Device describes one RDMA device.
type Device struct {
	// Name is the device name (soft0, rxe0, mlx5_0, ...).
	Name string
	// Index is the device index.
	Index int
	// Transport is "iWARP" or "InfiniBand" (RoCE devices report InfiniBand).
	Transport string
	// Netdev is the network interface the device sits on, if any.
	Netdev string
	// NodeGUID is the device's node GUID.
	NodeGUID uint64
	// Addrs are the IP addresses the device answers to.
	Addrs []netip.Addr
	// MaxQPRdAtom is the device cap for responder resources (IRD).
	MaxQPRdAtom uint8
	// MaxQPInitRdAtom is the device cap for initiator depth (ORD).
	MaxQPInitRdAtom uint8
}

// EventSource is the fabric side of an event channel: a FIFO of raw events
// with a descriptor that is readable while the FIFO is not empty. Ids are
// created on a source and report their events to it.
type EventSource interface {
	// Fabric returns the fabric the source belongs to.
	Fabric() Fabric
	// Fd is readable (poll/epoll) while events are queued.
	Fd() int
	// Create creates an endpoint reporting to this source. uid is the
	// non-zero value the source puts in RawEvent.UID for the endpoint.
	Create(uid uint64, ps PortSpace, qp QPType) (Endpoint, error)
	// Next dequeues the oldest event into ev. When the queue is empty it
	// returns an error wrapping EAGAIN unless block is set, in which case it
	// waits until an event arrives, ctx ends (ctx.Err() is returned) or the
	// source is closed.
	Next(ctx context.Context, block bool, ev *RawEvent) error
	// Migrate moves ep, and the events queued for it, to this source.
	Migrate(ep Endpoint) error
	// Close releases the source. Endpoints still on it are destroyed.
	Close() error
}

// GuardedSource is an EventSource whose takes a runtime can stop
// atomically with the take itself, as a reactor does when a channel is
// unregistered from another goroutine while the reactor's loop takes and
// handles its events: after stop.Store(true) and Fence, no NextUnless
// given that stop takes an event, and every one that began before has
// returned. The in-tree sources implement it; a runtime given a source
// that does not marks its takes itself (a fence per event: see
// reactor.Reactor.Unregister).
type GuardedSource interface {
	EventSource
	// NextUnless is Next without waiting (an empty source returns an error
	// wrapping EAGAIN), except that it takes nothing, and returns an error
	// wrapping EAGAIN, when *stop is set: stop is read under the lock that
	// orders the source's takes, after any Fence that began before.
	NextUnless(stop *atomic.Bool, ev *RawEvent) error
	// Fence returns once every NextUnless that began before it has
	// returned.
	Fence()
}

// Endpoint is the fabric side of one id: what the kernel calls the rdma_cm
// id behind a ucma handle. The library checks states and arguments before
// calling it; implementations return errno-wrapping errors for what only
// the fabric can know (address in use, not local, no device, ...).
type Endpoint interface {
	// Bind binds the endpoint to a local address; port 0 picks one.
	Bind(addr netip.AddrPort) error
	// ResolveAddr starts address resolution: ADDR_RESOLVED or ADDR_ERROR.
	// An invalid src means any; the endpoint is bound if it is not yet.
	ResolveAddr(src, dst netip.AddrPort, timeout time.Duration) error
	// ResolveRoute starts route resolution: ROUTE_RESOLVED or ROUTE_ERROR.
	ResolveRoute(timeout time.Duration) error
	// Listen starts listening; an unbound endpoint binds to any address.
	Listen(backlog int) error
	// Connect starts connecting: ESTABLISHED, CONNECT_RESPONSE, REJECTED,
	// UNREACHABLE or CONNECT_ERROR. p has defaults already applied.
	Connect(p *ConnParam) error
	// Accept accepts a connection request on an endpoint born from one; uid
	// becomes the endpoint's event uid. p has defaults already applied.
	Accept(uid uint64, p *ConnParam) error
	// Reject rejects a connection request with private data.
	Reject(privateData []byte) error
	// Establish completes a connection after CONNECT_RESPONSE when the
	// application drives its own QP.
	Establish() error
	// Disconnect tears the connection down: DISCONNECTED on both sides,
	// unless one was already reported for it.
	Disconnect() error
	// SetOption sets an option; the library has checked level, name and
	// length.
	SetOption(level OptionLevel, name OptionName, val []byte) error
	// Join joins a multicast group; uid becomes the join's event uid.
	Join(uid uint64, group netip.Addr, sendOnly bool) error
	// Leave leaves a group joined with Join.
	Leave(group netip.Addr) error
	// Notify reports an asynchronous QP event to the CM (rdma_notify).
	Notify(e AsyncEvent) error
	// Query returns the endpoint's addresses, device and path.
	Query() (Route, error)
	// Destroy releases the endpoint and drops the events still queued for
	// it; queued CONNECT_REQUESTs have their new endpoints rejected.
	Destroy() error
}

// Route is what a fabric knows of an endpoint's addressing: its bound or
// resolved source, its destination, its device and the path between them.
type Route struct {
	// Src is the local address and port.
	Src netip.AddrPort
	// Dst is the remote address and port (invalid when there is none).
	Dst netip.AddrPort
	// Device is the name of the device the endpoint is bound to, or "".
	Device string
	// PortNum is the device port number (1 when bound).
	PortNum uint8
	// Gateway is the next hop towards Dst, invalid when on link.
	Gateway netip.Addr
	// MTU is the path MTU in bytes (0 before route resolution).
	MTU int
	// NumPaths is the number of resolved paths.
	NumPaths int
}

// RawEvent is an event as a fabric reports it, before the library maps it
// to ids: the analogue of the kernel's struct rdma_ucm_event_resp.
type RawEvent struct {
	// UID is the uid of the endpoint (or multicast join) the event is for;
	// for CONNECT_REQUEST, the listener's.
	UID uint64
	// Type and Status are as the user will see them.
	Type   EventType
	Status int32
	// Child is the new endpoint of a CONNECT_REQUEST.
	Child Endpoint
	// QPNum, QKey and AH are the UD parameters (UD events).
	QPNum uint32
	QKey  uint32
	AH    AHAttr
	// Connection parameters (RC events).
	ResponderResources uint8
	InitiatorDepth     uint8
	FlowControl        uint8
	RetryCount         uint8
	RNRRetryCount      uint8
	SRQ                uint8
	// Group is the multicast group of MULTICAST_JOIN / MULTICAST_ERROR.
	Group netip.Addr
	// Arg is the argument of a USER event.
	Arg uint64
	// PrivateDataLen bytes of PrivateData are valid.
	PrivateDataLen int
	PrivateData    [MaxEventPrivateData]byte
}

// SetPrivateData copies pd (at most 256 bytes) into the event.
func (r *RawEvent) SetPrivateData(pd []byte) {
	r.PrivateDataLen = copy(r.PrivateData[:], pd)
}

// MigrateNotifier is implemented by event sources whose descriptor does not
// report the events Migrate moves to them: the kernel fabric's (ucma wakes
// no poller when MIGRATE_ID moves an id's queued events to a file, so an
// epoll of that file sees them only with the file's next event). A poller
// of the descriptor (a reactor) installs f with OnMigrate; the source calls
// it, holding none of its locks, after each Migrate that may have moved
// events to it, and f arranges for the source to be read (without
// blocking) until it is empty, as a readiness report would. f must not
// block. stop removes f and reports whether it was still installed; a
// closed source drops its functions.
type MigrateNotifier interface {
	OnMigrate(f func()) (stop func() bool)
}
