package kernel

import (
	"encoding/binary"
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cmrt/cmrt/fabric"
	"github.com/cmrt/cmrt/fabric/kernel/internal/ucma"
)

// roundTrip encodes e as the kernel would (with the given view of the
// param union) and decodes it back, as GET_EVENT's caller sees it.
func roundTrip(t *testing.T, e ucma.Event, view ucma.ParamView) *ucma.Event {
	t.Helper()
	b := make([]byte, ucma.EventRespSize)
	if err := e.Encode(b, view); err != nil {
		t.Fatal(err)
	}
	var d ucma.Event
	if err := d.Decode(b); err != nil {
		t.Fatal(err)
	}
	return &d
}

func TestDecodeEventConnectRequest(t *testing.T) {
	e := ucma.Event{UID: 7, ID: 3, Event: fabric.EventConnectRequest}
	e.Conn = ucma.ConnParam{QPNum: 0x12, ResponderResources: 1, InitiatorDepth: 2, FlowControl: 1,
		RetryCount: 5, RNRRetryCount: 7, SRQ: 1}
	// The kernel reports a REQ's private data at its full IP-mode length,
	// zero-padded.
	pd := make([]byte, 56)
	copy(pd, "hello")
	if err := e.Conn.SetPrivateData(pd); err != nil {
		t.Fatal(err)
	}
	var raw fabric.RawEvent
	raw.Group = netip.MustParseAddr("239.1.1.1") // stale fields must be cleared
	raw.QKey = 9
	decodeEvent(roundTrip(t, e, ucma.ParamConn), false, &raw)
	if raw.UID != 7 || raw.Type != fabric.EventConnectRequest || raw.Status != 0 {
		t.Fatalf("header: %+v", raw)
	}
	if raw.QPNum != 0x12 || raw.ResponderResources != 1 || raw.InitiatorDepth != 2 || raw.FlowControl != 1 ||
		raw.RetryCount != 5 || raw.RNRRetryCount != 7 || raw.SRQ != 1 {
		t.Fatalf("conn params: %+v", raw)
	}
	if raw.PrivateDataLen != 56 || string(raw.PrivateData[:5]) != "hello" {
		t.Fatalf("private data: %d %q", raw.PrivateDataLen, raw.PrivateData[:8])
	}
	if raw.Group.IsValid() || raw.QKey != 0 || raw.Child != nil {
		t.Fatalf("stale fields kept: %+v", raw)
	}
}

func TestDecodeEventRejected(t *testing.T) {
	e := ucma.Event{UID: 9, ID: 1, Event: fabric.EventRejected, Status: 28}
	_ = e.Conn.SetPrivateData(append([]byte("go away"), make([]byte, 141)...))
	var raw fabric.RawEvent
	decodeEvent(roundTrip(t, e, ucma.ParamConn), false, &raw)
	if raw.Type != fabric.EventRejected || raw.Status != 28 || raw.PrivateDataLen != 148 ||
		!strings.HasPrefix(string(raw.PrivateData[:raw.PrivateDataLen]), "go away") {
		t.Fatalf("%+v", raw)
	}
	e = ucma.Event{UID: 9, ID: 1, Event: fabric.EventUnreachable, Status: -int32(syscall.ETIMEDOUT)}
	decodeEvent(roundTrip(t, e, ucma.ParamConn), false, &raw)
	if raw.Type != fabric.EventUnreachable || raw.Status != -110 || raw.PrivateDataLen != 0 {
		t.Fatalf("%+v", raw)
	}
}

func TestDecodeEventUD(t *testing.T) {
	e := ucma.Event{UID: 11, ID: 4, Event: fabric.EventEstablished}
	e.UD.QPNum, e.UD.QKey = 0x14, 0x01234567
	e.UD.AHAttr = ucma.AHAttr{DGID: ucma.GID(netip.MustParseAddr("::ffff:10.0.0.1").As16()), HopLimit: 64,
		SGIDIndex: 1, DLID: 0, SL: 0, IsGlobal: 1, PortNum: 1, FlowLabel: 5, TrafficClass: 3}
	e.UD.PrivateDataLen = 136
	copy(e.UD.PrivateData[:], "sidr rep")
	var raw fabric.RawEvent
	decodeEvent(roundTrip(t, e, ucma.ParamUD), true, &raw)
	if raw.Type != fabric.EventEstablished || raw.QPNum != 0x14 || raw.QKey != fabric.UDPQKey {
		t.Fatalf("%+v", raw)
	}
	if raw.AH.Addr() != netip.MustParseAddr("10.0.0.1") || raw.AH.HopLimit != 64 || raw.AH.IsGlobal != 1 ||
		raw.AH.PortNum != 1 || raw.AH.SGIDIndex != 1 || raw.AH.FlowLabel != 5 || raw.AH.TrafficClass != 3 {
		t.Fatalf("ah %+v", raw.AH)
	}
	if raw.PrivateDataLen != 136 || string(raw.PrivateData[:8]) != "sidr rep" {
		t.Fatalf("private data %d", raw.PrivateDataLen)
	}
	// The same bytes read through the conn view would be garbage: the
	// view follows the id's QP type.
	decodeEvent(roundTrip(t, e, ucma.ParamUD), false, &raw)
	if raw.QKey != 0 || raw.PrivateDataLen == 136 {
		t.Fatalf("conn view of a UD event: %+v", raw)
	}
}

func TestDecodeEventMulticastAndUser(t *testing.T) {
	e := ucma.Event{UID: 21, ID: 2, Event: fabric.EventMulticastJoin}
	e.UD.QPNum, e.UD.QKey = 0xFFFFFF, 0x01234567
	e.UD.AHAttr.DGID = ucma.GID(netip.MustParseAddr("::ffff:239.1.1.1").As16())
	e.UD.PrivateDataLen = 3
	var raw fabric.RawEvent
	decodeEvent(roundTrip(t, e, ucma.ParamUD), false, &raw)
	if raw.Type != fabric.EventMulticastJoin || raw.QPNum != fabric.MulticastQPNum || raw.QKey != fabric.UDPQKey ||
		raw.AH.Addr() != netip.MustParseAddr("239.1.1.1") || raw.PrivateDataLen != 0 {
		t.Fatalf("%+v", raw)
	}
	u := ucma.Event{UID: 5, Event: fabric.EventUser, Status: -3, Arg: 0xdeadbeefcafe}
	decodeEvent(roundTrip(t, u, ucma.ParamArg), false, &raw)
	if raw.Type != fabric.EventUser || raw.Status != -3 || raw.Arg != 0xdeadbeefcafe {
		t.Fatalf("%+v", raw)
	}
}

func TestRouteFromQuery(t *testing.T) {
	src, _ := ucma.IPAddr(netip.MustParseAddrPort("10.0.0.1:52253"))
	dst, _ := ucma.IPAddr(netip.MustParseAddrPort("10.0.0.2:7471"))
	q := ucma.QueryAddrResp{NodeGUID: 0xc0fd13fffe959394, PortNum: 1, PKey: 0xffff, Src: src, Dst: dst,
		SrcSize: 16, DstSize: 16, IBDevIndex: 0}
	b := make([]byte, ucma.QueryAddrRespSize)
	if err := q.Encode(b); err != nil {
		t.Fatal(err)
	}
	var d ucma.QueryAddrResp
	if err := d.Decode(b); err != nil {
		t.Fatal(err)
	}
	var ri routeInfo
	ri.fromAddr(&d)
	// Before route resolution: no path.
	r := ri.route("rxe0")
	want := fabric.Route{Src: netip.MustParseAddrPort("10.0.0.1:52253"), Dst: netip.MustParseAddrPort("10.0.0.2:7471"),
		Device: "rxe0", PortNum: 1}
	if r != want {
		t.Fatalf("route %+v, want %+v", r, want)
	}
	// After: the path record's MTU (RoCE on a 1500-byte netdev: 1024).
	pb, err := ucma.EncodeQueryPath(make([]byte, ucma.OutQueryPath), []ucma.PathData{{
		Flags: ucma.PathGMP | ucma.PathPrimary | ucma.PathBidirectional, Record: ucma.PathRecord{MTU: 3}}})
	if err != nil {
		t.Fatal(err)
	}
	var paths [1]ucma.PathData
	num, n, _ := ucma.DecodeQueryPath(pb, paths[:])
	ri.numPaths = num
	if n > 0 {
		ri.mtu = paths[0].Record.MTU
	}
	want.NumPaths, want.MTU = 1, 1024
	if r := ri.route("rxe0"); r != want {
		t.Fatalf("route %+v, want %+v", r, want)
	}
	// Unbound: no device, no port, no addresses.
	var none routeInfo
	if r := none.route(""); r != (fabric.Route{}) {
		t.Fatalf("unbound route %+v", r)
	}
}

func TestRouteFromQueryRoute(t *testing.T) {
	src, _ := ucma.IPAddr(netip.MustParseAddrPort("[::ffff:10.0.0.1]:1"))
	dst, _ := ucma.IPAddr(netip.MustParseAddrPort("[fe80::1%3]:2"))
	q := ucma.QueryRouteResp{NodeGUID: 42, NumPaths: 1, PortNum: 1, Src: src, Dst: dst, IBDevIndex: invalidIndex}
	q.Route[0].MTU = 5
	b := make([]byte, ucma.QueryRouteRespSize)
	if err := q.Encode(b); err != nil {
		t.Fatal(err)
	}
	var d ucma.QueryRouteResp
	if err := d.Decode(b); err != nil {
		t.Fatal(err)
	}
	var ri routeInfo
	ri.fromRoute(&d)
	r := ri.route("mlx5_0")
	if r.Src != netip.MustParseAddrPort("10.0.0.1:1") || r.Dst != netip.MustParseAddrPort("[fe80::1%3]:2") ||
		r.MTU != 4096 || r.NumPaths != 1 || r.Device != "mlx5_0" || r.PortNum != 1 {
		t.Fatalf("%+v", r)
	}
}

func TestMTUBytes(t *testing.T) {
	for m, want := range map[uint8]int{0: 0, 1: 256, 2: 512, 3: 1024, 4: 2048, 5: 4096, 6: 0} {
		if got := mtuBytes(m); got != want {
			t.Errorf("mtuBytes(%d) = %d, want %d", m, got, want)
		}
	}
}

func TestDepth(t *testing.T) {
	for _, c := range []struct {
		v, cap, req uint8
		accept      bool
		ps          fabric.PortSpace
		want        uint8
		err         bool
	}{
		{0xFF, 128, 0, false, fabric.PSTCP, 128, false},         // connect: device max
		{4, 128, 0, false, fabric.PSTCP, 4, false},              // explicit
		{200, 128, 0, false, fabric.PSTCP, 0, true},             // above the cap on PS_TCP
		{200, 128, 0, false, fabric.PSIB, 200, false},           // other port spaces pass
		{0xFF, 16, 128, true, fabric.PSTCP, 16, false},          // accept: min(request, cap)
		{0xFF, 128, 3, true, fabric.PSTCP, 3, false},            // accept: the request's
		{128, 16, 128, true, fabric.PSTCP, 16, false},           // accept(nil) passes the request's
		{17, 16, 128, true, fabric.PSTCP, 0, true},              // explicit, above the cap
		{1, 16, 128, true, fabric.PSTCP, 1, false},              // explicit
		{0, 16, 0, true, fabric.PSTCP, 0, false},                // zero
		{0xFF, defaultRdAtom, 0, false, fabric.PSUDP, 1, false}, // unknown driver
	} {
		got, err := depth(c.v, c.cap, c.req, c.accept, c.ps)
		if (err != nil) != c.err || (err == nil && got != c.want) {
			t.Errorf("depth(%d, cap %d, req %d, accept %v, %s) = %d, %v; want %d, err %v",
				c.v, c.cap, c.req, c.accept, c.ps, got, err, c.want, c.err)
		}
		if err != nil && !errors.Is(err, syscall.EINVAL) {
			t.Errorf("error %v is not EINVAL", err)
		}
	}
}

func TestTimeoutAndSockaddr(t *testing.T) {
	if timeoutMs(0) != 2000 || timeoutMs(-1) != 2000 || timeoutMs(time.Microsecond) != 1 ||
		timeoutMs(1500*time.Millisecond) != 1500 || timeoutMs(1000*time.Hour) != 1<<31-1 {
		t.Fatal("timeoutMs")
	}
	a, err := sockaddr(netip.MustParseAddrPort("[::ffff:10.0.0.1]:7471"))
	if err != nil || a.Family() != ucma.AFInet || a.Port() != 7471 {
		t.Fatalf("mapped v4: %v %v", a, err)
	}
	a, err = sockaddr(netip.AddrPort{})
	if err != nil || a.IsValid() {
		t.Fatalf("none: %v %v", a, err)
	}
	a, err = sockaddr(netip.MustParseAddrPort("[fe80::1%1]:1"))
	if err != nil || a.Family() != ucma.AFInet6 || a.ScopeID() != 1 {
		t.Fatalf("v6: %v %v", a, err)
	}
}

func TestOpenWithoutDevice(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "rdma_cm")
	f := New(WithDevicePath(missing))
	_, err := f.Open()
	if !errors.Is(err, syscall.ENODEV) {
		t.Fatalf("Open: %v, want ENODEV", err)
	}
	for _, s := range []string{missing, "modprobe rdma_ucm", "rdma_rxe", "CMRT_FABRIC=soft"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("message %q does not mention %q", err, s)
		}
	}
	// A path that is not a character device.
	reg := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(reg, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := New(WithDevicePath(reg)).Open(); !errors.Is(err, syscall.ENODEV) ||
		!strings.Contains(err.Error(), "not a character device") {
		t.Fatalf("regular file: %v", err)
	}
}

func TestOpenABIVersion(t *testing.T) {
	if _, err := os.Stat("/dev/null"); err != nil {
		t.Skip("no /dev/null")
	}
	abi := filepath.Join(t.TempDir(), "abi_version")
	for _, c := range []struct {
		content string
		ok      bool
	}{{"4\n", true}, {"3\n", true}, {"5\n", false}, {"2\n", false}, {"x\n", false}} {
		if err := os.WriteFile(abi, []byte(c.content), 0o600); err != nil {
			t.Fatal(err)
		}
		// /dev/null is a character device that accepts every write: it
		// stands in for rdma_cm to reach the ABI check.
		err := checkABI(abi)
		if c.ok != (err == nil) || (!c.ok && !errors.Is(err, syscall.EPERM)) {
			t.Errorf("ABI %q: %v", strings.TrimSpace(c.content), err)
		}
		_, err = New(WithDevicePath("/dev/null"), WithABIVersionPath(abi), WithAFIB(false)).openChecked()
		if c.ok != (err == nil) {
			t.Errorf("Open with ABI %q: %v", strings.TrimSpace(c.content), err)
		}
	}
	// No ABI file (containers may hide sysfs): the open decides.
	if err := checkABI(filepath.Join(t.TempDir(), "none")); err != nil {
		t.Errorf("missing ABI file: %v", err)
	}
}

// openChecked opens the device and checks the ABI, closing at once.
func (f *Fabric) openChecked() (int, error) {
	fd, err := openDevice(f.opts.devicePath)
	if err != nil {
		return -1, err
	}
	defer syscall.Close(fd)
	return fd, checkABI(f.opts.abiPath)
}

const fakeSysfs = "testdata/sysfs/infiniband"

func TestDevicesFromSysfs(t *testing.T) {
	devs, err := readDevices(fakeSysfs, false)
	if err != nil {
		t.Fatal(err)
	}
	names := make([]string, len(devs))
	for k, d := range devs {
		names[k] = d.Name
		if d.Index != k {
			t.Errorf("%s: index %d, want %d", d.Name, d.Index, k)
		}
	}
	if !slices.Equal(names, []string{"mlx5_0", "rxe0", "siw0"}) {
		t.Fatalf("devices %v", names)
	}
	mlx, rxe, siw := devs[0], devs[1], devs[2]
	if rxe.Transport != "InfiniBand" || rxe.NodeGUID != 0xc0fd13fffe959394 || rxe.Netdev != "lo" ||
		rxe.MaxQPRdAtom != 128 || rxe.MaxQPInitRdAtom != 128 {
		t.Errorf("rxe0: %+v", rxe)
	}
	if !slices.Contains(rxe.Addrs, netip.MustParseAddr("127.0.0.1")) {
		t.Logf("rxe0 addrs %v (no loopback address here?)", rxe.Addrs)
	}
	if siw.Transport != "iWARP" || siw.NodeGUID != 0x44ffd2fffe18128b || siw.Netdev != "" ||
		siw.MaxQPRdAtom != 128 {
		t.Errorf("siw0: %+v", siw)
	}
	if mlx.Transport != "InfiniBand" || mlx.Netdev != "lo" || mlx.MaxQPRdAtom != 16 || mlx.MaxQPInitRdAtom != 16 {
		t.Errorf("mlx5_0: %+v", mlx)
	}

	f := New(WithSysfsRoot(fakeSysfs))
	if d, ok := f.device(0x44ffd2fffe18128b, invalidIndex); !ok || d.Name != "siw0" {
		t.Errorf("by GUID: %+v %v", d, ok)
	}
	if d, ok := f.device(0xc0fd13fffe959394, 1); !ok || d.Name != "rxe0" {
		t.Errorf("by GUID and index: %+v %v", d, ok)
	}
	if _, ok := f.device(1, invalidIndex); ok {
		t.Error("unknown GUID found")
	}
	if ird, ord := f.rdCaps(1, invalidIndex); ird != defaultRdAtom || ord != defaultRdAtom {
		t.Errorf("default caps %d/%d", ird, ord)
	}
	list, err := f.Devices()
	if err != nil || len(list) != 3 {
		t.Fatalf("Devices: %v %v", list, err)
	}
}

func TestDevicesWithoutSysfs(t *testing.T) {
	_, err := New(WithSysfsRoot(filepath.Join(t.TempDir(), "none"))).Devices()
	if !errors.Is(err, syscall.ENODEV) || !strings.Contains(err.Error(), "rdma_rxe") {
		t.Fatalf("%v", err)
	}
	empty := t.TempDir()
	if _, err := New(WithSysfsRoot(empty)).Devices(); !errors.Is(err, syscall.ENODEV) {
		t.Fatalf("empty: %v", err)
	}
}

func TestSysfsParsing(t *testing.T) {
	if g, err := parseGUID("78d7:a6ff:fe13:372d"); err != nil || g != 0x78d7a6fffe13372d {
		t.Fatalf("%x %v", g, err)
	}
	if _, err := parseGUID("78d7:a6ff"); err == nil {
		t.Fatal("short GUID accepted")
	}
	for in, want := range map[string]string{"1: CA": "InfiniBand", "4: RNIC": "iWARP", "2: switch": "InfiniBand",
		"6: usNIC UDP": "usNIC", "": "InfiniBand"} {
		if got := transportOf(in); got != want {
			t.Errorf("transportOf(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestNetlinkAttrs(t *testing.T) {
	var b []byte
	b = nlPutU32(b, nldevAttrDevIndex, 3)
	// "rxe0\0" after a 4-byte header: length 9, padded to 12.
	name := make([]byte, 12)
	binary.NativeEndian.PutUint16(name[0:], 9)
	binary.NativeEndian.PutUint16(name[2:], nldevAttrDevName)
	copy(name[4:], "rxe0")
	b = append(b, name...)
	b = nlPutU32(b, nldevAttrNdevIndex|0x8000, 7) // flag bits are masked
	m := nlAttrs(b)
	if nlU32(m[nldevAttrDevIndex]) != 3 || nlString(m[nldevAttrDevName]) != "rxe0" || nlU32(m[nldevAttrNdevIndex]) != 7 {
		t.Fatalf("%v", m)
	}
	if nlU32(nil) != 0 || nlString(nil) != "" {
		t.Fatal("empty attributes")
	}
	if len(nlAttrs([]byte{200, 0, 1, 0})) != 0 {
		t.Fatal("overlong attribute accepted")
	}
	if nldevType(nldevCmdGet) != 5<<10|1 {
		t.Fatal("message type")
	}
}

func TestRegistered(t *testing.T) {
	f, ok := fabric.Lookup("kernel")
	if !ok || f != Default() || f.Name() != "kernel" {
		t.Fatalf("lookup: %v %v", f, ok)
	}
	t.Setenv(fabric.Env, "kernel")
	if f, err := fabric.Default(); err != nil || f != Default() {
		t.Fatalf("CMRT_FABRIC=kernel: %v %v", f, err)
	}
	if New(WithName("kernel2")).Name() != "kernel2" {
		t.Fatal("WithName")
	}
}

func TestDataPath(t *testing.T) {
	// The fabric has a data path: the id layer's CreateQP reaches it.
	var ep fabric.Endpoint = &endpoint{}
	if _, ok := ep.(fabric.QPCreator); !ok {
		t.Fatal("kernel endpoints do not implement fabric.QPCreator")
	}
	if _, ok := ep.(Endpoint); !ok {
		t.Fatal("kernel endpoints do not implement kernel.Endpoint")
	}
}

// TestQueryDeviceOnce: the device an id is attached to is asked of the
// kernel (one QUERY) until an answer names one, then remembered: the
// Connect, Accept and CreateQP after that cost no command. A pipe stands
// in for the rdma_cm descriptor: it takes each command and leaves the
// response zeroed (no device).
func TestQueryDeviceOnce(t *testing.T) {
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC|unix.O_NONBLOCK); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Close(p[0]); _ = unix.Close(p[1]) })
	b, err := ucma.NewBuffers()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	// written returns the commands written since the last call.
	written := func() []ucma.Cmd {
		var cmds []ucma.Cmd
		buf := make([]byte, 4096)
		n, _ := unix.Read(p[0], buf)
		for msg := buf[:max(n, 0)]; len(msg) > 0; {
			h, err := ucma.DecodeHeader(msg)
			if err != nil || len(msg) < ucma.HeaderSize+int(h.In) {
				t.Fatalf("bad command bytes %x", msg)
			}
			cmds = append(cmds, h.Cmd)
			msg = msg[ucma.HeaderSize+int(h.In):]
		}
		return cmds
	}
	ep := &endpoint{f: New(WithDevicePath(filepath.Join(t.TempDir(), "none"))), ps: fabric.PSTCP}
	for i := range 2 {
		guid, _, _, err := ep.queryDevice(p[1], b)
		if err != nil || guid != 0 {
			t.Fatalf("unattached id, query %d: GUID %x, %v", i, guid, err)
		}
		if cmds := written(); len(cmds) != 1 {
			t.Fatalf("unattached id, query %d: commands %v, want one query", i, cmds)
		}
	}
	ep.dev = devRef{guid: 0x1234, index: 3, port: 2}
	guid, index, port, err := ep.queryDevice(p[1], b)
	if err != nil || guid != 0x1234 || index != 3 || port != 2 {
		t.Fatalf("attached id: %x %d %d, %v", guid, index, port, err)
	}
	cp, err := ep.connParam(p[1], b, &fabric.ConnParam{ResponderResources: 0xFF, InitiatorDepth: 0xFF, QPNum: 9}, false)
	if err != nil || cp.Valid != 1 || cp.QPNum != 9 || cp.ResponderResources != defaultRdAtom || cp.InitiatorDepth != defaultRdAtom {
		t.Fatalf("connParam of an attached id: %+v, %v", cp, err)
	}
	if cmds := written(); len(cmds) != 0 {
		t.Fatalf("attached id: commands %v, want none", cmds)
	}
}
