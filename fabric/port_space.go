package fabric

import "fmt"

// PortSpace selects the semantics of an id, as librdmacm's enum rdma_port_space.
type PortSpace uint16

// The port spaces librdmacm supports.
const (
	// PSIPoIB ids behave as unreliable datagram ids.
	PSIPoIB PortSpace = 0x0002
	// PSTCP ids are reliable, connection-oriented and message based.
	PSTCP PortSpace = 0x0106
	// PSUDP ids are unreliable, connectionless datagram and multicast ids.
	PSUDP PortSpace = 0x0111
	// PSIB ids may use any service: reliable connected or unreliable datagram.
	PSIB PortSpace = 0x013F
)

// String returns the librdmacm name of the port space.
func (ps PortSpace) String() string {
	switch ps {
	case PSIPoIB:
		return "RDMA_PS_IPOIB"
	case PSTCP:
		return "RDMA_PS_TCP"
	case PSUDP:
		return "RDMA_PS_UDP"
	case PSIB:
		return "RDMA_PS_IB"
	}
	return fmt.Sprintf("RDMA_PS(%#x)", uint16(ps))
}

// Valid reports whether ps is one of the four port spaces.
func (ps PortSpace) Valid() bool {
	switch ps {
	case PSIPoIB, PSTCP, PSUDP, PSIB:
		return true
	}
	return false
}

// ServiceID returns the IB service id of a port in this port space:
// (ps << 16) | port.
func (ps PortSpace) ServiceID(port uint16) uint64 { return uint64(ps)<<16 | uint64(port) }

// Masks of the IB service id fields.
const (
	ServiceIDPSMask   uint64 = 0xFFFFFFFFFFFF0000
	ServiceIDPortMask uint64 = 0xFFFF
)

// QPType is the transport service of an id's queue pair, numbered as
// enum ibv_qp_type.
type QPType uint8

// The QP types an id can have.
const (
	// RC is reliable connected.
	RC QPType = 2
	// UD is unreliable datagram.
	UD QPType = 4
)

// String returns "RC", "UD" or a number.
func (t QPType) String() string {
	switch t {
	case RC:
		return "RC"
	case UD:
		return "UD"
	}
	return fmt.Sprintf("QPType(%d)", uint8(t))
}

// DefaultQPType returns the QP type rdma_create_id picks for ps: UD for
// PSIPoIB and PSUDP, RC otherwise.
func (ps PortSpace) DefaultQPType() QPType {
	if ps == PSIPoIB || ps == PSUDP {
		return UD
	}
	return RC
}

// UDPQKey is the Q_Key of UD ids and multicast groups (RDMA_UDP_QKEY).
const UDPQKey uint32 = 0x01234567

// MulticastQPNum is the destination QP number of multicast sends.
const MulticastQPNum uint32 = 0xFFFFFF
