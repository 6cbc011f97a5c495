package netlink

import (
	"errors"
	"net/netip"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// Hand-built netlink byte images. Test replies use this sequence number and
// port id.
const (
	testSeq = 7
	testPid = 99
)

// nlmsg builds one message: header plus body parts, padded to 4 bytes.
func nlmsg(typ, flags uint16, seq, pid uint32, body ...[]byte) []byte {
	var b []byte
	for _, p := range body {
		b = append(b, p...)
	}
	out := ne.AppendUint32(nil, uint32(sizeofHdr+len(b)))
	out = ne.AppendUint16(out, typ)
	out = ne.AppendUint16(out, flags)
	out = ne.AppendUint32(out, seq)
	out = ne.AppendUint32(out, pid)
	out = append(out, b...)
	for len(out)%4 != 0 {
		out = append(out, 0)
	}
	return out
}

// rta builds one attribute, padded.
func rta(typ uint16, val ...[]byte) []byte {
	var v []byte
	for _, p := range val {
		v = append(v, p...)
	}
	out := ne.AppendUint16(nil, uint16(4+len(v)))
	out = ne.AppendUint16(out, typ)
	out = append(out, v...)
	for len(out)%4 != 0 {
		out = append(out, 0)
	}
	return out
}

func u32(v uint32) []byte        { return ne.AppendUint32(nil, v) }
func i32(v int32) []byte         { return ne.AppendUint32(nil, uint32(v)) }
func ip(s string) []byte         { return netip.MustParseAddr(s).AsSlice() }
func cstr(s string) []byte       { return append([]byte(s), 0) }
func cat(parts ...[]byte) []byte { return concat(parts) }

func concat(parts [][]byte) []byte {
	var b []byte
	for _, p := range parts {
		b = append(b, p...)
	}
	return b
}

func rtmsgBytes(r unix.RtMsg) []byte {
	var m builder
	m.rtmsg(r)
	return m.b
}

func ifaddrmsgBytes(a unix.IfAddrmsg) []byte {
	var m builder
	m.ifaddrmsg(a)
	return m.b
}

func ifinfomsgBytes(i unix.IfInfomsg) []byte {
	var m builder
	m.ifinfomsg(i)
	return m.b
}

// nlerr builds an NLMSG_ERROR payload for code, echoing a request header,
// followed by extended-ACK TLVs.
func nlerr(code int32, orig []byte, tlvs ...[]byte) []byte {
	b := ne.AppendUint32(nil, uint32(code))
	b = append(b, orig...)
	return append(b, concat(tlvs)...)
}

// routeReply4 is what RTM_GETROUTE 198.51.100.7 returns on a host whose
// default route is via 192.0.2.1 on interface 4; the last attribute is
// unpadded at the end of the message.
func routeReply4() []byte {
	return nlmsg(unix.RTM_NEWROUTE, 0, testSeq, testPid,
		rtmsgBytes(unix.RtMsg{Family: unix.AF_INET, Dst_len: 32, Table: unix.RT_TABLE_MAIN, Protocol: unix.RTPROT_UNSPEC,
			Scope: unix.RT_SCOPE_UNIVERSE, Type: unix.RTN_UNICAST, Flags: unix.RTM_F_CLONED | unix.RTM_F_LOOKUP_TABLE}),
		rta(unix.RTA_TABLE, u32(unix.RT_TABLE_MAIN)),
		rta(unix.RTA_DST, ip("198.51.100.7")),
		rta(unix.RTA_OIF, u32(4)),
		rta(unix.RTA_PREFSRC, ip("192.0.2.2")),
		rta(unix.RTA_GATEWAY, ip("192.0.2.1")),
		rta(unix.RTA_METRICS, rta(unix.RTAX_ADVMSS, u32(1360)), rta(unix.RTAX_MTU, u32(1400))),
		rta(unix.RTA_UID, u32(0)),
		[]byte{5, 0, 99, 0, 1}, // unknown 1-byte attribute, padding omitted
	)[:sizeofHdr+unix.SizeofRtMsg+8+8+8+8+8+20+8+5]
}

// fixLen rewrites nlmsg_len to len(b) (for images trimmed after building).
func fixLen(b []byte) []byte {
	ne.PutUint32(b, uint32(len(b)))
	return b
}

func TestParseRouteReply(t *testing.T) {
	msg := fixLen(routeReply4())
	r := reply{op: "RTM_GETROUTE", seq: testSeq, pid: testPid, mode: modeGet}
	var got Route
	done := r.feed(msg, func(typ uint16, p []byte) error {
		if typ != unix.RTM_NEWROUTE {
			t.Errorf("type %d", typ)
		}
		var err error
		got, err = parseRoute(p)
		return err
	})
	if !done || r.err != nil {
		t.Fatalf("feed: done=%v err=%v", done, r.err)
	}
	want := Route{Dst: netip.MustParseAddr("198.51.100.7"), DstLen: 32, Src: netip.MustParseAddr("192.0.2.2"),
		Gateway: netip.MustParseAddr("192.0.2.1"), OIF: 4, Type: RouteUnicast, Table: unix.RT_TABLE_MAIN, MTU: 1400}
	if got != want {
		t.Errorf("parseRoute = %+v\nwant          %+v", got, want)
	}
}

func TestParseRouteIPv6Multipath(t *testing.T) {
	nh := func(ifindex uint32, attrs ...[]byte) []byte {
		a := concat(attrs)
		b := ne.AppendUint16(nil, uint16(unix.SizeofRtNexthop+len(a)))
		b = append(b, 0, 0)
		b = ne.AppendUint32(b, ifindex)
		return append(b, a...)
	}
	via := append(ne.AppendUint16(nil, unix.AF_INET6), ip("fe80::1")...)
	msg := nlmsg(unix.RTM_NEWROUTE, 0, 0, 0,
		rtmsgBytes(unix.RtMsg{Family: unix.AF_INET6, Dst_len: 48, Table: unix.RT_TABLE_MAIN, Type: unix.RTN_UNICAST}),
		rta(unix.RTA_DST, ip("2001:db8:1::")),
		rta(unix.RTA_PRIORITY, u32(1024)),
		rta(unix.RTA_MULTIPATH, nh(5, rta(unix.RTA_VIA, via)), nh(6, rta(unix.RTA_GATEWAY, ip("fe80::2")))),
	)
	_, p, _, err := nextMessage(msg)
	if err != nil {
		t.Fatal(err)
	}
	r, err := parseRoute(p)
	if err != nil {
		t.Fatal(err)
	}
	if r.Dst != netip.MustParseAddr("2001:db8:1::") || r.DstLen != 48 || r.OIF != 5 ||
		r.Gateway != netip.MustParseAddr("fe80::1") || r.Priority != 1024 {
		t.Errorf("parseRoute = %+v; want 2001:db8:1::/48 via fe80::1 (first hop) oif 5 metric 1024", r)
	}
	// Default route: no RTA_DST.
	msg = nlmsg(unix.RTM_NEWROUTE, 0, 0, 0, rtmsgBytes(unix.RtMsg{Family: unix.AF_INET, Type: unix.RTN_UNICAST}),
		rta(unix.RTA_GATEWAY, ip("10.0.0.1")))
	_, p, _, _ = nextMessage(msg)
	if r, err := parseRoute(p); err != nil || r.Dst != netip.IPv4Unspecified() || r.DstLen != 0 {
		t.Errorf("default route: %+v, %v", r, err)
	}
}

// TestFeedMultipartDump feeds a two-datagram dump interleaved with messages
// of another exchange and another port, which must be ignored.
func TestFeedMultipartDump(t *testing.T) {
	addr := func(seq, pid uint32, p string, plen uint8, index uint32) []byte {
		a := netip.MustParseAddr(p)
		fam := uint8(unix.AF_INET)
		if a.Is6() {
			fam = unix.AF_INET6
		}
		return nlmsg(unix.RTM_NEWADDR, unix.NLM_F_MULTI, seq, pid,
			ifaddrmsgBytes(unix.IfAddrmsg{Family: fam, Prefixlen: plen, Flags: unix.IFA_F_PERMANENT, Scope: unix.RT_SCOPE_HOST, Index: index}),
			rta(unix.IFA_ADDRESS, a.AsSlice()), rta(unix.IFA_LOCAL, a.AsSlice()), rta(unix.IFA_LABEL, cstr("lo")),
			rta(unix.IFA_FLAGS, u32(unix.IFA_F_PERMANENT|unix.IFA_F_NODAD)))
	}
	d1 := cat(
		addr(testSeq, testPid, "127.0.0.1", 8, 1),
		addr(testSeq-1, testPid, "10.9.9.9", 8, 1), // stale exchange
		addr(testSeq, testPid+1, "10.8.8.8", 8, 1), // another socket
		nlmsg(unix.NLMSG_NOOP, 0, testSeq, testPid),
	)
	d2 := cat(
		addr(testSeq, testPid, "::1", 128, 1),
		nlmsg(unix.NLMSG_DONE, unix.NLM_F_MULTI, testSeq, testPid, u32(0)),
	)
	r := reply{op: "RTM_GETADDR", seq: testSeq, pid: testPid, mode: modeDump}
	var got []Addr
	fn := func(typ uint16, p []byte) error {
		a, err := parseAddr(p)
		got = append(got, a)
		return err
	}
	if r.feed(d1, fn) {
		t.Fatal("exchange ended before NLMSG_DONE")
	}
	if !r.feed(d2, fn) || r.err != nil || r.intr {
		t.Fatalf("after NLMSG_DONE: err=%v intr=%v", r.err, r.intr)
	}
	if len(got) != 2 || got[0].Prefix != netip.MustParsePrefix("127.0.0.1/8") || got[1].Prefix != netip.MustParsePrefix("::1/128") {
		t.Fatalf("dump = %+v; want 127.0.0.1/8 and ::1/128 only", got)
	}
	if a := got[0]; a.Label != "lo" || a.Index != 1 || a.Scope != unix.RT_SCOPE_HOST ||
		a.Flags != unix.IFA_F_PERMANENT|unix.IFA_F_NODAD || a.Peer.IsValid() {
		t.Errorf("addr = %+v", a)
	}

	// NLM_F_DUMP_INTR on any part is reported so the dump can be retried.
	r = reply{op: "RTM_GETADDR", seq: testSeq, pid: testPid, mode: modeDump}
	intr := addr(testSeq, testPid, "127.0.0.1", 8, 1)
	ne.PutUint16(intr[6:], unix.NLM_F_MULTI|unix.NLM_F_DUMP_INTR)
	r.feed(cat(intr, nlmsg(unix.NLMSG_DONE, unix.NLM_F_MULTI, testSeq, testPid, u32(0))), fn)
	if !r.intr {
		t.Error("NLM_F_DUMP_INTR not reported")
	}

	// A negative errno in NLMSG_DONE fails the dump.
	r = reply{op: "RTM_GETADDR", seq: testSeq, pid: testPid, mode: modeDump}
	r.feed(nlmsg(unix.NLMSG_DONE, unix.NLM_F_MULTI, testSeq, testPid, i32(-int32(syscall.EINTR))), fn)
	if !errors.Is(r.err, syscall.EINTR) {
		t.Errorf("NLMSG_DONE(-EINTR): err = %v", r.err)
	}

	// A callback error is reported, but the exchange still runs to NLMSG_DONE
	// so that no dump is left half-read on the socket.
	r = reply{op: "RTM_GETADDR", seq: testSeq, pid: testPid, mode: modeDump}
	boom := errors.New("boom")
	calls := 0
	fail := func(uint16, []byte) error { calls++; return boom }
	if r.feed(d1, fail) || !r.feed(d2, fail) || !errors.Is(r.err, boom) || calls != 1 {
		t.Errorf("callback error: err=%v calls=%d", r.err, calls)
	}
}

func TestFeedError(t *testing.T) {
	req := nlmsg(unix.RTM_GETROUTE, unix.NLM_F_REQUEST, testSeq, testPid,
		rtmsgBytes(unix.RtMsg{Family: unix.AF_INET, Dst_len: 32}), rta(unix.RTA_DST, ip("192.0.2.99")))
	extAck := rta(unix.NLMSGERR_ATTR_MSG, cstr("no route to that network"))
	for _, x := range []struct {
		name  string
		flags uint16
		body  []byte
		msg   string
	}{
		{"plain", 0, nlerr(-int32(syscall.ENETUNREACH), req[:sizeofHdr]), ""},
		{"capped with ext ack", unix.NLM_F_CAPPED | unix.NLM_F_ACK_TLVS, nlerr(-int32(syscall.ENETUNREACH), req[:sizeofHdr], extAck), "no route to that network"},
		{"full request with ext ack", unix.NLM_F_ACK_TLVS, nlerr(-int32(syscall.ENETUNREACH), req, extAck), "no route to that network"},
	} {
		r := reply{op: "RTM_GETROUTE", seq: testSeq, pid: testPid, mode: modeGet}
		if !r.feed(nlmsg(unix.NLMSG_ERROR, x.flags, testSeq, testPid, x.body), nil) {
			t.Fatalf("%s: NLMSG_ERROR did not end the exchange", x.name)
		}
		var e *Error
		if !errors.Is(r.err, syscall.ENETUNREACH) || !errors.As(r.err, &e) || e.Message != x.msg || e.Op != "RTM_GETROUTE" {
			t.Errorf("%s: err = %#v, want ENETUNREACH with message %q", x.name, r.err, x.msg)
		}
	}
	// Error 0 is an ACK.
	r := reply{op: "RTM_NEWADDR", seq: testSeq, pid: testPid, mode: modeAck}
	if !r.feed(nlmsg(unix.NLMSG_ERROR, unix.NLM_F_CAPPED, testSeq, testPid, nlerr(0, req[:sizeofHdr])), nil) || r.err != nil {
		t.Errorf("ACK: err = %v", r.err)
	}
}

// TestMalformed checks that every lying or truncated length is an error
// wrapping ErrMalformed (and never a panic).
func TestMalformed(t *testing.T) {
	good := fixLen(routeReply4())
	rt := rtmsgBytes(unix.RtMsg{Family: unix.AF_INET, Dst_len: 32, Type: unix.RTN_UNICAST})
	route := func(attrs ...[]byte) []byte {
		return nlmsg(unix.RTM_NEWROUTE, 0, testSeq, testPid, append([][]byte{rt}, attrs...)...)
	}
	lying := func(b []byte, off int, v uint16) []byte {
		b = append([]byte(nil), b...)
		ne.PutUint16(b[off:], v)
		return b
	}
	attrOff := sizeofHdr + unix.SizeofRtMsg
	nh := append(ne.AppendUint16(nil, 200), 0, 0, 4, 0, 0, 0) // rtnexthop claiming 200 bytes
	for _, x := range []struct {
		name string
		b    []byte
	}{
		{"short header", good[:10]},
		{"nlmsg_len below header", lying(good, 0, 8)},
		{"nlmsg_len beyond datagram", good[:len(good)-8]},
		{"rtmsg truncated", fixLen(append([]byte(nil), good[:sizeofHdr+6]...))},
		{"rta_len below 4", lying(route(rta(unix.RTA_OIF, u32(1))), attrOff, 2)},
		{"rta_len beyond message", lying(route(rta(unix.RTA_OIF, u32(1))), attrOff, 64)},
		{"trailing bytes short of an attribute", fixLen(append(route(rta(unix.RTA_OIF, u32(1))), 1, 0))},
		{"RTA_OIF of 2 bytes", route(rta(unix.RTA_OIF, []byte{1, 0}))},
		{"RTA_DST of 5 bytes", route(rta(unix.RTA_DST, []byte{1, 2, 3, 4, 5}))},
		{"IPv6 gateway in IPv4 route", route(rta(unix.RTA_GATEWAY, ip("fe80::1")))},
		{"lying nested metric", route(rta(unix.RTA_METRICS, lying(rta(unix.RTAX_MTU, u32(1500)), 0, 40)))},
		{"lying rtnexthop", route(rta(unix.RTA_MULTIPATH, nh))},
		{"RTA_VIA without family", route(rta(unix.RTA_VIA, []byte{2}))},
		{"dst_len 33", nlmsg(unix.RTM_NEWROUTE, 0, testSeq, testPid, rtmsgBytes(unix.RtMsg{Family: unix.AF_INET, Dst_len: 33}))},
		{"NLMSG_ERROR truncated", nlmsg(unix.NLMSG_ERROR, 0, testSeq, testPid, i32(-1))},
		{"NLMSG_ERROR positive code", nlmsg(unix.NLMSG_ERROR, 0, testSeq, testPid, nlerr(5, good[:sizeofHdr]))},
		{"NLMSG_ERROR lying embedded length", nlmsg(unix.NLMSG_ERROR, unix.NLM_F_ACK_TLVS, testSeq, testPid,
			nlerr(-1, lying(good[:sizeofHdr], 0, 4000)))},
	} {
		t.Run(x.name, func(t *testing.T) {
			r := reply{op: "test", seq: testSeq, pid: testPid, mode: modeGet}
			r.feed(x.b, func(_ uint16, p []byte) error { _, err := parseRoute(p); return err })
			if !errors.Is(r.err, ErrMalformed) {
				t.Errorf("err = %v, want ErrMalformed", r.err)
			}
		})
	}
	// Address, link and notification decoders.
	for _, x := range []struct {
		name string
		fn   func() error
	}{
		{"ifaddrmsg truncated", func() error { _, err := parseAddr([]byte{2, 24, 0}); return err }},
		{"prefix length 33", func() error {
			_, err := parseAddr(cat(ifaddrmsgBytes(unix.IfAddrmsg{Family: unix.AF_INET, Prefixlen: 33}), rta(unix.IFA_LOCAL, ip("10.0.0.1"))))
			return err
		}},
		{"address without IFA_LOCAL/IFA_ADDRESS", func() error {
			_, err := parseAddr(ifaddrmsgBytes(unix.IfAddrmsg{Family: unix.AF_INET6, Prefixlen: 64}))
			return err
		}},
		{"IFA_FLAGS of 1 byte", func() error {
			_, err := parseAddr(cat(ifaddrmsgBytes(unix.IfAddrmsg{Family: unix.AF_INET}), rta(unix.IFA_LOCAL, ip("10.0.0.1")), rta(unix.IFA_FLAGS, []byte{1})))
			return err
		}},
		{"ifinfomsg truncated", func() error { _, err := parseLink(make([]byte, 15)); return err }},
		{"IFLA_MTU of 3 bytes", func() error {
			_, err := parseLink(cat(ifinfomsgBytes(unix.IfInfomsg{Index: 2}), rta(unix.IFLA_MTU, []byte{1, 2, 3})))
			return err
		}},
		{"IFLA_OPERSTATE of 4 bytes", func() error {
			_, err := parseLink(cat(ifinfomsgBytes(unix.IfInfomsg{Index: 2}), rta(unix.IFLA_OPERSTATE, u32(6))))
			return err
		}},
		{"RTM_DELADDR with lying attribute", func() error {
			_, _, err := decodeChange(unix.RTM_DELADDR, lying(cat(ifaddrmsgBytes(unix.IfAddrmsg{Family: unix.AF_INET}), rta(unix.IFA_LOCAL, ip("10.0.0.1"))), 8, 100))
			return err
		}},
	} {
		if err := x.fn(); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: err = %v, want ErrMalformed", x.name, err)
		}
	}
}

func TestParseLink(t *testing.T) {
	p := cat(ifinfomsgBytes(unix.IfInfomsg{Type: unix.ARPHRD_ETHER, Index: 4,
		Flags: unix.IFF_UP | unix.IFF_BROADCAST | unix.IFF_RUNNING | unix.IFF_MULTICAST | unix.IFF_LOWER_UP}),
		rta(unix.IFLA_IFNAME, cstr("eth0")), rta(unix.IFLA_MTU, u32(1400)),
		rta(unix.IFLA_ADDRESS, []byte{2, 0xfc, 0, 0, 0, 1}), rta(unix.IFLA_OPERSTATE, []byte{6}),
		rta(unix.IFLA_LINKINFO, rta(unix.IFLA_INFO_KIND, cstr("veth"))))
	l, err := parseLink(p)
	if err != nil {
		t.Fatal(err)
	}
	if l.Index != 4 || l.Name != "eth0" || l.MTU != 1400 || l.HardwareAddr.String() != "02:fc:00:00:00:01" ||
		l.Type != unix.ARPHRD_ETHER || l.OperState.String() != "UP" || !l.Flags.Up() || !l.Flags.Running() ||
		!l.Flags.LowerUp() || l.Flags.Loopback() || l.Flags.String() != "UP|BROADCAST|RUNNING|MULTICAST|LOWER_UP" {
		t.Errorf("parseLink = %+v (flags %v)", l, l.Flags)
	}
	idx, name, mtu, err := linkNameMTU(p)
	if idx != 4 || string(name) != "eth0" || mtu != 1400 || err != nil {
		t.Errorf("linkNameMTU = %d %q %d %v", idx, name, mtu, err)
	}
}

func TestBuilderRoundTrip(t *testing.T) {
	var m builder
	m.begin(unix.RTM_GETROUTE, 0, 42)
	m.rtmsg(unix.RtMsg{Family: unix.AF_INET6, Dst_len: 128, Flags: unix.RTM_F_LOOKUP_TABLE})
	m.attrAddr(unix.RTA_DST, netip.MustParseAddr("fe80::1%eth0"))
	m.attrString(unix.IFLA_IFNAME, "abcde") // 6 bytes + padding
	n := m.nest(unix.RTA_METRICS)
	m.attrU32(unix.RTAX_MTU, 1280)
	m.endNest(n)
	b := m.finish()
	h, p, rest, err := nextMessage(b)
	if err != nil || len(rest) != 0 || int(h.Len) != len(b) || h.Type != unix.RTM_GETROUTE ||
		h.Flags != unix.NLM_F_REQUEST || h.Seq != 42 || len(b)%4 != 0 {
		t.Fatalf("header %+v rest %d err %v", h, len(rest), err)
	}
	a := attrs{b: p[unix.SizeofRtMsg:]}
	var types []uint16
	for typ, v, ok := a.next(); ok; typ, v, ok = a.next() {
		types = append(types, typ)
		switch typ {
		case unix.RTA_DST:
			if got, _ := attrAddr(unix.AF_INET6, typ, v); got != netip.MustParseAddr("fe80::1") {
				t.Errorf("RTA_DST = %v", got)
			}
		case unix.IFLA_IFNAME:
			if string(attrString(v)) != "abcde" {
				t.Errorf("string = %q", v)
			}
		case unix.RTA_METRICS:
			if mtu, err := parseMetricsMTU(v); mtu != 1280 || err != nil {
				t.Errorf("metrics mtu = %d, %v", mtu, err)
			}
		}
	}
	if a.err != nil || len(types) != 3 {
		t.Errorf("attributes %v, err %v", types, a.err)
	}
}

func TestDecodeChange(t *testing.T) {
	del := cat(ifaddrmsgBytes(unix.IfAddrmsg{Family: unix.AF_INET6, Prefixlen: 64, Flags: unix.IFA_F_TENTATIVE, Scope: unix.RT_SCOPE_UNIVERSE, Index: 3}),
		rta(unix.IFA_ADDRESS, ip("2001:db8::1")))
	ch, ok, err := decodeChange(unix.RTM_DELADDR, del)
	if !ok || err != nil || ch.Kind != AddrRemoved || ch.Addr.Prefix != netip.MustParsePrefix("2001:db8::1/64") ||
		ch.Addr.Index != 3 || !ch.Addr.Flags.Tentative() || ch.Kind.String() != "AddrRemoved" {
		t.Errorf("RTM_DELADDR: %+v ok=%v err=%v", ch, ok, err)
	}
	// Other families (here AF_MCTP = 45) and message types are skipped.
	if _, ok, err := decodeChange(unix.RTM_NEWADDR, ifaddrmsgBytes(unix.IfAddrmsg{Family: 45})); ok || err != nil {
		t.Errorf("AF_MCTP address: ok=%v err=%v", ok, err)
	}
	if _, ok, err := decodeChange(unix.RTM_NEWNEIGH, []byte{1, 2, 3}); ok || err != nil {
		t.Errorf("RTM_NEWNEIGH: ok=%v err=%v", ok, err)
	}
	// A monitor without resolver keeps undeliverable changes pending.
	m := &Monitor{names: map[int]string{3: "veth3"}}
	link := nlmsg(unix.RTM_DELLINK, 0, 0, 0, ifinfomsgBytes(unix.IfInfomsg{Index: 3}), rta(unix.IFLA_IFNAME, cstr("veth3")))
	dgram := cat(nlmsg(unix.RTM_DELADDR, 0, 0, 0, del), nlmsg(unix.RTM_NEWADDR, 0, 0, 0, del), link)
	var out [2]Change
	if n := m.decode(dgram, out[:], 0); n != 2 || len(m.pending) != 1 || m.pending[0].Kind != LinkRemoved ||
		out[0].Addr.IfName != "veth3" || out[1].Kind != AddrAdded || m.deferred != nil {
		t.Errorf("decode: n=%d pending=%+v out=%+v deferred=%v", n, m.pending, out, m.deferred)
	}
	if _, ok := m.names[3]; ok {
		t.Error("RTM_DELLINK did not evict the cached name")
	}
	if m.decode(dgram[:20], out[:], 0); !errors.Is(m.deferred, ErrOverrun) || !errors.Is(m.deferred, ErrMalformed) {
		t.Errorf("truncated notification: deferred = %v, want ErrOverrun and ErrMalformed", m.deferred)
	}
}

func TestRejectError(t *testing.T) {
	for typ, want := range map[RouteType]syscall.Errno{
		RouteUnreachable: syscall.EHOSTUNREACH, RouteProhibit: syscall.EACCES,
		RouteBlackhole: syscall.EINVAL, RouteThrow: syscall.ENETUNREACH,
	} {
		err := rejectError(typ)
		if !errors.Is(err, ErrRejected) || !errors.Is(err, want) {
			t.Errorf("rejectError(%v) = %v, want ErrRejected and %v", typ, err, want)
		}
	}
	for _, typ := range []RouteType{RouteUnicast, RouteLocal, RouteBroadcast, RouteMulticast, RouteAnycast} {
		if err := rejectError(typ); err != nil {
			t.Errorf("rejectError(%v) = %v, want nil", typ, err)
		}
	}
}

func TestStrings(t *testing.T) {
	for _, x := range []struct{ got, want string }{
		{RouteLocal.String(), "local"}, {RouteType(200).String(), "RouteType(200)"},
		{Scope(unix.RT_SCOPE_LINK).String(), "link"}, {Scope(7).String(), "7"},
		{AddrFlags(unix.IFA_F_PERMANENT | unix.IFA_F_NODAD | 0x10000).String(), "nodad|permanent|0x10000"},
		{LinkFlags(unix.IFF_UP | unix.IFF_LOOPBACK).String(), "UP|LOOPBACK"},
		{OperState(2).String(), "DOWN"}, {ChangeKind(9).String(), "ChangeKind(9)"},
		{(&Error{Op: "RTM_GETROUTE", Errno: syscall.ENETUNREACH, Message: "x"}).Error(), "RTM_GETROUTE: network is unreachable (x)"},
	} {
		if x.got != x.want {
			t.Errorf("got %q, want %q", x.got, x.want)
		}
	}
}

func TestParseNeigh(t *testing.T) {
	nd := func(family uint8, index int32, state uint16) []byte {
		b := []byte{family, 0, 0, 0}
		b = ne.AppendUint32(b, uint32(index))
		b = ne.AppendUint16(b, state)
		return append(b, 0, 1)
	}
	for _, x := range []struct {
		name string
		p    []byte
		want Neigh
		ok   bool
	}{
		{"reachable", cat(nd(unix.AF_INET, 3, unix.NUD_REACHABLE), rta(unix.NDA_DST, ip("10.0.0.2")),
			rta(unix.NDA_LLADDR, []byte{2, 0, 0, 0, 0, 2})),
			Neigh{Index: 3, Addr: netip.MustParseAddr("10.0.0.2"), State: unix.NUD_REACHABLE,
				HardwareAddr: []byte{2, 0, 0, 0, 0, 2}}, true},
		{"incomplete v6", cat(nd(unix.AF_INET6, 4, unix.NUD_INCOMPLETE), rta(unix.NDA_DST, ip("fe80::2"))),
			Neigh{Index: 4, Addr: netip.MustParseAddr("fe80::2"), State: unix.NUD_INCOMPLETE}, true},
		{"short", nd(unix.AF_INET, 3, 0)[:8], Neigh{}, false},
		{"no destination", nd(unix.AF_INET, 3, unix.NUD_STALE), Neigh{}, false},
		{"address of the wrong family", cat(nd(unix.AF_INET, 3, 0), rta(unix.NDA_DST, ip("fe80::2"))), Neigh{}, false},
		{"truncated attribute", cat(nd(unix.AF_INET, 3, 0), rta(unix.NDA_DST, ip("10.0.0.2"))[:6]), Neigh{}, false},
	} {
		n, err := parseNeigh(x.p)
		if (err == nil) != x.ok || n.Index != x.want.Index || n.Addr != x.want.Addr || n.State != x.want.State ||
			n.HardwareAddr.String() != x.want.HardwareAddr.String() {
			t.Errorf("%s: parseNeigh = %+v, %v; want %+v (ok %v)", x.name, n, err, x.want, x.ok)
		}
	}
	for s, want := range map[NeighState]string{0: "none", unix.NUD_STALE: "stale",
		unix.NUD_INCOMPLETE | unix.NUD_FAILED: "incomplete|failed"} {
		if s.String() != want {
			t.Errorf("NeighState(%#x).String() = %q, want %q", uint16(s), s.String(), want)
		}
	}
	if NeighState(unix.NUD_FAILED).Valid() || NeighState(unix.NUD_INCOMPLETE).Valid() || !NeighState(unix.NUD_STALE).Valid() {
		t.Error("Valid does not follow NUD_VALID")
	}
}
