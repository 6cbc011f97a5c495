package ucma

import "strconv"

// Address families understood by the RDMA CM.
const (
	AFInet  = 2  // AF_INET: sockaddr_in, 16 bytes
	AFInet6 = 10 // AF_INET6: sockaddr_in6, 28 bytes
	AFIB    = 27 // AF_IB: sockaddr_ib, 48 bytes
)

// Port spaces (enum rdma_ucm_port_space), the ps field of CREATE_ID.
const (
	PSIPoIB = 0x0002
	PSTCP   = 0x0106
	PSUDP   = 0x0111
	PSIB    = 0x013F
)

// QP types (enum ib_qp_type) for the qp_type field of CREATE_ID, which the
// kernel only reads for PSIB (PSTCP implies RC, PSUDP and PSIPoIB imply UD).
const (
	QPTypeRC = 2
	QPTypeUC = 3
	QPTypeUD = 4
)

// QP states (enum ib_qp_state), the qp_state field of INIT_QP_ATTR.
const (
	QPStateReset = 0
	QPStateInit  = 1
	QPStateRTR   = 2
	QPStateRTS   = 3
	QPStateSQD   = 4
	QPStateSQE   = 5
	QPStateErr   = 6
)

// Option levels and names for SET_OPTION.
const (
	OptionLevelID = 0 // RDMA_OPTION_ID
	OptionLevelIB = 1 // RDMA_OPTION_IB

	OptionTOS        = 0 // level ID, u8 type of service
	OptionReuseAddr  = 1 // level ID, int
	OptionAFOnly     = 2 // level ID, int
	OptionAckTimeout = 3 // level ID, u8 (4.096 us * 2^n)

	OptionIBPath = 1 // level IB, array of 72-byte PathData
)

// QUERY options.
const (
	QueryAddr      = 0 // response: QueryAddrResp, 280 bytes
	QueryPath      = 1 // response: num_paths + N x 72-byte PathData
	QueryGID       = 2 // response: QueryAddrResp with sockaddr_ib addresses
	QueryIBService = 3 // response: service records (2025 kernels; not decoded here)
)

// Multicast join flags for JOIN_MCAST.
const (
	JoinFullMember         = 0
	JoinSendOnlyFullMember = 1
)

// IB service resolution flags for RESOLVE_IB_SERVICE.
const (
	IBServiceByID   = 1 << 0
	IBServiceByName = 1 << 1
)

// REJECT reasons (IB CM REJ reason codes the kernel accepts from user space).
const (
	RejectConsumerDefined          = 28 // also what reason 0 means
	RejectVendorOptionNotSupported = 35
)

// Path flags of PathData (enum in uapi ib_user_sa.h).
const (
	PathGMP            = 1 << 0
	PathPrimary        = 1 << 1
	PathAlternate      = 1 << 2
	PathOutbound       = 1 << 3
	PathInbound        = 1 << 4
	PathInboundReverse = 1 << 5
	PathBidirectional  = PathOutbound | PathInboundReverse
)

// Protocol limits.
const (
	// ABIVersionCurrent is the current rdma_cm ABI version; 3 is also accepted.
	ABIVersionCurrent = 4
	// MaxPrivateData is the size of the ABI's private-data buffers. The u8
	// length field limits what can be sent to 255 bytes.
	MaxPrivateData = 256
	// IBServiceNameSize is the size of RESOLVE_IB_SERVICE's name field.
	IBServiceNameSize = 64
	// InvalidIBDevIndex is what the ibdev_index fields of QUERY responses
	// hold when the kernel is too old to fill them (Buffers presets it).
	InvalidIBDevIndex = 0xFFFFFFFF
)

// EventType is an RDMA CM event (enum rdma_cm_event_type).
type EventType uint32

// Event types.
const (
	EventAddrResolved     EventType = 0
	EventAddrError        EventType = 1
	EventRouteResolved    EventType = 2
	EventRouteError       EventType = 3
	EventConnectRequest   EventType = 4
	EventConnectResponse  EventType = 5
	EventConnectError     EventType = 6
	EventUnreachable      EventType = 7
	EventRejected         EventType = 8
	EventEstablished      EventType = 9
	EventDisconnected     EventType = 10
	EventDeviceRemoval    EventType = 11
	EventMulticastJoin    EventType = 12
	EventMulticastError   EventType = 13
	EventAddrChange       EventType = 14
	EventTimewaitExit     EventType = 15
	EventAddrInfoResolved EventType = 16
	EventAddrInfoError    EventType = 17
	EventUser             EventType = 18
	EventInternal         EventType = 19
)

var eventNames = [...]string{
	"ADDR_RESOLVED", "ADDR_ERROR", "ROUTE_RESOLVED", "ROUTE_ERROR",
	"CONNECT_REQUEST", "CONNECT_RESPONSE", "CONNECT_ERROR", "UNREACHABLE",
	"REJECTED", "ESTABLISHED", "DISCONNECTED", "DEVICE_REMOVAL",
	"MULTICAST_JOIN", "MULTICAST_ERROR", "ADDR_CHANGE", "TIMEWAIT_EXIT",
	"ADDRINFO_RESOLVED", "ADDRINFO_ERROR", "USER", "INTERNAL",
}

// String returns the event's name in the kernel's spelling, e.g.
// "RDMA_CM_EVENT_ESTABLISHED", or "EventType(N)" for an unknown value.
func (t EventType) String() string {
	if int(t) < len(eventNames) {
		return "RDMA_CM_EVENT_" + eventNames[t]
	}
	return "EventType(" + strconv.FormatUint(uint64(t), 10) + ")"
}
