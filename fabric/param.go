package fabric

import (
	"net/netip"
)

// Special values of ConnParam.ResponderResources and InitiatorDepth: use the
// device maximum (RDMA_MAX_RESP_RES, RDMA_MAX_INIT_DEPTH).
const (
	MaxResponderResources uint8 = 0xFF
	MaxInitiatorDepth     uint8 = 0xFF
)

// ConnParam holds the parameters of a connection request, reply or reject,
// as struct rdma_conn_param.
type ConnParam struct {
	// PrivateData is sent to the peer; its limit depends on the operation
	// and the QP type (see MaxPrivateData).
	PrivateData []byte
	// ResponderResources is the number of RDMA Read/atomic operations the
	// local side accepts from the peer (IRD); 0xFF means the device maximum.
	ResponderResources uint8
	// InitiatorDepth is the number of RDMA Reads the local side may have
	// outstanding to the peer (ORD); 0xFF means the device maximum.
	InitiatorDepth uint8
	// FlowControl says whether hardware flow control is available.
	FlowControl uint8
	// RetryCount is the number of transport retries (ignored on accept).
	RetryCount uint8
	// RNRRetryCount is the number of receiver-not-ready retries.
	RNRRetryCount uint8
	// SRQ says whether the QP uses a shared receive queue (ignored with a QP).
	SRQ uint8
	// QPNum is the local QP number (ignored when the id has a QP).
	QPNum uint32
}

// AHAttr is an address handle: how to reach a UD peer or a multicast group,
// as struct ibv_ah_attr. On the software fabric DGID holds the peer's IP
// address (IPv4 in IPv4-mapped form) and DLID its UDP port.
type AHAttr struct {
	DGID         [16]byte
	FlowLabel    uint32
	SGIDIndex    uint8
	HopLimit     uint8
	TrafficClass uint8
	DLID         uint16
	SL           uint8
	SrcPathBits  uint8
	StaticRate   uint8
	IsGlobal     uint8
	PortNum      uint8
}

// Addr returns the IP address in DGID, unmapping IPv4-mapped addresses.
func (a *AHAttr) Addr() netip.Addr { return netip.AddrFrom16(a.DGID).Unmap() }

// UDParam holds the parameters of an unreliable datagram event, as struct
// rdma_ud_param.
type UDParam struct {
	// PrivateData is the peer's private data (CONNECT_REQUEST, ESTABLISHED).
	PrivateData []byte
	// AH is how to reach the peer or group.
	AH AHAttr
	// QPNum is the remote QP number (MulticastQPNum for groups).
	QPNum uint32
	// QKey is the Q_Key to use (UDPQKey).
	QKey uint32
}
