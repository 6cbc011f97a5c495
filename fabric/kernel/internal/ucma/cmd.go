package ucma

import (
	"encoding/binary"
	"strconv"
)

// ne is the host byte order, which the ABI uses unless a field is marked
// big-endian.
var ne = binary.NativeEndian

// be is the network byte order of the ABI's big-endian fields.
var be = binary.BigEndian

// Cmd is an rdma_cm command number, the cmd field of the header.
type Cmd uint32

// Command numbers (the anonymous enum of rdma_user_cm.h).
const (
	CmdCreateID         Cmd = 0
	CmdDestroyID        Cmd = 1
	CmdBindIP           Cmd = 2
	CmdResolveIP        Cmd = 3
	CmdResolveRoute     Cmd = 4
	CmdQueryRoute       Cmd = 5
	CmdConnect          Cmd = 6
	CmdListen           Cmd = 7
	CmdAccept           Cmd = 8
	CmdReject           Cmd = 9
	CmdDisconnect       Cmd = 10
	CmdInitQPAttr       Cmd = 11
	CmdGetEvent         Cmd = 12
	CmdGetOption        Cmd = 13 // reserved: the kernel has no handler (ENOSYS)
	CmdSetOption        Cmd = 14
	CmdNotify           Cmd = 15
	CmdJoinIPMcast      Cmd = 16
	CmdLeaveMcast       Cmd = 17
	CmdMigrateID        Cmd = 18
	CmdQuery            Cmd = 19
	CmdBind             Cmd = 20
	CmdResolveAddr      Cmd = 21
	CmdJoinMcast        Cmd = 22
	CmdResolveIBService Cmd = 23 // 2025 kernels; older ones return EINVAL
	CmdWriteCMEvent     Cmd = 24 // 2025 kernels; older ones return EINVAL
)

var cmdNames = [...]string{
	"CREATE_ID", "DESTROY_ID", "BIND_IP", "RESOLVE_IP", "RESOLVE_ROUTE",
	"QUERY_ROUTE", "CONNECT", "LISTEN", "ACCEPT", "REJECT", "DISCONNECT",
	"INIT_QP_ATTR", "GET_EVENT", "GET_OPTION", "SET_OPTION", "NOTIFY",
	"JOIN_IP_MCAST", "LEAVE_MCAST", "MIGRATE_ID", "QUERY", "BIND",
	"RESOLVE_ADDR", "JOIN_MCAST", "RESOLVE_IB_SERVICE", "WRITE_CM_EVENT",
}

// String returns the command's name as in the uapi header without its
// RDMA_USER_CM_CMD_ prefix, e.g. "CONNECT", or "Cmd(N)" if unknown.
func (c Cmd) String() string {
	if int(c) < len(cmdNames) {
		return cmdNames[c]
	}
	return "Cmd(" + strconv.FormatUint(uint64(c), 10) + ")"
}

// HeaderSize is the size of struct rdma_ucm_cmd_hdr.
const HeaderSize = 8

// Payload sizes (the header's in field) of every command.
const (
	InCreateID         = 24
	InDestroyID        = 16
	InBindIP           = 40
	InResolveIP        = 64
	InResolveRoute     = 8
	InQueryRoute       = 16
	InConnect          = 288
	InListen           = 8
	InAccept           = 296
	InReject           = 264
	InDisconnect       = 4
	InInitQPAttr       = 16
	InGetEvent         = 8
	InSetOption        = 24
	InNotify           = 8
	InJoinIPMcast      = 48
	InLeaveMcast       = 16
	InMigrateID        = 16
	InQuery            = 16
	InBind             = 136
	InResolveAddr      = 272
	InJoinMcast        = 152
	InResolveIBService = 88
	InWriteCMEvent     = 320
)

// MaxCommandSize is the largest total size (header plus payload) of any
// command; a buffer this long can hold every encoded command.
const MaxCommandSize = HeaderSize + InWriteCMEvent

// Response sizes (the header's out field) of the commands that have one.
const (
	OutCreateID   = 4   // struct rdma_ucm_create_id_resp {u32 id}
	OutDestroyID  = 4   // {u32 events_reported}
	OutQueryRoute = 208 // QueryRouteResp
	OutInitQPAttr = 144 // QPAttr
	OutGetEvent   = 336 // Event
	OutJoinMcast  = 4   // {u32 mc_id}, for JOIN_IP_MCAST and JOIN_MCAST
	OutLeaveMcast = 4   // {u32 events_reported}
	OutMigrateID  = 4   // {u32 events_reported}
	OutQueryAddr  = 280 // QueryAddrResp, for QueryAddr and QueryGID
	// OutQueryPath is what librdmacm passes for QueryPath: the 8-byte
	// header and room for six 72-byte path records.
	OutQueryPath = QueryPathHeaderSize + 6*PathDataSize
)

// Command is implemented by every request type. The methods take a pointer
// receiver; the request values are plain data and may be reused.
type Command interface {
	// Cmd returns the command number.
	Cmd() Cmd
	// Size returns the total length Encode writes: header plus payload.
	Size() int
	// RespLen returns the response size placed in the header's out field,
	// zero for commands without a response.
	RespLen() int
	// Encode writes the header and payload into b, which must hold at
	// least Size bytes, and returns b[:Size()]. Every reserved byte is
	// zero. resp is the user address the kernel copies the response to;
	// it must stay valid and unmoved until the write(2) returns (see
	// Buffers) and is ignored by commands without a response. Encode does
	// not allocate; it fails only with ErrShortBuffer or an invalid field
	// (an error satisfying errors.Is(err, syscall.EINVAL)).
	Encode(b []byte, resp uintptr) ([]byte, error)
}

// frame checks that b can hold a command with an in-byte payload, zeroes
// the command's bytes, writes the header and returns the command slice.
func frame(b []byte, c Cmd, in, out int) ([]byte, error) {
	n := HeaderSize + in
	if len(b) < n {
		return nil, ErrShortBuffer
	}
	b = b[:n]
	clear(b)
	ne.PutUint32(b[0:], uint32(c))
	ne.PutUint16(b[4:], uint16(in))
	ne.PutUint16(b[6:], uint16(out))
	return b, nil
}

// Header is a decoded struct rdma_ucm_cmd_hdr.
type Header struct {
	Cmd Cmd    // command number
	In  uint16 // payload size
	Out uint16 // response size
}

// DecodeHeader decodes the command header at the start of b, as a fake
// kernel or a test reads what Encode wrote.
func DecodeHeader(b []byte) (Header, error) {
	if len(b) < HeaderSize {
		return Header{}, ErrShortBuffer
	}
	return Header{
		Cmd: Cmd(ne.Uint32(b[0:])),
		In:  ne.Uint16(b[4:]),
		Out: ne.Uint16(b[6:]),
	}, nil
}

// DecodeUint32Resp decodes the 4-byte responses of CREATE_ID (the new id),
// DESTROY_ID, LEAVE_MCAST and MIGRATE_ID (events_reported) and JOIN_*MCAST
// (the multicast id).
func DecodeUint32Resp(b []byte) (uint32, error) {
	if len(b) < 4 {
		return 0, ErrShortBuffer
	}
	return ne.Uint32(b), nil
}
