package ucma

import (
	"errors"
	"syscall"
	"testing"

	"github.com/cmrt/cmrt/fabric"
)

// cmdCase is one command with its hand-built expected image.
type cmdCase struct {
	name  string
	cmd   Command
	total int // total write length from the ABI table
	in    int // header in
	out   int // header out
	want  func() []byte
}

func cmdCases(t testing.TB) []cmdCase {
	a4, a6, all := mustIP(t, ap4), mustIP(t, ap6), mustIP(t, ap6ll)
	ib := IBSockaddr(testIB)

	connParam := ConnParam{
		QPNum: 0x00abcdef, QKey: 0x01234567, SRQ: 1, ResponderResources: 4,
		InitiatorDepth: 3, FlowControl: 1, RetryCount: 7, RNRRetryCount: 6, Valid: 1,
	}
	if err := connParam.SetPrivateData(pattern(56, 1)); err != nil {
		t.Fatal(err)
	}
	// putConnParam writes the same conn_param by hand at b[0:272].
	putConnParam := func(b []byte) {
		h32(b, 0, 0x00abcdef)       // qp_num
		h32(b, 4, 0x01234567)       // qkey
		copy(b[8:], pattern(56, 1)) // private_data[256], 56 used
		b[264] = 56                 // private_data_len
		b[265] = 1                  // srq
		b[266] = 4                  // responder_resources
		b[267] = 3                  // initiator_depth
		b[268] = 1                  // flow_control
		b[269] = 7                  // retry_count
		b[270] = 6                  // rnr_retry_count
		b[271] = 1                  // valid
	}
	reject := &Reject{ID: 9, Reason: RejectVendorOptionNotSupported}
	if err := reject.SetPrivateData([]byte("connection rejected")); err != nil {
		t.Fatal(err)
	}

	return []cmdCase{
		{"CREATE_ID", &CreateID{UID: 0x1122334455667788, PS: fabric.PSIB, QPType: fabric.UD}, 32, 24, 4, func() []byte {
			b := make([]byte, 32)
			hdr(b, 0, 24, 4)
			p := b[8:]
			h64(p, 0, 0x1122334455667788) // 0 uid
			h64(p, 8, uint64(testResp))   // 8 response
			h16(p, 16, 0x013F)            // 16 ps = RDMA_PS_IB
			p[18] = 4                     // 18 qp_type = IB_QPT_UD; 19..23 reserved
			return b
		}},
		{"DESTROY_ID", &DestroyID{ID: 0x01020304}, 24, 16, 4, func() []byte {
			b := make([]byte, 24)
			hdr(b, 1, 16, 4)
			h64(b[8:], 0, uint64(testResp)) // 0 response
			h32(b[8:], 8, 0x01020304)       // 8 id; 12 reserved
			return b
		}},
		{"BIND_IP/v4", &BindIP{ID: 17, Addr: a4}, 48, 40, 0, func() []byte {
			b := make([]byte, 48)
			hdr(b, 2, 40, 0)
			p := b[8:]
			// 0 response: unused, zero
			sockIn4(p[8:36]) // 8 sockaddr_in6 slot holding a sockaddr_in
			h32(p, 36, 17)   // 36 id
			return b
		}},
		{"BIND_IP/v6", &BindIP{ID: 18, Addr: all}, 48, 40, 0, func() []byte {
			b := make([]byte, 48)
			hdr(b, 2, 40, 0)
			sockIn6LL(b[8+8:]) // 8 sockaddr_in6
			h32(b[8:], 36, 18) // 36 id
			return b
		}},
		{"RESOLVE_IP", &ResolveIP{ID: 21, TimeoutMs: 2000, Src: a4, Dst: a6}, 72, 64, 0, func() []byte {
			b := make([]byte, 72)
			hdr(b, 3, 64, 0)
			p := b[8:]
			sockIn4(p[0:28])  // 0 src
			sockIn6(p[28:56]) // 28 dst
			h32(p, 56, 21)    // 56 id
			h32(p, 60, 2000)  // 60 timeout_ms
			return b
		}},
		{"RESOLVE_IP/no-src", &ResolveIP{ID: 22, TimeoutMs: 500, Dst: a4}, 72, 64, 0, func() []byte {
			b := make([]byte, 72)
			hdr(b, 3, 64, 0)
			p := b[8:]
			// 0 src: all zero
			sockIn4(p[28:56]) // 28 dst
			h32(p, 56, 22)
			h32(p, 60, 500)
			return b
		}},
		{"RESOLVE_ROUTE", &ResolveRoute{ID: 5, TimeoutMs: 1500}, 16, 8, 0, func() []byte {
			b := make([]byte, 16)
			hdr(b, 4, 8, 0)
			h32(b[8:], 0, 5)    // 0 id
			h32(b[8:], 4, 1500) // 4 timeout_ms
			return b
		}},
		{"QUERY_ROUTE", &QueryRoute{ID: 6}, 24, 16, 208, func() []byte {
			b := make([]byte, 24)
			hdr(b, 5, 16, 208)
			h64(b[8:], 0, uint64(testResp)) // 0 response
			h32(b[8:], 8, 6)                // 8 id; 12 option 0
			return b
		}},
		{"CONNECT", &Connect{ID: 0x0badcafe, Param: connParam, ECE: ECE{VendorID: 0x15b3, AttrMod: 0x10}}, 296, 288, 0, func() []byte {
			b := make([]byte, 296)
			hdr(b, 6, 288, 0)
			p := b[8:]
			putConnParam(p[0:272])  // 0 conn_param
			h32(p, 272, 0x0badcafe) // 272 id; 276 reserved
			h32(p, 280, 0x15b3)     // 280 ece.vendor_id
			h32(p, 284, 0x10)       // 284 ece.attr_mod
			return b
		}},
		{"LISTEN", &Listen{ID: 7, Backlog: 1024}, 16, 8, 0, func() []byte {
			b := make([]byte, 16)
			hdr(b, 7, 8, 0)
			h32(b[8:], 0, 7)    // 0 id
			h32(b[8:], 4, 1024) // 4 backlog
			return b
		}},
		{"ACCEPT", &Accept{UID: 0xfeedface12345678, ID: 8, Param: connParam, ECE: ECE{VendorID: 1, AttrMod: 2}}, 304, 296, 0, func() []byte {
			b := make([]byte, 304)
			hdr(b, 8, 296, 0)
			p := b[8:]
			h64(p, 0, 0xfeedface12345678) // 0 uid
			putConnParam(p[8:280])        // 8 conn_param
			h32(p, 280, 8)                // 280 id; 284 reserved
			h32(p, 288, 1)                // 288 ece.vendor_id
			h32(p, 292, 2)                // 292 ece.attr_mod
			return b
		}},
		{"REJECT", reject, 272, 264, 0, func() []byte {
			b := make([]byte, 272)
			hdr(b, 9, 264, 0)
			p := b[8:]
			h32(p, 0, 9)                       // 0 id
			p[4] = 19                          // 4 private_data_len
			p[5] = 35                          // 5 reason; 6..7 reserved
			copy(p[8:], "connection rejected") // 8 private_data[256]
			return b
		}},
		{"DISCONNECT", &Disconnect{ID: 0xdeadbeef}, 12, 4, 0, func() []byte {
			b := make([]byte, 12)
			hdr(b, 10, 4, 0)
			h32(b[8:], 0, 0xdeadbeef) // 0 id
			return b
		}},
		{"INIT_QP_ATTR", &InitQPAttr{ID: 11, QPState: QPStateRTR}, 24, 16, 144, func() []byte {
			b := make([]byte, 24)
			hdr(b, 11, 16, 144)
			h64(b[8:], 0, uint64(testResp)) // 0 response
			h32(b[8:], 8, 11)               // 8 id
			h32(b[8:], 12, 2)               // 12 qp_state = IB_QPS_RTR
			return b
		}},
		{"GET_EVENT", &GetEvent{}, 16, 8, 336, func() []byte {
			b := make([]byte, 16)
			hdr(b, 12, 8, 336)
			h64(b[8:], 0, uint64(testResp)) // 0 response
			return b
		}},
		{"SET_OPTION", &SetOption{ID: 14, Level: fabric.OptionLevelID, Name: fabric.OptionAckTimeout, Val: 0x7f0000001000, Len: 1}, 32, 24, 0, func() []byte {
			b := make([]byte, 32)
			hdr(b, 14, 24, 0)
			p := b[8:]
			h64(p, 0, 0x7f0000001000) // 0 optval
			h32(p, 8, 14)             // 8 id
			h32(p, 12, 0)             // 12 level RDMA_OPTION_ID
			h32(p, 16, 3)             // 16 optname ACK_TIMEOUT
			h32(p, 20, 1)             // 20 optlen
			return b
		}},
		{"NOTIFY", &Notify{ID: 15, Event: 9}, 16, 8, 0, func() []byte {
			b := make([]byte, 16)
			hdr(b, 15, 8, 0)
			h32(b[8:], 0, 15) // 0 id
			h32(b[8:], 4, 9)  // 4 event
			return b
		}},
		{"JOIN_IP_MCAST", &JoinIPMcast{UID: 0xabcdef, ID: 16, Addr: a6}, 56, 48, 4, func() []byte {
			b := make([]byte, 56)
			hdr(b, 16, 48, 4)
			p := b[8:]
			h64(p, 0, uint64(testResp)) // 0 response
			h64(p, 8, 0xabcdef)         // 8 uid
			sockIn6(p[16:44])           // 16 sockaddr_in6
			h32(p, 44, 16)              // 44 id
			return b
		}},
		{"LEAVE_MCAST", &LeaveMcast{ID: 0x44}, 24, 16, 4, func() []byte {
			b := make([]byte, 24)
			hdr(b, 17, 16, 4)
			h64(b[8:], 0, uint64(testResp)) // 0 response
			h32(b[8:], 8, 0x44)             // 8 id (mc handle); 12 reserved
			return b
		}},
		{"MIGRATE_ID", &MigrateID{ID: 18, OldFD: 42}, 24, 16, 4, func() []byte {
			b := make([]byte, 24)
			hdr(b, 18, 16, 4)
			h64(b[8:], 0, uint64(testResp)) // 0 response
			h32(b[8:], 8, 18)               // 8 id
			h32(b[8:], 12, 42)              // 12 old fd
			return b
		}},
		{"QUERY/ADDR", &Query{ID: 19, Option: QueryAddr}, 24, 16, 280, func() []byte {
			b := make([]byte, 24)
			hdr(b, 19, 16, 280)
			h64(b[8:], 0, uint64(testResp)) // 0 response
			h32(b[8:], 8, 19)               // 8 id
			h32(b[8:], 12, 0)               // 12 option ADDR
			return b
		}},
		{"QUERY/PATH", &Query{ID: 19, Option: QueryPath}, 24, 16, 440, func() []byte {
			b := make([]byte, 24)
			hdr(b, 19, 16, 440) // librdmacm's out: 8 + 6*72
			h64(b[8:], 0, uint64(testResp))
			h32(b[8:], 8, 19)
			h32(b[8:], 12, 1) // option PATH
			return b
		}},
		{"QUERY/GID", &Query{ID: 19, Option: QueryGID}, 24, 16, 280, func() []byte {
			b := make([]byte, 24)
			hdr(b, 19, 16, 280)
			h64(b[8:], 0, uint64(testResp))
			h32(b[8:], 8, 19)
			h32(b[8:], 12, 2) // option GID
			return b
		}},
		{"QUERY/PATH-out", &Query{ID: 1, Option: QueryPath, Out: 8 + 2*72}, 24, 16, 152, func() []byte {
			b := make([]byte, 24)
			hdr(b, 19, 16, 152)
			h64(b[8:], 0, uint64(testResp))
			h32(b[8:], 8, 1)
			h32(b[8:], 12, 1)
			return b
		}},
		{"BIND/v4", &Bind{ID: 20, Addr: a4}, 144, 136, 0, func() []byte {
			b := make([]byte, 144)
			hdr(b, 20, 136, 0)
			p := b[8:]
			h32(p, 0, 20)     // 0 id
			h16(p, 4, 16)     // 4 addr_size; 6 reserved
			sockIn4(p[8:136]) // 8 sockaddr_storage
			return b
		}},
		{"BIND/ib", &Bind{ID: 20, Addr: ib}, 144, 136, 0, func() []byte {
			b := make([]byte, 144)
			hdr(b, 20, 136, 0)
			p := b[8:]
			h32(p, 0, 20)
			h16(p, 4, 48) // addr_size = sizeof(sockaddr_ib)
			sockIB(p[8:136])
			return b
		}},
		{"RESOLVE_ADDR", &ResolveAddr{ID: 21, TimeoutMs: 2000, Src: a6, Dst: ib}, 280, 272, 0, func() []byte {
			b := make([]byte, 280)
			hdr(b, 21, 272, 0)
			p := b[8:]
			h32(p, 0, 21)      // 0 id
			h32(p, 4, 2000)    // 4 timeout_ms
			h16(p, 8, 28)      // 8 src_size
			h16(p, 10, 48)     // 10 dst_size; 12 reserved
			sockIn6(p[16:144]) // 16 src
			sockIB(p[144:272]) // 144 dst
			return b
		}},
		{"RESOLVE_ADDR/no-src", &ResolveAddr{ID: 21, TimeoutMs: 100, Dst: a4}, 280, 272, 0, func() []byte {
			b := make([]byte, 280)
			hdr(b, 21, 272, 0)
			p := b[8:]
			h32(p, 0, 21)
			h32(p, 4, 100)
			h16(p, 8, 0)   // src_size 0: no source
			h16(p, 10, 16) // dst_size
			sockIn4(p[144:272])
			return b
		}},
		{"JOIN_MCAST", &JoinMcast{UID: 0x77, ID: 22, Addr: ib, Flags: JoinSendOnlyFullMember}, 160, 152, 4, func() []byte {
			b := make([]byte, 160)
			hdr(b, 22, 152, 4)
			p := b[8:]
			h64(p, 0, uint64(testResp)) // 0 response
			h64(p, 8, 0x77)             // 8 uid
			h32(p, 16, 22)              // 16 id
			h16(p, 20, 48)              // 20 addr_size
			h16(p, 22, 1)               // 22 join_flags SENDONLY_FULLMEMBER
			sockIB(p[24:152])           // 24 sockaddr_storage
			return b
		}},
		{"RESOLVE_IB_SERVICE", &ResolveIBService{ID: 23, ServiceID: 0x1000000000000001, Name: "cmrt.svc", Flags: IBServiceByID | IBServiceByName}, 96, 88, 0, func() []byte {
			b := make([]byte, 96)
			hdr(b, 23, 88, 0)
			p := b[8:]
			h32(p, 0, 23)                 // 0 id; 4 reserved
			h64(p, 8, 0x1000000000000001) // 8 service_id
			copy(p[16:80], "cmrt.svc")    // 16 service_name[64]
			h32(p, 80, 3)                 // 80 flags ID|NAME; 84 reserved
			return b
		}},
		{"WRITE_CM_EVENT", &WriteCMEvent{ID: 24, Event: fabric.EventUser, Status: -5, Arg: 0x0102030405060708}, 328, 320, 0, func() []byte {
			b := make([]byte, 328)
			hdr(b, 24, 320, 0)
			p := b[8:]
			h32(p, 0, 24)                  // 0 id; 4 reserved
			h32(p, 8, 18)                  // 8 event USER
			h32(p, 12, 0xfffffffb)         // 12 status -5
			h64(p, 16, 0x0102030405060708) // 16 param.arg
			return b
		}},
	}
}

func TestEncodeCommands(t *testing.T) {
	for _, tc := range cmdCases(t) {
		t.Run(tc.name, func(t *testing.T) {
			want := tc.want()
			if len(want) != tc.total {
				t.Fatalf("test bug: hand-built image is %d bytes, table says %d", len(want), tc.total)
			}
			buf := fill(MaxCommandSize + 16) // garbage, to catch unzeroed reserved bytes
			got, err := tc.cmd.Encode(buf, testResp)
			if err != nil {
				t.Fatalf("Encode: %v", err)
			}
			if len(got) != tc.total || tc.cmd.Size() != tc.total {
				t.Errorf("len %d, Size %d, want %d", len(got), tc.cmd.Size(), tc.total)
			}
			if &got[0] != &buf[0] {
				t.Errorf("Encode did not write into the caller's buffer")
			}
			h, err := DecodeHeader(got)
			if err != nil {
				t.Fatal(err)
			}
			if h.Cmd != tc.cmd.Cmd() || int(h.In) != tc.in || int(h.Out) != tc.out || tc.cmd.RespLen() != tc.out {
				t.Errorf("header %+v, RespLen %d; want cmd %v in %d out %d", h, tc.cmd.RespLen(), tc.cmd.Cmd(), tc.in, tc.out)
			}
			diff(t, tc.name, got, want)
			if buf[tc.total] != 0xA5 {
				t.Errorf("Encode wrote past its %d bytes", tc.total)
			}

			// One byte short must fail without writing.
			short := fill(tc.total - 1)
			if _, err := tc.cmd.Encode(short, testResp); !errors.Is(err, ErrShortBuffer) || !errors.Is(err, syscall.ENOSPC) {
				t.Errorf("Encode into %d bytes: err %v, want ErrShortBuffer", tc.total-1, err)
			}
		})
	}
}

func TestCommandNumbers(t *testing.T) {
	want := map[Cmd]uint32{
		CmdCreateID: 0, CmdDestroyID: 1, CmdBindIP: 2, CmdResolveIP: 3, CmdResolveRoute: 4,
		CmdQueryRoute: 5, CmdConnect: 6, CmdListen: 7, CmdAccept: 8, CmdReject: 9,
		CmdDisconnect: 10, CmdInitQPAttr: 11, CmdGetEvent: 12, CmdGetOption: 13,
		CmdSetOption: 14, CmdNotify: 15, CmdJoinIPMcast: 16, CmdLeaveMcast: 17,
		CmdMigrateID: 18, CmdQuery: 19, CmdBind: 20, CmdResolveAddr: 21, CmdJoinMcast: 22,
		CmdResolveIBService: 23, CmdWriteCMEvent: 24,
	}
	for c, n := range want {
		if uint32(c) != n {
			t.Errorf("%v = %d, want %d", c, uint32(c), n)
		}
	}
	if CmdConnect.String() != "CONNECT" || CmdGetOption.String() != "GET_OPTION" || Cmd(99).String() != "Cmd(99)" {
		t.Errorf("String: %q %q %q", CmdConnect, CmdGetOption, Cmd(99))
	}
}

func TestEncodeErrors(t *testing.T) {
	ib := IBSockaddr(testIB)
	buf := make([]byte, MaxCommandSize)
	for _, c := range []Command{
		&BindIP{Addr: ib},
		&ResolveIP{Src: ib, Dst: mustIP(t, ap4)},
		&ResolveIP{Dst: ib},
		&JoinIPMcast{Addr: ib},
	} {
		if _, err := c.Encode(buf, testResp); !errors.Is(err, ErrAddrFamily) || !errors.Is(err, syscall.EINVAL) {
			t.Errorf("%v with AF_IB: err %v, want ErrAddrFamily/EINVAL", c.Cmd(), err)
		}
	}
	long := &ResolveIBService{Name: string(pattern(64, 'a'))}
	if _, err := long.Encode(buf, 0); !errors.Is(err, ErrServiceName) || !errors.Is(err, syscall.EINVAL) {
		t.Errorf("64-byte service name: err %v", err)
	}
	ok := &ResolveIBService{Name: string(pattern(63, 'a'))}
	got, err := ok.Encode(buf, 0)
	if err != nil {
		t.Fatalf("63-byte service name: %v", err)
	}
	if got[8+16+62] == 0 || got[8+16+63] != 0 {
		t.Errorf("63-byte name not NUL-terminated in its 64-byte field")
	}
	var r Reject
	if err := r.SetPrivateData(make([]byte, 256)); !errors.Is(err, ErrPrivateData) || !errors.Is(err, syscall.EINVAL) {
		t.Errorf("256 bytes of private data: err %v", err)
	}
}

func TestEncodeReusedBufferClearsOldBytes(t *testing.T) {
	// A large command followed by a smaller one with an address of a
	// smaller family must not leave stale bytes in the slot.
	buf := make([]byte, MaxCommandSize)
	big := &ResolveAddr{ID: 1, TimeoutMs: 1, Src: IBSockaddr(testIB), Dst: IBSockaddr(testIB)}
	if _, err := big.Encode(buf, 0); err != nil {
		t.Fatal(err)
	}
	small := &ResolveAddr{ID: 2, TimeoutMs: 3, Dst: mustIP(t, ap4)}
	got, err := small.Encode(buf, 0)
	if err != nil {
		t.Fatal(err)
	}
	want := make([]byte, 280)
	hdr(want, 21, 272, 0)
	h32(want[8:], 0, 2)
	h32(want[8:], 4, 3)
	h16(want[8:], 10, 16)
	sockIn4(want[8+144:])
	diff(t, "reused buffer", got, want)
}
