package uverbs

import (
	"encoding/binary"
	"strconv"
)

// ne is the host byte order, which the ABI uses throughout.
var ne = binary.NativeEndian

// Cmd is a verbs write command number (enum ib_uverbs_write_cmds).
type Cmd uint32

// Command numbers used by the package.
const (
	CmdGetContext        Cmd = 0
	CmdQueryDevice       Cmd = 1
	CmdQueryPort         Cmd = 2
	CmdAllocPD           Cmd = 3
	CmdDeallocPD         Cmd = 4
	CmdCreateAH          Cmd = 5
	CmdDestroyAH         Cmd = 8
	CmdRegMR             Cmd = 9
	CmdDeregMR           Cmd = 13
	CmdCreateCompChannel Cmd = 17
	CmdCreateCQ          Cmd = 18
	CmdDestroyCQ         Cmd = 20
	CmdReqNotifyCQ       Cmd = 23
	CmdCreateQP          Cmd = 24
	CmdModifyQP          Cmd = 26
	CmdDestroyQP         Cmd = 27
	CmdPostSend          Cmd = 28
	CmdAttachMcast       Cmd = 30
	CmdDetachMcast       Cmd = 31
)

var cmdNames = map[Cmd]string{
	CmdGetContext: "GET_CONTEXT", CmdQueryDevice: "QUERY_DEVICE", CmdQueryPort: "QUERY_PORT",
	CmdAllocPD: "ALLOC_PD", CmdDeallocPD: "DEALLOC_PD", CmdCreateAH: "CREATE_AH",
	CmdDestroyAH: "DESTROY_AH", CmdRegMR: "REG_MR", CmdDeregMR: "DEREG_MR",
	CmdCreateCompChannel: "CREATE_COMP_CHANNEL", CmdCreateCQ: "CREATE_CQ",
	CmdDestroyCQ: "DESTROY_CQ", CmdReqNotifyCQ: "REQ_NOTIFY_CQ", CmdCreateQP: "CREATE_QP",
	CmdModifyQP: "MODIFY_QP", CmdDestroyQP: "DESTROY_QP", CmdPostSend: "POST_SEND",
	CmdAttachMcast: "ATTACH_MCAST", CmdDetachMcast: "DETACH_MCAST",
}

// String returns the command's name without its IB_USER_VERBS_CMD_ prefix,
// e.g. "CREATE_QP", or "Cmd(N)".
func (c Cmd) String() string {
	if n, ok := cmdNames[c]; ok {
		return n
	}
	return "Cmd(" + strconv.FormatUint(uint64(c), 10) + ")"
}

// HeaderSize is the size of struct ib_uverbs_cmd_hdr.
const HeaderSize = 8

// maxWords is the largest in_words or out_words the header can carry.
const maxWords = 0xFFFF

// Command is implemented by every request type. The request values are
// plain data and may be reused.
type Command interface {
	// Cmd returns the command number.
	Cmd() Cmd
	// Size returns the total length Encode writes: header, payload and
	// driver request bytes.
	Size() int
	// RespLen returns the response size in the header's out_words (core
	// response plus the driver's), zero for commands without a response.
	RespLen() int
	// Encode writes the command into b, which must hold at least Size
	// bytes, and returns b[:Size()]. resp is the user address the kernel
	// copies the response to; it must stay valid and unmoved until the
	// write(2) returns, and is ignored by commands without a response.
	// Encode does not allocate; it fails only with ErrShortBuffer or
	// ErrDriverData.
	Encode(b []byte, resp uintptr) ([]byte, error)
}

// frame checks sizes, zeroes the command's bytes, writes the header and the
// driver request bytes after a core payload of core bytes, and returns the
// whole command and its core payload. out is the response length.
func frame(b []byte, c Cmd, core int, driver []byte, out int) (msg, payload []byte, err error) {
	n := HeaderSize + core + len(driver)
	if len(driver)%4 != 0 || out%4 != 0 || n/4 > maxWords || out/4 > maxWords {
		return nil, nil, ErrDriverData
	}
	if len(b) < n {
		return nil, nil, ErrShortBuffer
	}
	b = b[:n]
	clear(b[:HeaderSize+core])
	ne.PutUint32(b[0:], uint32(c))
	ne.PutUint16(b[4:], uint16(n/4))
	ne.PutUint16(b[6:], uint16(out/4))
	copy(b[HeaderSize+core:], driver)
	return b, b[HeaderSize : HeaderSize+core], nil
}

// Header is a decoded struct ib_uverbs_cmd_hdr.
type Header struct {
	Cmd      Cmd
	InWords  uint16 // whole write, in 32-bit words
	OutWords uint16 // response, in 32-bit words
}

// DecodeHeader decodes the header at the start of b, as a fake kernel or a
// test reads what Encode wrote.
func DecodeHeader(b []byte) (Header, error) {
	if len(b) < HeaderSize {
		return Header{}, ErrShortBuffer
	}
	return Header{Cmd: Cmd(ne.Uint32(b[0:])), InWords: ne.Uint16(b[4:]), OutWords: ne.Uint16(b[6:])}, nil
}

// DecodeUint32Resp decodes the first u32 of a response: the handle of
// ALLOC_PD and CREATE_AH, the fd of CREATE_COMP_CHANNEL, events_reported of
// DESTROY_QP, bad_wr of POST_SEND.
func DecodeUint32Resp(b []byte) (uint32, error) {
	if len(b) < 4 {
		return 0, ErrShortBuffer
	}
	return ne.Uint32(b), nil
}

// handleCmd is a command whose payload is one u32 handle and no response:
// DEALLOC_PD, DEREG_MR, DESTROY_AH.
type handleCmd struct {
	c      Cmd
	handle uint32
}

func (h *handleCmd) Size() int    { return HeaderSize + 4 }
func (h *handleCmd) RespLen() int { return 0 }
func (h *handleCmd) Cmd() Cmd     { return h.c }
func (h *handleCmd) Encode(b []byte, _ uintptr) ([]byte, error) {
	msg, p, err := frame(b, h.c, 4, nil, 0)
	if err != nil {
		return nil, err
	}
	ne.PutUint32(p[0:], h.handle)
	return msg, nil
}
