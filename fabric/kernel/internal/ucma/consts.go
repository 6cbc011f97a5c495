package ucma

// Address families understood by the RDMA CM.
const (
	AFInet  = 2  // AF_INET: sockaddr_in, 16 bytes
	AFInet6 = 10 // AF_INET6: sockaddr_in6, 28 bytes
	AFIB    = 27 // AF_IB: sockaddr_ib, 48 bytes
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
