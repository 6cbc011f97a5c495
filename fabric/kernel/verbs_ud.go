package kernel

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"syscall"
	"unsafe"

	"github.com/cmrt/cmrt/fabric"
	"github.com/cmrt/cmrt/fabric/kernel/internal/provider"
	"github.com/cmrt/cmrt/fabric/kernel/internal/uverbs"
)

// UD: address handles, the sources of receives, multicast attachment.

// maxAHs bounds a UD QP's cached address handles.
const maxAHs = 4096

// udAH is a cached address handle.
type udAH struct {
	handle uint32
	num    uint32
}

// grhLen is the size of the Global Route Header in front of UD receives.
const grhLen = 40

func uintptrOf(p *byte) uintptr { return uintptr(unsafe.Pointer(p)) }

// htobe32 converts between a host value and the host-order reading of its
// big-endian bytes (imm_data is __be32); it is its own inverse.
func htobe32(v uint32) uint32 {
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], v)
	return binary.NativeEndian.Uint32(b[:])
}
func unsafeData(b []byte) *byte { return unsafe.SliceData(b) }

// ahLocked returns the driver's number of an address handle for a,
// creating it on first use. On RoCE the handle must be global and name a
// RoCE v2 source GID of the destination's family: handles built by hand
// (from a completion's source, say) get the QP's own, and a hop limit of
// 64 when they have none. q.sqMu is held.
func (q *vqp) ahLocked(a *fabric.AHAttr) (uint32, error) {
	if e, ok := q.ahs[*a]; ok {
		return e.num, nil
	}
	if len(q.ahs) >= maxAHs {
		return 0, fmt.Errorf("kernel: post_send: %d address handles on the QP: %w", maxAHs, syscall.ENOMEM)
	}
	attr := uverbs.AHAttr{DGID: a.DGID, FlowLabel: a.FlowLabel, SGIDIndex: a.SGIDIndex, HopLimit: a.HopLimit,
		TrafficClass: a.TrafficClass, DLID: a.DLID, SL: a.SL, SrcPathBits: a.SrcPathBits, StaticRate: a.StaticRate,
		IsGlobal: a.IsGlobal, PortNum: a.PortNum}
	if attr.PortNum == 0 {
		attr.PortNum = q.port
	}
	if q.vd.port.LinkLayer == uverbs.LinkLayerEthernet {
		attr.IsGlobal = 1
		if attr.HopLimit == 0 {
			attr.HopLimit = 64
		}
		if q.sgidOK && !q.vd.gidFits(attr.SGIDIndex, attr.DGID) {
			attr.SGIDIndex = q.sgid
		}
	}
	resp, err := q.vd.ctx.Exec(&uverbs.CreateAH{PD: q.pd, Attr: attr, DriverOut: q.vd.drv.AHDriverOut()})
	if err != nil {
		return 0, fmt.Errorf("kernel: create_ah to %s: %w", netip.AddrFrom16(a.DGID).Unmap(), err)
	}
	h, _ := uverbs.DecodeUint32Resp(resp)
	num, err := q.vd.drv.AHNum(resp[uverbs.CreateAHRespSize:])
	if err != nil {
		_, _ = q.vd.ctx.Exec(uverbs.DestroyAH(h))
		return 0, err
	}
	if q.ahs == nil {
		q.ahs = make(map[fabric.AHAttr]udAH)
	}
	q.ahs[*a] = udAH{handle: h, num: num}
	return num, nil
}

// destroyAHsLocked destroys the cached address handles. q.sqMu is held.
func (q *vqp) destroyAHsLocked() {
	for k, e := range q.ahs {
		_, _ = q.vd.ctx.Exec(uverbs.DestroyAH(e.handle))
		delete(q.ahs, k)
	}
}

// udRecvDone completes a UD receive: the oldest posted buffer is this
// one; its GRH names the sender. Called from the receive queue's Poll.
func (q *vqp) udRecvDone(w *provider.WC, out *fabric.WC) {
	q.rqMu.Lock()
	var buf []byte
	if q.rlen > 0 {
		buf = q.rbufs[q.rhead]
		q.rbufs[q.rhead] = nil
		q.rhead = (q.rhead + 1) % len(q.rbufs)
		q.rlen--
	}
	q.rqMu.Unlock()
	out.SrcQP = w.SrcQP & 0xFFFFFF
	out.GRH = w.Flags&uverbs.WCFlagGRH != 0 || w.Status == provider.StatusSuccess
	if w.Status == provider.StatusSuccess && len(buf) >= grhLen && w.ByteLen >= grhLen {
		if a, ok := grhSource(buf[:grhLen]); ok {
			out.Src = netip.AddrPortFrom(a, 0)
		}
	}
}

// grhSource returns the sender's address in a receive's GRH: RoCE v2 over
// IPv4 puts the IPv4 header in the last 20 bytes (version 4 at byte 20,
// source at 32); an IB or RoCE v2/IPv6 GRH has version 6 and the source
// GID at 8.
func grhSource(g []byte) (netip.Addr, bool) {
	if len(g) < grhLen {
		return netip.Addr{}, false
	}
	if g[20]>>4 == 4 {
		return netip.AddrFrom4([4]byte(g[32:36])), true
	}
	if g[0]>>4 == 6 {
		return netip.AddrFrom16([16]byte(g[8:24])).Unmap(), true
	}
	return netip.Addr{}, false
}

// mtuBytes is port 1's active MTU in bytes (IBV_MTU_256 .. IBV_MTU_4096).
func (vd *verbsDev) mtuBytes() int {
	if m := vd.port.ActiveMTU; m >= 1 && m <= 5 {
		return 128 << m
	}
	return 1024
}

// attachMcast attaches a UD QP to a multicast group's GID (as librdmacm
// does on MULTICAST_JOIN of a full-member join).
func (q *vqp) attachMcast(gid [16]byte, mlid uint16) error {
	_, err := q.vd.ctx.Exec(&uverbs.Mcast{GID: gid, QP: q.handle, MLID: mlid})
	return err
}

// detachMcast undoes attachMcast.
func (q *vqp) detachMcast(gid [16]byte, mlid uint16) error {
	_, err := q.vd.ctx.Exec(&uverbs.Mcast{GID: gid, QP: q.handle, MLID: mlid, Detach: true})
	return err
}
