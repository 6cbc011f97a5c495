package uverbs

import (
	"bytes"
	"encoding/binary"
	"errors"
	"syscall"
	"testing"
)

// The tests build every expected image by hand, field by field at the
// offsets of include/uapi/rdma/ib_user_verbs.h (kernel 6.1, x86_64, checked
// with offsetof), in host order with encoding/binary. They never call the
// package's encoders to build an expectation.

func h16(b []byte, off int, v uint16) { binary.NativeEndian.PutUint16(b[off:], v) }
func h32(b []byte, off int, v uint32) { binary.NativeEndian.PutUint32(b[off:], v) }
func h64(b []byte, off int, v uint64) { binary.NativeEndian.PutUint64(b[off:], v) }

// hdr writes struct ib_uverbs_cmd_hdr at b[0:8].
func hdr(b []byte, cmd uint32, inWords, outWords uint16) {
	h32(b, 0, cmd)
	h16(b, 4, inWords)
	h16(b, 6, outWords)
}

const testResp = uintptr(0x00007f12_3456_7800)

// fill returns n bytes of 0xA5 so that bytes an encoder forgets to zero
// show up.
func fill(n int) []byte { return bytes.Repeat([]byte{0xA5}, n) }

func gid(seed byte) (g [16]byte) {
	for i := range g {
		g[i] = seed + byte(i)
	}
	return g
}

type cmdCase struct {
	name string
	cmd  Command
	want func() []byte
}

func cmdCases() []cmdCase {
	ah := AHAttr{DGID: gid(0x10), FlowLabel: 0x12345, SGIDIndex: 3, HopLimit: 64, TrafficClass: 0x20,
		DLID: 0xBEEF, SL: 5, SrcPathBits: 1, StaticRate: 2, IsGlobal: 1, PortNum: 1}
	return []cmdCase{
		{"GET_CONTEXT", &GetContext{DriverOut: 8}, func() []byte {
			b := make([]byte, 16)
			hdr(b, 0, 4, 4) // 16 bytes; response 8 + siw's 8
			h64(b, 8, uint64(testResp))
			return b
		}},
		{"GET_CONTEXT driver in", &GetContext{Driver: []byte{1, 2, 3, 4, 5, 6, 7, 8}}, func() []byte {
			b := make([]byte, 24)
			hdr(b, 0, 6, 2)
			h64(b, 8, uint64(testResp))
			copy(b[16:], []byte{1, 2, 3, 4, 5, 6, 7, 8})
			return b
		}},
		{"QUERY_DEVICE", &QueryDevice{}, func() []byte {
			b := make([]byte, 16)
			hdr(b, 1, 4, 176/4)
			h64(b, 8, uint64(testResp))
			return b
		}},
		{"QUERY_PORT", &QueryPort{Port: 1}, func() []byte {
			b := make([]byte, 24)
			hdr(b, 2, 6, 10)
			h64(b, 8, uint64(testResp))
			b[16] = 1
			return b
		}},
		{"ALLOC_PD", &AllocPD{}, func() []byte {
			b := make([]byte, 16)
			hdr(b, 3, 4, 1)
			h64(b, 8, uint64(testResp))
			return b
		}},
		{"DEALLOC_PD", DeallocPD(0x11223344), func() []byte {
			b := make([]byte, 12)
			hdr(b, 4, 3, 0)
			h32(b, 8, 0x11223344)
			return b
		}},
		{"REG_MR siw", &RegMR{Start: 0x7f0000001000, Length: 65536, HCAVA: 0x7f0000001000, PD: 7,
			Access: AccessLocalWrite | AccessRemoteRead, Driver: []byte{0x5a, 0, 0, 0, 0, 0, 0, 0}, DriverOut: 8}, func() []byte {
			b := make([]byte, 56)
			hdr(b, 9, 14, 5) // 12-byte response + 8 driver bytes
			h64(b, 8, uint64(testResp))
			h64(b, 16, 0x7f0000001000)
			h64(b, 24, 65536)
			h64(b, 32, 0x7f0000001000)
			h32(b, 40, 7)
			h32(b, 44, 5)
			b[48] = 0x5a
			return b
		}},
		{"DEREG_MR", DeregMR(9), func() []byte {
			b := make([]byte, 12)
			hdr(b, 13, 3, 0)
			h32(b, 8, 9)
			return b
		}},
		{"CREATE_COMP_CHANNEL", &CreateCompChannel{}, func() []byte {
			b := make([]byte, 16)
			hdr(b, 17, 4, 1)
			h64(b, 8, uint64(testResp))
			return b
		}},
		{"CREATE_CQ", &CreateCQ{UserHandle: 0xCAFE, CQE: 256, CompVector: 0, CompChannel: 17, DriverOut: 16}, func() []byte {
			b := make([]byte, 40)
			hdr(b, 18, 10, 6) // 8 + 16 response bytes
			h64(b, 8, uint64(testResp))
			h64(b, 16, 0xCAFE)
			h32(b, 24, 256)
			h32(b, 28, 0)
			h32(b, 32, 17)
			return b
		}},
		{"CREATE_CQ no channel", &CreateCQ{UserHandle: 1, CQE: 1, CompChannel: -1}, func() []byte {
			b := make([]byte, 40)
			hdr(b, 18, 10, 2)
			h64(b, 8, uint64(testResp))
			h64(b, 16, 1)
			h32(b, 24, 1)
			h32(b, 32, 0xFFFFFFFF)
			return b
		}},
		{"DESTROY_CQ", &DestroyCQ{Handle: 3}, func() []byte {
			b := make([]byte, 24)
			hdr(b, 20, 6, 2)
			h64(b, 8, uint64(testResp))
			h32(b, 16, 3)
			return b
		}},
		{"REQ_NOTIFY_CQ", &ReqNotifyCQ{Handle: 4}, func() []byte {
			b := make([]byte, 16)
			hdr(b, 23, 4, 0)
			h32(b, 8, 4)
			return b
		}},
		{"REQ_NOTIFY_CQ solicited", &ReqNotifyCQ{Handle: 4, SolicitedOnly: true}, func() []byte {
			b := make([]byte, 16)
			hdr(b, 23, 4, 0)
			h32(b, 8, 4)
			h32(b, 12, 1)
			return b
		}},
		{"CREATE_QP", &CreateQP{UserHandle: 0x1234, PD: 1, SendCQ: 2, RecvCQ: 3, MaxSendWR: 64, MaxRecvWR: 32,
			MaxSendSGE: 1, MaxRecvSGE: 2, MaxInline: 80, SigAll: true, Type: QPTypeRC, DriverOut: 32}, func() []byte {
			b := make([]byte, 64)
			hdr(b, 24, 16, 16) // 32 core + 32 driver response bytes
			h64(b, 8, uint64(testResp))
			h64(b, 16, 0x1234)
			h32(b, 24, 1)
			h32(b, 28, 2)
			h32(b, 32, 3)
			h32(b, 36, 0)
			h32(b, 40, 64)
			h32(b, 44, 32)
			h32(b, 48, 1)
			h32(b, 52, 2)
			h32(b, 56, 80)
			b[60] = 1
			b[61] = 2
			return b
		}},
		{"MODIFY_QP", &ModifyQP{Handle: 5, Mask: QPAttrState | QPAttrAV | QPAttrPathMTU | QPAttrDestQPN |
			QPAttrRQPSN | QPAttrMaxDestRdAtomic | QPAttrMinRNRTimer,
			Attr: QPAttr{State: QPStateRTR, CurState: 1, PathMTU: 3, PathMigState: 2, QKey: 0x01234567, RQPSN: 0xABCDEF,
				SQPSN: 0x123456, DestQPN: 0x11, AccessFlags: 7, AH: ah, PKeyIndex: 2, AltPKeyIndex: 3,
				EnSQDAsyncNotify: 1, MaxRdAtomic: 4, MaxDestRdAtomic: 5, MinRNRTimer: 12, PortNum: 1, Timeout: 14,
				RetryCnt: 7, RNRRetry: 6, AltPortNum: 2, AltTimeout: 9, MaxSendWR: 99}}, func() []byte {
			b := make([]byte, 120)
			hdr(b, 26, 30, 0)
			p := b[8:]
			// dest: ib_uverbs_qp_dest
			g := gid(0x10)
			copy(p[0:16], g[:])
			h32(p, 16, 0x12345)
			h16(p, 20, 0xBEEF)
			p[24], p[25], p[26], p[27] = 3, 64, 0x20, 5
			p[28], p[29], p[30], p[31] = 1, 2, 1, 1
			h32(p, 64, 5)
			h32(p, 68, 1|1<<7|1<<8|1<<20|1<<12|1<<17|1<<15)
			h32(p, 72, 0x01234567)
			h32(p, 76, 0xABCDEF)
			h32(p, 80, 0x123456)
			h32(p, 84, 0x11)
			h32(p, 88, 7)
			h16(p, 92, 2)
			h16(p, 94, 3)
			p[96], p[97], p[98], p[99] = 2, 1, 3, 2
			p[100], p[101], p[102], p[103] = 1, 4, 5, 12
			p[104], p[105], p[106], p[107] = 1, 14, 7, 6
			p[108], p[109] = 2, 9
			return b
		}},
		{"DESTROY_QP", &DestroyQP{Handle: 6}, func() []byte {
			b := make([]byte, 24)
			hdr(b, 27, 6, 1)
			h64(b, 8, uint64(testResp))
			h32(b, 16, 6)
			return b
		}},
		{"POST_SEND doorbell", &PostSend{Handle: 7}, func() []byte {
			b := make([]byte, 32)
			hdr(b, 28, 8, 1)
			h64(b, 8, uint64(testResp))
			h32(b, 16, 7)
			h32(b, 20, 0) // wr_count
			h32(b, 24, 0) // sge_count
			h32(b, 28, 56)
			return b
		}},
		{"CREATE_AH", &CreateAH{UserHandle: 0x99, PD: 2, Attr: ah, DriverOut: 8}, func() []byte {
			b := make([]byte, 64)
			hdr(b, 5, 16, 3) // 4 + 8 response bytes
			h64(b, 8, uint64(testResp))
			h64(b, 16, 0x99)
			h32(b, 24, 2)
			p := b[32:]
			g := gid(0x10)
			copy(p[0:16], g[:])
			h32(p, 16, 0x12345)
			p[20], p[21], p[22] = 3, 64, 0x20
			h16(p, 24, 0xBEEF)
			p[26], p[27], p[28], p[29], p[30] = 5, 1, 2, 1, 1
			return b
		}},
		{"DESTROY_AH", DestroyAH(8), func() []byte {
			b := make([]byte, 12)
			hdr(b, 8, 3, 0)
			h32(b, 8, 8)
			return b
		}},
		{"ATTACH_MCAST", &Mcast{GID: gid(0xE0), QP: 3, MLID: 0xC001}, func() []byte {
			b := make([]byte, 32)
			hdr(b, 30, 8, 0)
			g := gid(0xE0)
			copy(b[8:24], g[:])
			h32(b, 24, 3)
			h16(b, 28, 0xC001)
			return b
		}},
		{"DETACH_MCAST", &Mcast{GID: gid(0xE0), QP: 3, MLID: 0xC001, Detach: true}, func() []byte {
			b := make([]byte, 32)
			hdr(b, 31, 8, 0)
			g := gid(0xE0)
			copy(b[8:24], g[:])
			h32(b, 24, 3)
			h16(b, 28, 0xC001)
			return b
		}},
	}
}

func TestCommandImages(t *testing.T) {
	for _, tc := range cmdCases() {
		t.Run(tc.name, func(t *testing.T) {
			want := tc.want()
			if tc.cmd.Size() != len(want) {
				t.Fatalf("Size %d, want %d", tc.cmd.Size(), len(want))
			}
			buf := fill(1024)
			got, err := tc.cmd.Encode(buf, testResp)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("image\n got  %x\n want %x", got, want)
			}
			h, err := DecodeHeader(got)
			if err != nil || h.Cmd != tc.cmd.Cmd() || int(h.InWords)*4 != len(want) || int(h.OutWords)*4 != tc.cmd.RespLen() {
				t.Fatalf("header %+v (%v): cmd %v, %d bytes, resp %d", h, err, tc.cmd.Cmd(), len(want), tc.cmd.RespLen())
			}
			// One byte short of the command: ErrShortBuffer (ENOSPC).
			if _, err := tc.cmd.Encode(make([]byte, len(want)-1), testResp); !errors.Is(err, ErrShortBuffer) || !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("short buffer: %v", err)
			}
		})
	}
}

func TestCommandDriverDataChecked(t *testing.T) {
	for _, c := range []Command{
		&GetContext{Driver: []byte{1, 2, 3}},
		&RegMR{DriverOut: 6},
		&CreateCQ{Driver: make([]byte, 5)},
		&CreateQP{Driver: make([]byte, 1<<18)},
	} {
		if _, err := c.Encode(make([]byte, 1<<19), testResp); !errors.Is(err, ErrDriverData) || !errors.Is(err, syscall.EINVAL) {
			t.Errorf("%v: %v, want ErrDriverData", c.Cmd(), err)
		}
	}
}

func TestCmdString(t *testing.T) {
	for c, want := range map[Cmd]string{CmdCreateQP: "CREATE_QP", CmdPostSend: "POST_SEND", Cmd(99): "Cmd(99)"} {
		if c.String() != want {
			t.Errorf("%d: %q, want %q", uint32(c), c.String(), want)
		}
	}
}
