package fabric

// OptionLevel is the level of an option, as in rdma_set_option(3).
type OptionLevel int32

// Option levels.
const (
	// OptionLevelID holds the generic id options.
	OptionLevelID OptionLevel = 0
	// OptionLevelIB holds InfiniBand options.
	OptionLevelIB OptionLevel = 1
)

// OptionName names an option within its level.
type OptionName int32

// Options of OptionLevelID.
const (
	// OptionTOS sets the type of service (u8).
	OptionTOS OptionName = 0
	// OptionReuseAddr allows reusing a bound port (int, 0 or 1).
	OptionReuseAddr OptionName = 1
	// OptionAFOnly restricts an IPv6 id to IPv6 (int, 0 or 1).
	OptionAFOnly OptionName = 2
	// OptionAckTimeout sets the QP ACK timeout exponent (u8: 4.096µs·2^n).
	OptionAckTimeout OptionName = 3
)

// Options of OptionLevelIB.
const (
	// OptionIBPath sets the path records of an id (an array of
	// IBPathDataSize-byte struct ibv_path_data).
	OptionIBPath OptionName = 1
)

// IBPathDataSize is sizeof(struct ibv_path_data), the unit of an
// OptionIBPath value.
const IBPathDataSize = 72
