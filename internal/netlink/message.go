package netlink

import (
	"encoding/binary"
	"net/netip"
	"syscall"

	"golang.org/x/sys/unix"
)

// Wire sizes and constants. All netlink integers are in host byte order.
const (
	sizeofHdr    = unix.SizeofNlMsghdr // 16
	sizeofAttr   = unix.SizeofRtAttr   // 4
	sizeofNlErr  = unix.SizeofNlMsgerr // 20
	nlaTypeMask  = ^uint16(unix.NLA_F_NESTED | unix.NLA_F_NET_BYTEORDER)
	rtextSkipSts = 1 << 3 // RTEXT_FILTER_SKIP_STATS (not in x/sys)
)

var ne = binary.NativeEndian

// align4 rounds n up to the netlink alignment (NLMSG_ALIGNTO == RTA_ALIGNTO == 4).
func align4(n int) int { return (n + unix.NLMSG_ALIGNTO - 1) &^ (unix.NLMSG_ALIGNTO - 1) }

// nextMessage splits the first netlink message off b. It returns the header,
// the payload (the bytes after the header, up to nlmsg_len) and the rest of b
// after alignment padding.
func nextMessage(b []byte) (h unix.NlMsghdr, payload, rest []byte, err error) {
	if len(b) < sizeofHdr {
		return h, nil, nil, malformed("%d bytes left, short of a %d-byte nlmsghdr", len(b), sizeofHdr)
	}
	h = unix.NlMsghdr{
		Len:   ne.Uint32(b[0:4]),
		Type:  ne.Uint16(b[4:6]),
		Flags: ne.Uint16(b[6:8]),
		Seq:   ne.Uint32(b[8:12]),
		Pid:   ne.Uint32(b[12:16]),
	}
	if h.Len < sizeofHdr || uint64(h.Len) > uint64(len(b)) {
		return h, nil, nil, malformed("nlmsg_len %d outside [%d, %d]", h.Len, sizeofHdr, len(b))
	}
	n := int(h.Len)
	next := align4(n)
	if next > len(b) {
		next = len(b)
	}
	return h, b[sizeofHdr:n], b[next:], nil
}

// attrs iterates over a sequence of rtattr/nlattr TLVs. The zero value
// iterates over nothing. After next returns false, err reports whether the
// sequence was malformed.
type attrs struct {
	b   []byte
	err error
}

// next returns the next attribute. The type has the NLA_F_NESTED and
// NLA_F_NET_BYTEORDER bits cleared.
func (a *attrs) next() (typ uint16, val []byte, ok bool) {
	if a.err != nil || len(a.b) == 0 {
		return 0, nil, false
	}
	if len(a.b) < sizeofAttr {
		a.err = malformed("%d trailing bytes, short of an attribute header", len(a.b))
		return 0, nil, false
	}
	l := int(ne.Uint16(a.b[0:2]))
	typ = ne.Uint16(a.b[2:4]) & nlaTypeMask
	if l < sizeofAttr || l > len(a.b) {
		a.err = malformed("attribute type %d: length %d outside [%d, %d]", typ, l, sizeofAttr, len(a.b))
		return 0, nil, false
	}
	val = a.b[sizeofAttr:l]
	next := align4(l)
	if next > len(a.b) {
		next = len(a.b)
	}
	a.b = a.b[next:]
	return typ, val, true
}

// attrU32 decodes a 4-byte attribute value.
func attrU32(typ uint16, v []byte) (uint32, error) {
	if len(v) != 4 {
		return 0, malformed("attribute type %d: %d bytes, want 4", typ, len(v))
	}
	return ne.Uint32(v), nil
}

// attrString decodes a NUL-terminated string attribute. A missing terminator
// is tolerated (the value is used as is).
func attrString(v []byte) []byte {
	for i, c := range v {
		if c == 0 {
			return v[:i]
		}
	}
	return v
}

// attrAddr decodes an IP address attribute of the given address family.
func attrAddr(family uint8, typ uint16, v []byte) (netip.Addr, error) {
	switch {
	case family == unix.AF_INET && len(v) == 4:
		return netip.AddrFrom4([4]byte(v)), nil
	case family == unix.AF_INET6 && len(v) == 16:
		return netip.AddrFrom16([16]byte(v)), nil
	}
	return netip.Addr{}, malformed("attribute type %d: %d-byte address for family %d", typ, len(v), family)
}

// familyOf returns the netlink address family and bit length of a.
func familyOf(a netip.Addr) (family uint8, bits int) {
	if a.Is4() {
		return unix.AF_INET, 32
	}
	return unix.AF_INET6, 128
}

// parseError decodes the payload of an NLMSG_ERROR message. It returns
// (nil, nil) for an acknowledgement (error 0).
func parseError(op string, flags uint16, p []byte) (*Error, error) {
	if len(p) < sizeofNlErr {
		return nil, malformed("NLMSG_ERROR payload of %d bytes, want at least %d", len(p), sizeofNlErr)
	}
	code := int32(ne.Uint32(p[0:4]))
	if code == 0 {
		return nil, nil
	}
	if code > 0 || code < -4095 {
		return nil, malformed("NLMSG_ERROR code %d is not a negative errno", code)
	}
	e := &Error{Op: op, Errno: syscall.Errno(-code)}
	if flags&unix.NLM_F_ACK_TLVS == 0 {
		return e, nil
	}
	// struct nlmsgerr is followed by the rest of the offending message
	// (unless capped) and then by the extended-ACK TLVs.
	off := sizeofNlErr
	if flags&unix.NLM_F_CAPPED == 0 {
		origLen := int(ne.Uint32(p[4:8]))
		if origLen < sizeofHdr || origLen-sizeofHdr > len(p)-off {
			return nil, malformed("NLMSG_ERROR embeds a %d-byte message in %d bytes", origLen, len(p)-off+sizeofHdr)
		}
		off += align4(origLen - sizeofHdr)
		if off > len(p) {
			off = len(p)
		}
	}
	a := attrs{b: p[off:]}
	for typ, v, ok := a.next(); ok; typ, v, ok = a.next() {
		if typ == unix.NLMSGERR_ATTR_MSG {
			e.Message = string(attrString(v))
		}
	}
	if a.err != nil {
		return nil, a.err
	}
	return e, nil
}

// builder appends a netlink request to a reusable buffer.
type builder struct {
	b []byte
}

// begin resets the buffer and writes a header whose length is fixed by
// finish.
func (m *builder) begin(typ, flags uint16, seq uint32) {
	m.b = m.b[:0]
	m.b = ne.AppendUint32(m.b, 0)
	m.b = ne.AppendUint16(m.b, typ)
	m.b = ne.AppendUint16(m.b, flags|unix.NLM_F_REQUEST)
	m.b = ne.AppendUint32(m.b, seq)
	m.b = ne.AppendUint32(m.b, 0) // the kernel fills in our port id
}

// raw appends b followed by alignment padding.
func (m *builder) raw(b []byte) {
	m.b = append(m.b, b...)
	m.pad()
}

func (m *builder) pad() {
	for len(m.b)%unix.NLMSG_ALIGNTO != 0 {
		m.b = append(m.b, 0)
	}
}

// rtmsg appends a struct rtmsg.
func (m *builder) rtmsg(r unix.RtMsg) {
	m.b = append(m.b, r.Family, r.Dst_len, r.Src_len, r.Tos, r.Table, r.Protocol, r.Scope, r.Type)
	m.b = ne.AppendUint32(m.b, r.Flags)
}

// ifaddrmsg appends a struct ifaddrmsg.
func (m *builder) ifaddrmsg(a unix.IfAddrmsg) {
	m.b = append(m.b, a.Family, a.Prefixlen, a.Flags, a.Scope)
	m.b = ne.AppendUint32(m.b, a.Index)
}

// ifinfomsg appends a struct ifinfomsg.
func (m *builder) ifinfomsg(i unix.IfInfomsg) {
	m.b = append(m.b, i.Family, 0)
	m.b = ne.AppendUint16(m.b, i.Type)
	m.b = ne.AppendUint32(m.b, uint32(i.Index))
	m.b = ne.AppendUint32(m.b, i.Flags)
	m.b = ne.AppendUint32(m.b, i.Change)
}

// ndmsg appends a struct ndmsg.
func (m *builder) ndmsg(n unix.NdMsg) {
	m.b = append(m.b, n.Family, 0, 0, 0)
	m.b = ne.AppendUint32(m.b, uint32(n.Ifindex))
	m.b = ne.AppendUint16(m.b, n.State)
	m.b = append(m.b, n.Flags, n.Type)
}

// attr appends one attribute.
func (m *builder) attr(typ uint16, v []byte) {
	m.b = ne.AppendUint16(m.b, uint16(sizeofAttr+len(v)))
	m.b = ne.AppendUint16(m.b, typ)
	m.raw(v)
}

// attrU32 appends a 4-byte attribute.
func (m *builder) attrU32(typ uint16, v uint32) {
	var b [4]byte
	ne.PutUint32(b[:], v)
	m.attr(typ, b[:])
}

// attrString appends a NUL-terminated string attribute.
func (m *builder) attrString(typ uint16, s string) {
	m.b = ne.AppendUint16(m.b, uint16(sizeofAttr+len(s)+1))
	m.b = ne.AppendUint16(m.b, typ)
	m.b = append(m.b, s...)
	m.b = append(m.b, 0)
	m.pad()
}

// attrAddr appends an address attribute (4 or 16 bytes, zone dropped).
func (m *builder) attrAddr(typ uint16, a netip.Addr) {
	if a.Is4() {
		b := a.As4()
		m.attr(typ, b[:])
		return
	}
	b := a.As16()
	m.attr(typ, b[:])
}

// finish sets nlmsg_len and returns the encoded message.
func (m *builder) finish() []byte {
	ne.PutUint32(m.b[0:4], uint32(len(m.b)))
	return m.b
}
