package netlink

import (
	"encoding/json"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// ---- network namespaces ----------------------------------------------------

// userNetnsEnv marks a test binary re-executed inside a new user and network
// namespace (see newNetns).
const userNetnsEnv = "CMRT_NETLINK_TEST_USERNS"

// netns runs closures on a locked OS thread that lives in a private network
// namespace. Sockets created there stay in that namespace and may then be
// used from any goroutine.
type netns struct {
	work chan func()
	done chan struct{}
}

// newNetns returns a fresh network namespace for the test.
//
//   - As root (CAP_SYS_ADMIN) it unshares CLONE_NEWNET on a locked thread
//     that is never unlocked, so the thread dies with the namespace.
//   - Unprivileged, it re-executes the test binary for this test inside a new
//     user+network namespace (where the test is root) and adopts its result;
//     it then returns nil and the caller must return.
//   - When neither is permitted the test is skipped with the reason.
//
// In the re-executed child the whole process already lives in a private
// namespace, so closures simply run in place.
func newNetns(t *testing.T) *netns {
	t.Helper()
	if os.Getenv(userNetnsEnv) == "1" {
		n := &netns{}
		return n
	}
	n := &netns{work: make(chan func()), done: make(chan struct{})}
	errc := make(chan error, 1)
	go func() {
		defer close(n.done)
		runtime.LockOSThread() // never unlocked: the thread exits with the goroutine
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			errc <- err
			return
		}
		errc <- nil
		for f := range n.work {
			f()
		}
	}()
	if err := <-errc; err != nil {
		<-n.done
		reexecInUserNetns(t, err)
		return nil // the test passed in a child process
	}
	t.Cleanup(func() { close(n.work); <-n.done })
	return n
}

// reexecInUserNetns runs the current top-level test in a child process inside
// new user and network namespaces and adopts the child's verdict (fail and
// skip end the test; on success it returns and newNetns returns nil).
func reexecInUserNetns(t *testing.T, unshareErr error) {
	t.Helper()
	name := t.Name()
	if i := strings.IndexByte(name, '/'); i >= 0 {
		name = name[:i]
	}
	cmd := exec.Command(os.Args[0], "-test.run=^"+name+"$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), userNetnsEnv+"=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:                 syscall.CLONE_NEWUSER | syscall.CLONE_NEWNET,
		UidMappings:                []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getuid(), Size: 1}},
		GidMappings:                []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getgid(), Size: 1}},
		GidMappingsEnableSetgroups: false,
	}
	out, err := cmd.CombinedOutput()
	switch {
	case cmd.ProcessState == nil: // the child could not be created
		t.Skipf("needs a private network namespace: unshare(CLONE_NEWNET) failed (%v; needs CAP_SYS_ADMIN) "+
			"and creating a user namespace failed too (%v)", unshareErr, err)
	case err != nil:
		t.Fatalf("test failed inside a user+network namespace (%v):\n%s", err, out)
	case strings.Contains(string(out), "--- SKIP: "+name):
		t.Skipf("unshare(CLONE_NEWNET): %v; the child in a user namespace skipped:\n%s", unshareErr, out)
	default:
		t.Logf("ran in a child process inside a new user+network namespace (unshare(CLONE_NEWNET): %v):\n%s", unshareErr, out)
	}
}

// do runs f inside the namespace and waits for it.
func (n *netns) do(f func()) {
	if n.work == nil {
		f()
		return
	}
	ch := make(chan struct{})
	n.work <- func() { defer close(ch); f() }
	<-ch
}

// ---- administrative requests (test-only) ---------------------------------------

const vethInfoPeer = 1 // VETH_INFO_PEER

// ack sends a request built by build with NLM_F_ACK and waits for the ACK.
func (c *Conn) ack(op string, build func(seq uint32)) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.s == nil {
		return ErrClosed
	}
	seq := c.nextSeq()
	build(seq)
	_, err := c.roundTrip(op, seq, modeAck, nil)
	return err
}

// addVeth creates a veth pair (like "ip link add name mtu mtu type veth peer name peer").
func (c *Conn) addVeth(name, peer string, mtu int) error {
	return c.ack("RTM_NEWLINK", func(seq uint32) {
		c.req.begin(unix.RTM_NEWLINK, unix.NLM_F_ACK|unix.NLM_F_CREATE|unix.NLM_F_EXCL, seq)
		c.req.ifinfomsg(unix.IfInfomsg{Family: unix.AF_UNSPEC})
		c.req.attrString(unix.IFLA_IFNAME, name)
		c.req.attrU32(unix.IFLA_MTU, uint32(mtu))
		li := c.req.nest(unix.IFLA_LINKINFO)
		c.req.attrString(unix.IFLA_INFO_KIND, "veth")
		data := c.req.nest(unix.IFLA_INFO_DATA)
		p := c.req.nest(vethInfoPeer)
		c.req.ifinfomsg(unix.IfInfomsg{Family: unix.AF_UNSPEC})
		c.req.attrString(unix.IFLA_IFNAME, peer)
		c.req.endNest(p)
		c.req.endNest(data)
		c.req.endNest(li)
	})
}

// setLinkUp sets or clears IFF_UP.
func (c *Conn) setLinkUp(index int, up bool) error {
	var flags uint32
	if up {
		flags = unix.IFF_UP
	}
	return c.ack("RTM_NEWLINK", func(seq uint32) {
		c.req.begin(unix.RTM_NEWLINK, unix.NLM_F_ACK, seq)
		c.req.ifinfomsg(unix.IfInfomsg{Family: unix.AF_UNSPEC, Index: int32(index), Flags: flags, Change: unix.IFF_UP})
	})
}

// delLink deletes an interface.
func (c *Conn) delLink(index int) error {
	return c.ack("RTM_DELLINK", func(seq uint32) {
		c.req.begin(unix.RTM_DELLINK, unix.NLM_F_ACK, seq)
		c.req.ifinfomsg(unix.IfInfomsg{Family: unix.AF_UNSPEC, Index: int32(index)})
	})
}

// changeAddr adds (RTM_NEWADDR) or removes (RTM_DELADDR) an address.
func (c *Conn) changeAddr(add bool, index int, p netip.Prefix, flags uint32) error {
	typ, op, nlflags := uint16(unix.RTM_DELADDR), "RTM_DELADDR", uint16(unix.NLM_F_ACK)
	if add {
		typ, op, nlflags = unix.RTM_NEWADDR, "RTM_NEWADDR", unix.NLM_F_ACK|unix.NLM_F_CREATE|unix.NLM_F_EXCL
	}
	family, _ := familyOf(p.Addr())
	return c.ack(op, func(seq uint32) {
		c.req.begin(typ, nlflags, seq)
		c.req.ifaddrmsg(unix.IfAddrmsg{Family: family, Prefixlen: uint8(p.Bits()), Index: uint32(index)})
		c.req.attrAddr(unix.IFA_LOCAL, p.Addr())
		c.req.attrAddr(unix.IFA_ADDRESS, p.Addr())
		if add {
			c.req.attrU32(unix.IFA_FLAGS, flags)
		}
	})
}

// addRoute adds a route to the main table (like "ip route add [typ] dst [via gw]
// [dev oif] [mtu mtu]").
func (c *Conn) addRoute(typ RouteType, dst netip.Prefix, gw netip.Addr, oif, mtu int) error {
	family, _ := familyOf(dst.Addr())
	scope := uint8(unix.RT_SCOPE_UNIVERSE)
	if typ == RouteUnicast && !gw.IsValid() {
		scope = unix.RT_SCOPE_LINK
	}
	return c.ack("RTM_NEWROUTE", func(seq uint32) {
		c.req.begin(unix.RTM_NEWROUTE, unix.NLM_F_ACK|unix.NLM_F_CREATE|unix.NLM_F_EXCL, seq)
		c.req.rtmsg(unix.RtMsg{Family: family, Dst_len: uint8(dst.Bits()), Table: unix.RT_TABLE_MAIN,
			Protocol: unix.RTPROT_BOOT, Scope: scope, Type: uint8(typ)})
		if dst.Bits() > 0 {
			c.req.attrAddr(unix.RTA_DST, dst.Addr())
		}
		if gw.IsValid() {
			c.req.attrAddr(unix.RTA_GATEWAY, gw)
		}
		if oif > 0 {
			c.req.attrU32(unix.RTA_OIF, uint32(oif))
		}
		if mtu > 0 {
			m := c.req.nest(unix.RTA_METRICS)
			c.req.attrU32(unix.RTAX_MTU, uint32(mtu))
			c.req.endNest(m)
		}
	})
}

// ---- ip(8) cross-checks ---------------------------------------------------------

// ipJSON runs "ip -j args..." and decodes its output into v. It reports
// false (and logs why) when ip is unavailable or fails. It only uses
// t.Errorf/t.Logf, so it may run on a namespace thread.
func ipJSON(t *testing.T, v any, args ...string) bool {
	t.Helper()
	path, err := exec.LookPath("ip")
	if err != nil {
		t.Logf("ip(8) not found; skipping the cross-check")
		return false
	}
	out, err := exec.Command(path, append([]string{"-j"}, args...)...).Output()
	if err != nil {
		t.Logf("ip -j %s: %v", strings.Join(args, " "), err)
		return false
	}
	if err := json.Unmarshal(out, v); err != nil {
		t.Errorf("ip -j %s: decoding %q: %v", strings.Join(args, " "), out, err)
		return false
	}
	return true
}

// ipRoute is one entry of "ip -j route get".
type ipRoute struct {
	Type     string           `json:"type"`
	Dst      string           `json:"dst"`
	Gateway  string           `json:"gateway"`
	Dev      string           `json:"dev"`
	Prefsrc  string           `json:"prefsrc"`
	Table    string           `json:"table"`
	Metrics  []map[string]int `json:"metrics"`
	Metric   *int             `json:"metric"`
	Protocol string           `json:"protocol"`
}

// hasIP reports whether ip(8) is installed.
func hasIP() bool {
	_, err := exec.LookPath("ip")
	return err == nil
}

// ipRouteGet runs "ip -j route get" for the same query as RouteGet(dst, src,
// oif) (oifName names oif). ok is false when ip is missing; failed is true
// when ip reported an error (no route).
func ipRouteGet(t *testing.T, dst, src netip.Addr, oifName string) (r ipRoute, ok, failed bool) {
	t.Helper()
	if !hasIP() {
		return r, false, false
	}
	args := []string{"-j"}
	if dst.Unmap().Is6() {
		args = append(args, "-6")
	}
	args = append(args, "route", "get", dst.Unmap().WithZone("").String())
	if src.IsValid() {
		args = append(args, "from", src.Unmap().WithZone("").String())
	}
	if oifName != "" {
		args = append(args, "oif", oifName)
	}
	out, err := exec.Command("ip", args...).Output()
	if err != nil {
		return r, true, true
	}
	var rs []ipRoute
	if err := json.Unmarshal(out, &rs); err != nil || len(rs) != 1 {
		t.Errorf("ip %s: decoding %q: %v", strings.Join(args, " "), out, err)
		return r, false, false
	}
	return rs[0], true, false
}

// compareRouteWithIP asserts that r (from RouteGet) agrees with ip(8) on
// type, device, preferred source, gateway, table (when ip prints it) and
// the MTU metric (when ip prints one).
func compareRouteWithIP(t *testing.T, r Route, rerr error, dst, src netip.Addr, oifName string) {
	t.Helper()
	ipr, ok, failed := ipRouteGet(t, dst, src, oifName)
	if !ok {
		return
	}
	if failed != (rerr != nil) {
		t.Errorf("RouteGet(%v) error = %v, but ip route get failed = %v", dst, rerr, failed)
		return
	}
	if failed {
		return
	}
	typ := ipr.Type
	if typ == "" {
		typ = "unicast"
	}
	if r.Type.String() != typ {
		t.Errorf("RouteGet(%v).Type = %v, ip says %q", dst, r.Type, typ)
	}
	if r.IfName != ipr.Dev {
		t.Errorf("RouteGet(%v).IfName = %q, ip says dev %q", dst, r.IfName, ipr.Dev)
	}
	wantSrc := ipr.Prefsrc
	if wantSrc == "" { // no RTA_PREFSRC: RouteGet reports the source it was given
		wantSrc = addrString(src.Unmap())
	}
	if got := addrString(r.Src); got != wantSrc {
		t.Errorf("RouteGet(%v).Src = %q, ip says prefsrc %q (from %v)", dst, got, ipr.Prefsrc, src)
	}
	if got := addrString(r.Gateway); got != ipr.Gateway {
		t.Errorf("RouteGet(%v).Gateway = %q, ip says gateway %q", dst, got, ipr.Gateway)
	}
	if got := addrString(r.Dst); got != ipr.Dst {
		t.Errorf("RouteGet(%v).Dst = %q, ip says dst %q", dst, got, ipr.Dst)
	}
	if ipr.Table != "" {
		want := map[string]int{"main": unix.RT_TABLE_MAIN, "local": unix.RT_TABLE_LOCAL, "default": unix.RT_TABLE_DEFAULT}[ipr.Table]
		if r.Table != want {
			t.Errorf("RouteGet(%v).Table = %d, ip says %q", dst, r.Table, ipr.Table)
		}
	}
	for _, m := range ipr.Metrics {
		if mtu, ok := m["mtu"]; ok && r.MTU != mtu {
			t.Errorf("RouteGet(%v).MTU = %d, ip says metric mtu %d", dst, r.MTU, mtu)
		}
	}
	if ipr.Metric != nil && r.Priority != *ipr.Metric {
		t.Errorf("RouteGet(%v).Priority = %d, ip says metric %d", dst, r.Priority, *ipr.Metric)
	}
}

// addrString formats a without zone, "" when invalid.
func addrString(a netip.Addr) string {
	if !a.IsValid() {
		return ""
	}
	return a.WithZone("").String()
}

// ipAddrInfo is one addr_info entry of "ip -j addr".
type ipAddrInfo struct {
	Family        string `json:"family"`
	Local         string `json:"local"`
	Address       string `json:"address"`
	Prefixlen     int    `json:"prefixlen"`
	Scope         string `json:"scope"`
	Label         string `json:"label"`
	Dynamic       bool   `json:"dynamic"`
	Tentative     bool   `json:"tentative"`
	DADFailed     bool   `json:"dadfailed"`
	NoDAD         bool   `json:"nodad"`
	Deprecated    bool   `json:"deprecated"`
	Optimistic    bool   `json:"optimistic"`
	NoPrefixRoute bool   `json:"noprefixroute"`
	MngTmpAddr    bool   `json:"mngtmpaddr"`
}

// ipLink is one entry of "ip -j addr" / "ip -j link".
type ipLink struct {
	Ifindex  int          `json:"ifindex"`
	Ifname   string       `json:"ifname"`
	Flags    []string     `json:"flags"`
	MTU      int          `json:"mtu"`
	LinkType string       `json:"link_type"`
	Address  string       `json:"address"`
	AddrInfo []ipAddrInfo `json:"addr_info"`
}

// compareAddrsWithIP asserts that addrs is exactly the set of addresses
// "ip -j addr" lists, with equal interface, prefix, scope, label and flags.
func compareAddrsWithIP(t *testing.T, addrs []Addr) {
	t.Helper()
	var links []ipLink
	if !ipJSON(t, &links, "addr") {
		return
	}
	type key struct {
		index  int
		prefix netip.Prefix
	}
	ours := make(map[key]Addr)
	for _, a := range addrs {
		ours[key{a.Index, a.Prefix}] = a
	}
	n := 0
	for _, l := range links {
		for _, ai := range l.AddrInfo {
			if ai.Family != "inet" && ai.Family != "inet6" {
				continue
			}
			n++
			ip, err := netip.ParseAddr(ai.Local)
			if err != nil {
				t.Errorf("ip addr: bad local %q", ai.Local)
				continue
			}
			k := key{l.Ifindex, netip.PrefixFrom(ip, ai.Prefixlen)}
			a, ok := ours[k]
			if !ok {
				t.Errorf("Addrs() lacks %v on %s (index %d), which ip lists", k.prefix, l.Ifname, l.Ifindex)
				continue
			}
			if a.IfName != l.Ifname {
				t.Errorf("%v: IfName = %q, ip says %q", k.prefix, a.IfName, l.Ifname)
			}
			if a.Scope.String() != ai.Scope {
				t.Errorf("%v: Scope = %v, ip says %q", k.prefix, a.Scope, ai.Scope)
			}
			if ai.Family == "inet" && a.Label != ai.Label {
				t.Errorf("%v: Label = %q, ip says %q", k.prefix, a.Label, ai.Label)
			}
			if peer := addrString(a.Peer); ai.Address != "" && peer != ai.Address {
				t.Errorf("%v: Peer = %q, ip says address %q", k.prefix, peer, ai.Address)
			}
			for _, f := range []struct {
				name   string
				ours   bool
				theirs bool
			}{
				{"dynamic (not permanent)", !a.Flags.Permanent(), ai.Dynamic},
				{"tentative", a.Flags.Tentative(), ai.Tentative},
				{"dadfailed", a.Flags.DADFailed(), ai.DADFailed},
				{"deprecated", a.Flags.Deprecated(), ai.Deprecated},
				{"nodad", a.Flags&unix.IFA_F_NODAD != 0, ai.NoDAD},
				{"optimistic", a.Flags&unix.IFA_F_OPTIMISTIC != 0, ai.Optimistic},
				{"noprefixroute", a.Flags&unix.IFA_F_NOPREFIXROUTE != 0, ai.NoPrefixRoute},
				{"mngtmpaddr", a.Flags&unix.IFA_F_MANAGETEMPADDR != 0, ai.MngTmpAddr},
			} {
				if f.ours != f.theirs {
					t.Errorf("%v: flag %s = %v (Flags %v), ip says %v", k.prefix, f.name, f.ours, a.Flags, f.theirs)
				}
			}
		}
	}
	if n != len(addrs) {
		t.Errorf("Addrs() returned %d addresses, ip lists %d", len(addrs), n)
	}
}

// ipFlagBits maps the flag names ip(8) prints to IFF_* bits.
var ipFlagBits = map[string]LinkFlags{
	"UP": unix.IFF_UP, "BROADCAST": unix.IFF_BROADCAST, "DEBUG": unix.IFF_DEBUG, "LOOPBACK": unix.IFF_LOOPBACK,
	"POINTOPOINT": unix.IFF_POINTOPOINT, "NOTRAILERS": unix.IFF_NOTRAILERS, "NOARP": unix.IFF_NOARP,
	"PROMISC": unix.IFF_PROMISC, "ALLMULTI": unix.IFF_ALLMULTI, "MASTER": unix.IFF_MASTER, "SLAVE": unix.IFF_SLAVE,
	"MULTICAST": unix.IFF_MULTICAST, "PORTSEL": unix.IFF_PORTSEL, "AUTOMEDIA": unix.IFF_AUTOMEDIA,
	"DYNAMIC": unix.IFF_DYNAMIC, "LOWER_UP": unix.IFF_LOWER_UP, "DORMANT": unix.IFF_DORMANT, "ECHO": unix.IFF_ECHO,
}

// compareLinksWithIP asserts that links is exactly the set "ip -j link"
// lists, with equal name, MTU, flags and (Ethernet/loopback) address.
func compareLinksWithIP(t *testing.T, links []Link) {
	t.Helper()
	var theirs []ipLink
	if !ipJSON(t, &theirs, "link") {
		return
	}
	if len(theirs) != len(links) {
		t.Errorf("Links() returned %d links, ip lists %d", len(links), len(theirs))
	}
	ours := make(map[int]Link)
	for _, l := range links {
		ours[l.Index] = l
	}
	var mask LinkFlags
	for _, b := range ipFlagBits {
		mask |= b
	}
	for _, il := range theirs {
		l, ok := ours[il.Ifindex]
		if !ok {
			t.Errorf("Links() lacks %s (index %d)", il.Ifname, il.Ifindex)
			continue
		}
		if l.Name != il.Ifname || l.MTU != il.MTU {
			t.Errorf("link %d: name %q mtu %d, ip says %q mtu %d", l.Index, l.Name, l.MTU, il.Ifname, il.MTU)
		}
		var want LinkFlags
		noCarrier := false
		for _, f := range il.Flags {
			want |= ipFlagBits[f]
			noCarrier = noCarrier || f == "NO-CARRIER"
		}
		if l.Flags&mask != want {
			t.Errorf("link %s: Flags %v, ip says %v", l.Name, l.Flags&mask, il.Flags)
		}
		if got := l.Flags.Up() && !l.Flags.Running(); got != noCarrier {
			t.Errorf("link %s: up-but-not-running = %v, ip NO-CARRIER = %v", l.Name, got, noCarrier)
		}
		if (l.Type == unix.ARPHRD_ETHER || l.Type == unix.ARPHRD_LOOPBACK) && l.HardwareAddr.String() != il.Address {
			t.Errorf("link %s: HardwareAddr %v, ip says %q", l.Name, l.HardwareAddr, il.Address)
		}
	}
}

// ---- nested attributes ---------------------------------------------------

// The library sends no nested attribute (it asks the kernel, which answers
// with them); tests build the kernel's answers with these.

// nest opens a nested attribute and returns its offset for endNest.
func (m *builder) nest(typ uint16) int {
	off := len(m.b)
	m.b = ne.AppendUint16(m.b, 0)
	m.b = ne.AppendUint16(m.b, typ) // no NLA_F_NESTED, as iproute2 does
	return off
}

// endNest fixes the length of the nested attribute opened at off.
func (m *builder) endNest(off int) {
	ne.PutUint16(m.b[off:], uint16(len(m.b)-off))
}
