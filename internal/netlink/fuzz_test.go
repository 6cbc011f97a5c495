package netlink

import (
	"testing"

	"golang.org/x/sys/unix"
)

// FuzzParse feeds arbitrary datagrams to the exchange state machine and to
// every message decoder. The decoders must never panic (which includes never
// indexing out of bounds) and must either decode or return an error.
func FuzzParse(f *testing.F) {
	f.Add(fixLen(routeReply4()))
	f.Add(nlmsg(unix.NLMSG_ERROR, unix.NLM_F_ACK_TLVS, testSeq, testPid,
		nlerr(-101, fixLen(routeReply4()), rta(unix.NLMSGERR_ATTR_MSG, cstr("x")))))
	f.Add(cat(
		nlmsg(unix.RTM_NEWADDR, unix.NLM_F_MULTI, testSeq, testPid,
			ifaddrmsgBytes(unix.IfAddrmsg{Family: unix.AF_INET, Prefixlen: 8, Index: 1}), rta(unix.IFA_LOCAL, ip("127.0.0.1"))),
		nlmsg(unix.RTM_NEWLINK, unix.NLM_F_MULTI, testSeq, testPid,
			ifinfomsgBytes(unix.IfInfomsg{Index: 1}), rta(unix.IFLA_IFNAME, cstr("lo")), rta(unix.IFLA_MTU, u32(65536))),
		nlmsg(unix.NLMSG_DONE, unix.NLM_F_MULTI, testSeq, testPid, u32(0))))
	f.Add(nlmsg(unix.RTM_NEWROUTE, 0, testSeq, testPid,
		rtmsgBytes(unix.RtMsg{Family: unix.AF_INET6, Dst_len: 48}),
		rta(unix.RTA_MULTIPATH, []byte{16, 0, 0, 0, 5, 0, 0, 0, 8, 0, 1, 0, 0, 0, 0, 0})))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		decodeAll := func(typ uint16, p []byte) error {
			parseRoute(p)
			parseAddr(p)
			parseLink(p)
			linkNameMTU(p)
			parseNeigh(p)
			decodeChange(typ, p)
			parseError("fuzz", 0, p)
			parseError("fuzz", unix.NLM_F_ACK_TLVS, p)
			return nil
		}
		for _, mode := range []int{modeGet, modeDump, modeAck} {
			r := reply{op: "fuzz", seq: testSeq, pid: testPid, mode: mode}
			r.feed(b, decodeAll)
		}
		// Decode every message regardless of sequence number.
		rest := b
		for len(rest) > 0 {
			h, p, next, err := nextMessage(rest)
			if err != nil {
				break
			}
			if len(next) >= len(rest) {
				t.Fatalf("nextMessage made no progress on %d bytes", len(rest))
			}
			decodeAll(h.Type, p)
			rest = next
		}
		m := &Monitor{names: map[int]string{}}
		var out [2]Change
		m.decode(b, out[:], 0)
	})
}
