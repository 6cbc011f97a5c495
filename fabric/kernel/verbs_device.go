package kernel

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"github.com/cmrt/cmrt/fabric"
	"github.com/cmrt/cmrt/fabric/kernel/internal/provider"
	"github.com/cmrt/cmrt/fabric/kernel/internal/uverbs"
)

// verbsDev is one RDMA device's verbs context, shared by the fabric's QPs
// on it and open while any exists: what librdmacm's cma_device holds
// (ibv_context), without its shared PD (each QP has its own, so a region
// registered through one id is out of reach of every other id's peer, as
// on the software fabric).
type verbsDev struct {
	f     *Fabric
	name  string
	drv   provider.Driver
	ctx   *uverbs.Context
	attr  uverbs.DeviceAttr
	port  uverbs.PortAttr // port 1
	iwarp bool
	refs  int // under f.vdMu

	mu    sync.Mutex
	qps   map[uint64]*vqp // by user handle, for async events
	next  uint64
	gids  map[uint8]gidEntry // port 1's GID table, read on demand
	async chan struct{}      // closed when the async event loop ends
}

// gidEntry is one GID table entry of sysfs: the GID and its type.
type gidEntry struct {
	gid    [16]byte
	roceV2 bool
}

// acquireVerbs opens (or shares) the verbs context of device d.
func (f *Fabric) acquireVerbs(d fabric.Device) (*verbsDev, error) {
	f.vdMu.Lock()
	defer f.vdMu.Unlock()
	if vd := f.vdevs[d.Name]; vd != nil {
		vd.refs++
		return vd, nil
	}
	df, err := findVerbsDev(f.opts.sysfsRoot, d.Name, uint32(d.Index))
	if err != nil {
		return nil, err
	}
	drv, err := providerFor(d.Name, df.driverID, df.driverName)
	if err != nil {
		return nil, err
	}
	ctx, _, err := uverbs.Open(df.path, &uverbs.GetContext{DriverOut: drv.ContextDriverOut()})
	if err != nil {
		return nil, fmt.Errorf("kernel: open %s for %s: %w", df.path, d.Name, err)
	}
	vd := &verbsDev{f: f, name: d.Name, drv: drv, ctx: ctx, iwarp: d.Transport == "iWARP", refs: 1,
		qps: make(map[uint64]*vqp), async: make(chan struct{})}
	resp, err := ctx.Exec(&uverbs.QueryDevice{})
	if err != nil {
		_ = ctx.Close()
		return nil, fmt.Errorf("kernel: %s: QUERY_DEVICE: %w", d.Name, err)
	}
	_ = vd.attr.Decode(resp)
	if resp, err = ctx.Exec(&uverbs.QueryPort{Port: 1}); err == nil {
		_ = vd.port.Decode(resp)
	}
	if f.vdevs == nil {
		f.vdevs = make(map[string]*verbsDev)
	}
	f.vdevs[d.Name] = vd
	go vd.asyncLoop()
	return vd, nil
}

// release drops a reference; the last one closes the context and waits for
// its async event loop to end.
func (vd *verbsDev) release() {
	f := vd.f
	f.vdMu.Lock()
	vd.refs--
	last := vd.refs == 0
	if last {
		delete(f.vdevs, vd.name)
	}
	f.vdMu.Unlock()
	if last {
		_ = vd.ctx.Close()
		<-vd.async
	}
}

// addQP registers a QP for its async events and returns its user handle.
func (vd *verbsDev) addQP(q *vqp) uint64 {
	vd.mu.Lock()
	defer vd.mu.Unlock()
	vd.next++
	vd.qps[vd.next] = q
	return vd.next
}

func (vd *verbsDev) dropQP(h uint64) {
	vd.mu.Lock()
	delete(vd.qps, h)
	vd.mu.Unlock()
}

func (vd *verbsDev) qp(h uint64) *vqp {
	vd.mu.Lock()
	defer vd.mu.Unlock()
	return vd.qps[h]
}

// asyncLoop reads the context's async events until it is closed, and
// reports them as the software fabric reports the same conditions: a QP
// that received its first message before the CM's RTU (COMM_EST) tells the
// CM, which establishes the connection; a QP in error (QP_FATAL,
// QP_REQ_ERR, QP_ACCESS_ERR) is disconnected, so that both ids get
// DISCONNECTED, and its later work requests complete with WCWRFlushErr.
// Other events (port, CQ and device events) need nothing from cmrt.
func (vd *verbsDev) asyncLoop() {
	defer close(vd.async)
	var ev uverbs.AsyncEvent
	for {
		if err := vd.ctx.ReadAsyncEvent(&ev); err != nil {
			if uverbs.IsClosed(err) {
				return
			}
			continue
		}
		if !ev.Type.QPEvent() {
			continue
		}
		q := vd.qp(ev.Element)
		if q == nil {
			continue
		}
		switch ev.Type {
		case uverbs.EventCommEst:
			_ = q.ep.Notify(fabric.AsyncCommEst)
		case uverbs.EventQPFatal, uverbs.EventQPReqErr, uverbs.EventQPAccessErr:
			q.fatal()
		}
	}
}

// sgidIndex returns the index of port 1's RoCE v2 GID for a, the GID UD
// address handles of a QP bound to a must use on RoCE, or false.
func (vd *verbsDev) sgidIndex(a netip.Addr) (uint8, bool) {
	g16 := netip.AddrFrom16(a.Unmap().As16()) // IPv4 addresses in their IPv4-mapped form
	vd.mu.Lock()
	defer vd.mu.Unlock()
	for attempt := 0; attempt < 2; attempt++ {
		if vd.gids == nil || attempt > 0 {
			vd.gids = readGIDs(filepath.Join(vd.f.opts.sysfsRoot, vd.name, "ports", "1"))
		}
		for k, e := range vd.gids {
			if e.roceV2 && netip.AddrFrom16(e.gid) == g16 {
				return k, true
			}
		}
	}
	return 0, false
}

// gidFits reports whether port 1's GID at index k is a RoCE v2 GID of the
// address family of dgid.
func (vd *verbsDev) gidFits(k uint8, dgid [16]byte) bool {
	vd.mu.Lock()
	defer vd.mu.Unlock()
	if vd.gids == nil {
		vd.gids = readGIDs(filepath.Join(vd.f.opts.sysfsRoot, vd.name, "ports", "1"))
	}
	e, ok := vd.gids[k]
	if !ok || !e.roceV2 {
		return false
	}
	return netip.AddrFrom16(e.gid).Is4In6() == netip.AddrFrom16(dgid).Is4In6()
}

// readGIDs reads a port's non-zero GID table entries from sysfs.
func readGIDs(port string) map[uint8]gidEntry {
	out := make(map[uint8]gidEntry)
	ents, err := os.ReadDir(filepath.Join(port, "gids"))
	if err != nil {
		return out
	}
	for _, e := range ents {
		k, err := strconv.Atoi(e.Name())
		if err != nil || k < 0 || k > 255 {
			continue
		}
		a, err := netip.ParseAddr(readTrim(filepath.Join(port, "gids", e.Name())))
		if err != nil || !a.Is6() || a.IsUnspecified() {
			continue
		}
		t := readTrim(filepath.Join(port, "gid_attrs", "types", e.Name()))
		out[uint8(k)] = gidEntry{gid: a.As16(), roceV2: strings.Contains(strings.ToLower(t), "v2")}
	}
	return out
}
