package ucma

import "testing"

// Compile-time checks: each line fails to compile unless the constant
// equals the ABI's total write length (an array of non-zero or negative
// length is not assignable to [0]struct{}).
var (
	_ [0]struct{} = [HeaderSize + InCreateID - 32]struct{}{}
	_ [0]struct{} = [HeaderSize + InDestroyID - 24]struct{}{}
	_ [0]struct{} = [HeaderSize + InBindIP - 48]struct{}{}
	_ [0]struct{} = [HeaderSize + InResolveIP - 72]struct{}{}
	_ [0]struct{} = [HeaderSize + InResolveRoute - 16]struct{}{}
	_ [0]struct{} = [HeaderSize + InQueryRoute - 24]struct{}{}
	_ [0]struct{} = [HeaderSize + InConnect - 296]struct{}{}
	_ [0]struct{} = [HeaderSize + InListen - 16]struct{}{}
	_ [0]struct{} = [HeaderSize + InAccept - 304]struct{}{}
	_ [0]struct{} = [HeaderSize + InReject - 272]struct{}{}
	_ [0]struct{} = [HeaderSize + InDisconnect - 12]struct{}{}
	_ [0]struct{} = [HeaderSize + InInitQPAttr - 24]struct{}{}
	_ [0]struct{} = [HeaderSize + InGetEvent - 16]struct{}{}
	_ [0]struct{} = [HeaderSize + InSetOption - 32]struct{}{}
	_ [0]struct{} = [HeaderSize + InNotify - 16]struct{}{}
	_ [0]struct{} = [HeaderSize + InJoinIPMcast - 56]struct{}{}
	_ [0]struct{} = [HeaderSize + InLeaveMcast - 24]struct{}{}
	_ [0]struct{} = [HeaderSize + InMigrateID - 24]struct{}{}
	_ [0]struct{} = [HeaderSize + InQuery - 24]struct{}{}
	_ [0]struct{} = [HeaderSize + InBind - 144]struct{}{}
	_ [0]struct{} = [HeaderSize + InResolveAddr - 280]struct{}{}
	_ [0]struct{} = [HeaderSize + InJoinMcast - 160]struct{}{}
	_ [0]struct{} = [HeaderSize + InResolveIBService - 96]struct{}{}
	_ [0]struct{} = [HeaderSize + InWriteCMEvent - 328]struct{}{}

	_ [0]struct{} = [EventRespSize - 336]struct{}{}
	_ [0]struct{} = [EventRespMinSize - 324]struct{}{}
	_ [0]struct{} = [ConnParamSize - 272]struct{}{}
	_ [0]struct{} = [UDParamSize - 304]struct{}{}
	_ [0]struct{} = [AHAttrSize - 32]struct{}{}
	_ [0]struct{} = [PathRecSize - 64]struct{}{}
	_ [0]struct{} = [PathDataSize - 72]struct{}{}
	_ [0]struct{} = [QueryAddrRespSize - 280]struct{}{}
	_ [0]struct{} = [QueryRouteRespSize - 208]struct{}{}
	_ [0]struct{} = [QPAttrSize - 144]struct{}{}
	_ [0]struct{} = [OutQueryPath - 440]struct{}{}
	_ [0]struct{} = [SockaddrInSize - 16]struct{}{}
	_ [0]struct{} = [SockaddrIn6Size - 28]struct{}{}
	_ [0]struct{} = [SockaddrIBSize - 48]struct{}{}
	_ [0]struct{} = [SockaddrStorageSize - 128]struct{}{}
)

// TestCommandSizes checks what the encoders actually produce against the
// total lengths of the ABI table, written out as literals.
func TestCommandSizes(t *testing.T) {
	want := map[Cmd]int{
		CmdCreateID: 32, CmdDestroyID: 24, CmdBindIP: 48, CmdResolveIP: 72,
		CmdResolveRoute: 16, CmdQueryRoute: 24, CmdConnect: 296, CmdListen: 16,
		CmdAccept: 304, CmdReject: 272, CmdDisconnect: 12, CmdInitQPAttr: 24,
		CmdGetEvent: 16, CmdSetOption: 32, CmdNotify: 16, CmdJoinIPMcast: 56,
		CmdLeaveMcast: 24, CmdMigrateID: 24, CmdQuery: 24, CmdBind: 144,
		CmdResolveAddr: 280, CmdJoinMcast: 160, CmdResolveIBService: 96,
		CmdWriteCMEvent: 328,
	}
	zero := []Command{
		&CreateID{}, &DestroyID{}, &BindIP{}, &ResolveIP{}, &ResolveRoute{},
		&QueryRoute{}, &Connect{}, &Listen{}, &Accept{}, &Reject{},
		&Disconnect{}, &InitQPAttr{}, &GetEvent{}, &SetOption{}, &Notify{},
		&JoinIPMcast{}, &LeaveMcast{}, &MigrateID{}, &Query{}, &Bind{},
		&ResolveAddr{}, &JoinMcast{}, &ResolveIBService{}, &WriteCMEvent{},
	}
	seen := map[Cmd]bool{}
	buf := make([]byte, MaxCommandSize)
	for _, c := range zero {
		b, err := c.Encode(buf, 0)
		if err != nil {
			t.Fatalf("%v: %v", c.Cmd(), err)
		}
		if len(b) != want[c.Cmd()] || c.Size() != want[c.Cmd()] {
			t.Errorf("%v: encoded %d bytes, Size %d, want %d", c.Cmd(), len(b), c.Size(), want[c.Cmd()])
		}
		h, _ := DecodeHeader(b)
		if int(h.In) != len(b)-8 {
			t.Errorf("%v: header in %d, want %d", c.Cmd(), h.In, len(b)-8)
		}
		seen[c.Cmd()] = true
	}
	if len(seen) != len(want) {
		t.Errorf("covered %d commands, want %d", len(seen), len(want))
	}
	if MaxCommandSize != 328 {
		t.Errorf("MaxCommandSize %d, want 328 (WRITE_CM_EVENT)", MaxCommandSize)
	}
}
