package id

import (
	"context"
	"errors"
	"net/netip"
	"syscall"
	"testing"
)

func TestGetAddrInfo(t *testing.T) {
	ap := netip.MustParseAddrPort
	for _, c := range []struct {
		name          string
		node, service string
		hints         *AddrInfo
		want          AddrInfo
		code          int // EAI_*; 0 = success
	}{
		{"passive, no node", "", "7471", &AddrInfo{Flags: AIPassive},
			AddrInfo{Flags: AIPassive, Family: syscall.AF_INET, QPType: RC, PortSpace: PSTCP, Src: ap("0.0.0.0:7471")}, 0},
		{"active, no node", "", "7471", &AddrInfo{},
			AddrInfo{Family: syscall.AF_INET, QPType: RC, PortSpace: PSTCP, Dst: ap("127.0.0.1:7471")}, 0},
		{"nil hints", "10.1.2.3", "1", nil,
			AddrInfo{Family: syscall.AF_INET, QPType: RC, PortSpace: PSTCP, Dst: ap("10.1.2.3:1")}, 0},
		{"active keeps the hinted source", "10.1.2.3", "", &AddrInfo{Src: ap("10.0.0.9:0")},
			AddrInfo{Family: syscall.AF_INET, QPType: RC, PortSpace: PSTCP, Src: ap("10.0.0.9:0"), Dst: ap("10.1.2.3:0")}, 0},
		{"mapped address", "::ffff:10.1.2.3", "1", &AddrInfo{},
			AddrInfo{Family: syscall.AF_INET, QPType: RC, PortSpace: PSTCP, Dst: ap("10.1.2.3:1")}, 0},
		{"IPv6", "fe80::1", "1", &AddrInfo{},
			AddrInfo{Family: syscall.AF_INET6, QPType: RC, PortSpace: PSTCP, Dst: ap("[fe80::1]:1")}, 0},
		{"IPv6 family, passive", "", "5", &AddrInfo{Flags: AIPassive | AIFamily, Family: syscall.AF_INET6},
			AddrInfo{Flags: AIPassive | AIFamily, Family: syscall.AF_INET6, QPType: RC, PortSpace: PSTCP, Src: ap("[::]:5")}, 0},
		{"IPv6 family, active", "", "5", &AddrInfo{Flags: AIFamily, Family: syscall.AF_INET6},
			AddrInfo{Flags: AIFamily, Family: syscall.AF_INET6, QPType: RC, PortSpace: PSTCP, Dst: ap("[::1]:5")}, 0},
		{"UD gives PS_UDP", "", "5", &AddrInfo{QPType: UD},
			AddrInfo{Family: syscall.AF_INET, QPType: UD, PortSpace: PSUDP, Dst: ap("127.0.0.1:5")}, 0},
		{"PS_IPOIB gives UD", "", "5", &AddrInfo{PortSpace: PSIPoIB},
			AddrInfo{Family: syscall.AF_INET, QPType: UD, PortSpace: PSIPoIB, Dst: ap("127.0.0.1:5")}, 0},
		{"PS_IB keeps its QP type", "", "5", &AddrInfo{PortSpace: PSIB, QPType: UD},
			AddrInfo{Family: syscall.AF_INET, QPType: UD, PortSpace: PSIB, Dst: ap("127.0.0.1:5")}, 0},
		{"IPv4 address, IPv6 family", "10.1.2.3", "", &AddrInfo{Flags: AIFamily, Family: syscall.AF_INET6}, AddrInfo{}, EAIFamily},
		{"unknown family", "", "1", &AddrInfo{Flags: AIFamily, Family: 99}, AddrInfo{}, EAIFamily},
		{"numeric host only", "localhost", "1", &AddrInfo{Flags: AINumericHost}, AddrInfo{}, EAINoName},
		{"unknown flag", "", "1", &AddrInfo{Flags: 0x100}, AddrInfo{}, EAIBadFlags},
		{"no such host", "no-such-host.invalid", "1", &AddrInfo{}, AddrInfo{}, EAINoName},
		{"no such service", "", "no-such-service", &AddrInfo{}, AddrInfo{}, EAIService},
		{"port out of range", "", "70000", &AddrInfo{}, AddrInfo{}, EAIService},
	} {
		got, err := GetAddrInfo(context.Background(), c.node, c.service, c.hints)
		if c.code != 0 {
			var e *AddrInfoError
			if !errors.As(err, &e) || e.Code != c.code {
				t.Errorf("%s: %+v, %v; want EAI %d", c.name, got, err, c.code)
			}
			continue
		}
		if err != nil || *got != c.want {
			t.Errorf("%s: %+v, %v\nwant %+v", c.name, got, err, c.want)
		}
	}
	if _, err := GetAddrInfo(context.Background(), "", "", nil); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("nothing to resolve: %v, want EINVAL", err)
	}
	for code, text := range map[int]string{EAINoName: "Name or service not known", EAIService: "Servname not supported for ai_socktype", -99: "Unknown error"} {
		if got := (&AddrInfoError{Code: code}).Error(); got != text {
			t.Errorf("EAI %d: %q, want %q", code, got, text)
		}
	}
}
