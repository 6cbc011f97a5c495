package id

import (
	"github.com/cmrt/cmrt/fabric"
	"github.com/cmrt/cmrt/id/journal"
)

// The names below are declared in package fabric (the vocabulary fabrics
// and ids share) or id/journal (the state model) and re-declared here, so
// that a program types id.PSTCP, id.EventEstablished or id.StateListen and
// imports nothing else. Each is the same type or constant as the original.

// PortSpace is fabric.PortSpace: the semantics of an id, as enum rdma_port_space.
type PortSpace = fabric.PortSpace

// The port spaces (RDMA_PS_*).
const (
	PSIPoIB = fabric.PSIPoIB
	PSTCP   = fabric.PSTCP
	PSUDP   = fabric.PSUDP
	PSIB    = fabric.PSIB
)

// QPType is fabric.QPType: the transport service of an id's QP, as enum ibv_qp_type.
type QPType = fabric.QPType

// The QP types an id can have (IBV_QPT_RC, IBV_QPT_UD).
const (
	RC = fabric.RC
	UD = fabric.UD
)

// EventType is fabric.EventType: the type of a CM event, as enum rdma_cm_event_type.
type EventType = fabric.EventType

// The event types (RDMA_CM_EVENT_*).
const (
	EventAddrResolved     = fabric.EventAddrResolved
	EventAddrError        = fabric.EventAddrError
	EventRouteResolved    = fabric.EventRouteResolved
	EventRouteError       = fabric.EventRouteError
	EventConnectRequest   = fabric.EventConnectRequest
	EventConnectResponse  = fabric.EventConnectResponse
	EventConnectError     = fabric.EventConnectError
	EventUnreachable      = fabric.EventUnreachable
	EventRejected         = fabric.EventRejected
	EventEstablished      = fabric.EventEstablished
	EventDisconnected     = fabric.EventDisconnected
	EventDeviceRemoval    = fabric.EventDeviceRemoval
	EventMulticastJoin    = fabric.EventMulticastJoin
	EventMulticastError   = fabric.EventMulticastError
	EventAddrChange       = fabric.EventAddrChange
	EventTimewaitExit     = fabric.EventTimewaitExit
	EventAddrInfoResolved = fabric.EventAddrInfoResolved
	EventAddrInfoError    = fabric.EventAddrInfoError
	EventUser             = fabric.EventUser
)

// ConnParam is fabric.ConnParam: the parameters of a connection request, reply or reject, as struct rdma_conn_param.
type ConnParam = fabric.ConnParam

// Special values of ConnParam.ResponderResources and InitiatorDepth: the device maximum (RDMA_MAX_RESP_RES, RDMA_MAX_INIT_DEPTH).
const (
	MaxResponderResources = fabric.MaxResponderResources
	MaxInitiatorDepth     = fabric.MaxInitiatorDepth
)

// UDParam is fabric.UDParam: the parameters of an unreliable datagram event, as struct rdma_ud_param.
type UDParam = fabric.UDParam

// AHAttr is fabric.AHAttr: an address handle, as struct ibv_ah_attr.
type AHAttr = fabric.AHAttr

// Private-data limits per operation, as rdma_connect(3) and rdma_accept(3) give them: more is EINVAL.
const (
	MaxPrivateDataREQ     = fabric.MaxPrivateDataREQ
	MaxPrivateDataREP     = fabric.MaxPrivateDataREP
	MaxPrivateDataREJ     = fabric.MaxPrivateDataREJ
	MaxPrivateDataSIDRREQ = fabric.MaxPrivateDataSIDRREQ
	MaxPrivateDataSIDRREP = fabric.MaxPrivateDataSIDRREP
)

// UDPQKey is the Q_Key of UD ids and multicast groups (RDMA_UDP_QKEY).
const UDPQKey = fabric.UDPQKey

// OptionLevel is fabric.OptionLevel: the level of an option, as in rdma_set_option(3).
type OptionLevel = fabric.OptionLevel

// OptionName is fabric.OptionName: an option within its level.
type OptionName = fabric.OptionName

// Option levels and names (RDMA_OPTION_*).
const (
	OptionLevelID    = fabric.OptionLevelID
	OptionLevelIB    = fabric.OptionLevelIB
	OptionTOS        = fabric.OptionTOS
	OptionReuseAddr  = fabric.OptionReuseAddr
	OptionAFOnly     = fabric.OptionAFOnly
	OptionAckTimeout = fabric.OptionAckTimeout
	OptionIBPath     = fabric.OptionIBPath
)

// AsyncEvent is fabric.AsyncEvent: a verbs asynchronous event type, the argument of Notify.
type AsyncEvent = fabric.AsyncEvent

// AsyncCommEst is IBV_EVENT_COMM_EST, what Notify reports to complete a
// connection whose RTU was lost.
const AsyncCommEst = fabric.AsyncCommEst

// State is journal.State: the state of an id in the rdma_cm state diagram.
type State = journal.State

// The states of an id.
const (
	StateIdle            = journal.StateIdle
	StateAddrBound       = journal.StateAddrBound
	StateAddrQuery       = journal.StateAddrQuery
	StateAddrResolved    = journal.StateAddrResolved
	StateRouteQuery      = journal.StateRouteQuery
	StateRouteResolved   = journal.StateRouteResolved
	StateListen          = journal.StateListen
	StateConnect         = journal.StateConnect
	StateConnectResponse = journal.StateConnectResponse
	StateConnectRequest  = journal.StateConnectRequest
	StateAccept          = journal.StateAccept
	StateEstablished     = journal.StateEstablished
	StateDisconnected    = journal.StateDisconnected
	StateFailed          = journal.StateFailed
	StateDeviceRemoval   = journal.StateDeviceRemoval
	StateCanceled        = journal.StateCanceled
	StateDestroyed       = journal.StateDestroyed
)

// PD is fabric.PD: a protection domain, as struct ibv_pd.
type PD = fabric.PD

// MR is fabric.MR: a registered memory region, as struct ibv_mr.
type MR = fabric.MR

// Access is fabric.Access: what a memory region may be used for, as enum ibv_access_flags.
type Access = fabric.Access

// Access flags (IBV_ACCESS_*).
const (
	AccessLocalWrite  = fabric.AccessLocalWrite
	AccessRemoteWrite = fabric.AccessRemoteWrite
	AccessRemoteRead  = fabric.AccessRemoteRead
)

// QP is fabric.QP: a queue pair, as struct ibv_qp.
type QP = fabric.QP

// QPCap is fabric.QPCap: the sizes of a queue pair, as struct ibv_qp_cap.
type QPCap = fabric.QPCap

// QPInitAttr is fabric.QPInitAttr: the description of a queue pair, as struct ibv_qp_init_attr.
type QPInitAttr = fabric.QPInitAttr

// CQ is fabric.CQ: a completion queue with its completion channel.
type CQ = fabric.CQ

// SharedCQ is fabric.SharedCQ: a completion queue made apart from any QP
// (ID.CreateCQ), which QPs share through QPInitAttr.SendCQ and RecvCQ.
type SharedCQ = fabric.SharedCQ

// SendFlags is fabric.SendFlags: what modifies a send work request, as enum ibv_send_flags.
type SendFlags = fabric.SendFlags

// Send flags (IBV_SEND_*).
const (
	SendSignaled  = fabric.SendSignaled
	SendSolicited = fabric.SendSolicited
	SendInline    = fabric.SendInline
)

// SendWR is fabric.SendWR: a send-queue work request, as struct
// ibv_send_wr, for QP.PostSend.
type SendWR = fabric.SendWR

// RecvWR is fabric.RecvWR: a receive-queue work request, as struct
// ibv_recv_wr, for QP.PostRecv.
type RecvWR = fabric.RecvWR

// WROpcode is fabric.WROpcode: the operation of a send work request, as
// enum ibv_wr_opcode.
type WROpcode = fabric.WROpcode

// Send work request opcodes (IBV_WR_*).
const (
	WRSend         = fabric.WRSend
	WRWrite        = fabric.WRWrite
	WRRead         = fabric.WRRead
	WRSendWithInv  = fabric.WRSendWithInv
	WRSendWithImm  = fabric.WRSendWithImm
	WRWriteWithImm = fabric.WRWriteWithImm
)

// WC is fabric.WC: a work completion, as struct ibv_wc.
type WC = fabric.WC

// WCStatus is fabric.WCStatus: the status of a work completion, as enum ibv_wc_status.
type WCStatus = fabric.WCStatus

// Work completion statuses (IBV_WC_*).
const (
	WCSuccess        = fabric.WCSuccess
	WCLocLenErr      = fabric.WCLocLenErr
	WCLocProtErr     = fabric.WCLocProtErr
	WCWRFlushErr     = fabric.WCWRFlushErr
	WCRemInvReqErr   = fabric.WCRemInvReqErr
	WCRemAccessErr   = fabric.WCRemAccessErr
	WCRemOpErr       = fabric.WCRemOpErr
	WCRetryExcErr    = fabric.WCRetryExcErr
	WCRNRRetryExcErr = fabric.WCRNRRetryExcErr
	WCGeneralErr     = fabric.WCGeneralErr
)

// WCOpcode is fabric.WCOpcode: the operation a completion reports, as enum ibv_wc_opcode.
type WCOpcode = fabric.WCOpcode

// Work completion opcodes (IBV_WC_*).
const (
	WCSend            = fabric.WCSend
	WCRDMAWrite       = fabric.WCRDMAWrite
	WCRDMARead        = fabric.WCRDMARead
	WCRecv            = fabric.WCRecv
	WCRecvRDMAWithImm = fabric.WCRecvRDMAWithImm
)

// ErrClosed is fabric.ErrClosed: wrapped, with EBADF, by a call that was
// waiting for an event when the channel it waited on was closed
// (channel.GetEvent), and by a synchronous id's blocking call when the id
// is destroyed from another goroutine.
var ErrClosed = fabric.ErrClosed
