package soft

import (
	"encoding/binary"
	"net/netip"

	"github.com/cmrt/cmrt/fabric"
)

// grhLen is the size of the Global Route Header space every UD receive
// starts with.
const grhLen = 40

// fillGRH writes the 40-byte GRH of a received datagram into b the way
// RoCEv2 devices do: for IPv6 the IPv6 header of the packet; for IPv4 20
// zero bytes followed by the IPv4 header (checksum included). udpLen is the
// length of the UDP datagram (UDP header, data header and payload). An
// unknown destination is left zero.
func fillGRH(b []byte, src, dst netip.Addr, ttl, tos uint8, udpLen int) {
	b = b[:grhLen]
	clear(b)
	if ttl == 0 {
		ttl = 64
	}
	src, dst = src.Unmap(), dst.Unmap()
	if src.Is4() {
		h := b[20:]
		h[0] = 0x45
		h[1] = tos
		binary.BigEndian.PutUint16(h[2:], uint16(min(20+udpLen, 0xFFFF)))
		binary.BigEndian.PutUint16(h[6:], 0x4000) // DF
		h[8] = ttl
		h[9] = 17 // UDP
		s4 := src.As4()
		copy(h[12:16], s4[:])
		if dst.Is4() {
			d4 := dst.As4()
			copy(h[16:20], d4[:])
		}
		binary.BigEndian.PutUint16(h[10:], ipv4Checksum(h))
		return
	}
	b[0] = 0x60 | tos>>4
	b[1] = tos << 4
	binary.BigEndian.PutUint16(b[4:], uint16(min(udpLen, 0xFFFF)))
	b[6] = 17 // UDP
	b[7] = ttl
	s16 := src.As16()
	copy(b[8:24], s16[:])
	if dst.IsValid() {
		d16 := dst.As16()
		copy(b[24:40], d16[:])
	}
}

func ipv4Checksum(h []byte) uint16 {
	var sum uint32
	for k := 0; k+1 < len(h); k += 2 {
		sum += uint32(binary.BigEndian.Uint16(h[k:]))
	}
	for sum > 0xFFFF {
		sum = sum>>16 + sum&0xFFFF
	}
	return ^uint16(sum)
}

// udAH builds the address handle of a UD peer or group: its IP address in
// DGID (IPv4-mapped for IPv4) and the UDP port its QP receives on in DLID.
func udAH(a netip.Addr, port uint16, hopLimit, tclass uint8) fabric.AHAttr {
	return fabric.AHAttr{
		DGID:         a.Unmap().As16(),
		DLID:         port,
		IsGlobal:     1,
		HopLimit:     hopLimit,
		TrafficClass: tclass,
		PortNum:      1,
	}
}

// udQPPort returns the UDP port a peer's QP number names, or fallback when
// the number names none (the peer had no QP).
func udQPPort(qpn uint32, fallback uint16) uint16 {
	if qpn == 0 || qpn > 0xFFFF {
		return fallback
	}
	return uint16(qpn)
}
