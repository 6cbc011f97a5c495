package id_test

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"syscall"
	"testing"

	"github.com/cmrt/cmrt/fabric"
	"github.com/cmrt/cmrt/id"
)

// TestOpcodeNames: completion and work request opcodes print as the verbs
// enum names, not as numbers.
func TestOpcodeNames(t *testing.T) {
	for _, c := range []struct {
		v    fmt.Stringer
		want string
	}{
		{id.WCSend, "IBV_WC_SEND"},
		{id.WCRDMAWrite, "IBV_WC_RDMA_WRITE"},
		{id.WCRDMARead, "IBV_WC_RDMA_READ"},
		{id.WCRecv, "IBV_WC_RECV"},
		{id.WCOpcode(7), "IBV_WC_OPCODE(7)"},
		{id.WRSend, "IBV_WR_SEND"},
		{id.WRWrite, "IBV_WR_RDMA_WRITE"},
		{id.WRRead, "IBV_WR_RDMA_READ"},
		{id.WRSendWithInv, "IBV_WR_SEND_WITH_INV"},
		{id.WROpcode(9), "IBV_WR_OPCODE(9)"},
	} {
		if got := c.v.String(); got != c.want {
			t.Errorf("%v: %q, want %q", c.v, got, c.want)
		}
	}
	if got := fmt.Sprintf("%v", id.WC{Opcode: id.WCRecv}); got == "" || !strings.Contains(got, "IBV_WC_RECV") {
		t.Errorf("%%v of a WC: %s", got)
	}
}

// TestAHFromWCGRH: the traffic class (and, for IPv6, the flow label) come
// from the GRH the receive buffer starts with; the address and QP port
// from the completion.
func TestAHFromWCGRH(t *testing.T) {
	grh4 := make([]byte, fabric.GRHLen)
	grh4[20], grh4[21] = 0x45, 0x28 // IPv4 header: TOS 0x28
	wc := id.WC{Opcode: id.WCRecv, GRH: true, Src: netip.MustParseAddrPort("10.0.0.2:4791"), SrcQP: 4791}
	ah, err := id.AHFromWC(&wc, grh4)
	if err != nil {
		t.Fatal(err)
	}
	if ah.Addr() != netip.MustParseAddr("10.0.0.2") || ah.DLID != 4791 || ah.TrafficClass != 0x28 ||
		ah.IsGlobal != 1 || ah.HopLimit != 0xFF || ah.PortNum != 1 {
		t.Fatalf("IPv4: %+v", ah)
	}
	grh6 := make([]byte, fabric.GRHLen)
	copy(grh6, []byte{0x6b, 0xa1, 0x23, 0x45}) // version 6, class 0xba, flow 0x12345
	wc.Src = netip.MustParseAddrPort("[fd00::2]:5000")
	if ah, err = id.AHFromWC(&wc, grh6); err != nil {
		t.Fatal(err)
	}
	if ah.Addr() != netip.MustParseAddr("fd00::2") || ah.DLID != 5000 || ah.TrafficClass != 0xba || ah.FlowLabel != 0x12345 {
		t.Fatalf("IPv6: %+v", ah)
	}
	// Without the GRH: address and port only.
	if ah, err = id.AHFromWC(&wc, nil); err != nil || ah.TrafficClass != 0 || ah.Addr() != wc.Src.Addr() {
		t.Fatalf("no GRH: %+v %v", ah, err)
	}
	if _, err := id.AHFromWC(nil, nil); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("nil WC: %v", err)
	}
}
