package main

import (
	"fmt"
	"net/netip"
	"time"

	"github.com/cmrt/cmrt/id"
)

// qps times the data path's set-up alone, for profiling it (-cpuprofile):
// -c ids bound to the device address -b (any port), a QP created on each (cmtime's
// "create qp" step, without the connection), then each destroyed.
//
//	kcheck qps -b IP [-c N]
func qps() error {
	n := *conns
	ids := make([]*id.ID, 0, n)
	defer func() {
		for _, c := range ids {
			_ = c.Destroy()
		}
	}()
	kf := id.WithFabric(fab)
	for k := 0; k < n; k++ {
		c, err := id.Create(nil, nil, id.PSTCP, kf)
		if err != nil {
			return err
		}
		ids = append(ids, c)
		if err := c.Bind(netip.AddrPortFrom(addrPort(*bindAddr).Addr(), 0)); err != nil {
			return err
		}
	}
	attr := id.QPInitAttr{Cap: id.QPCap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}}
	t0 := time.Now()
	for _, c := range ids {
		a := attr
		if err := c.CreateQP(&a); err != nil {
			return err
		}
	}
	t1 := time.Now()
	for _, c := range ids {
		if err := c.DestroyQP(); err != nil {
			return err
		}
	}
	t2 := time.Now()
	fmt.Printf("%d QPs: create %.3f ms each, destroy %.3f ms each\n", n,
		float64(t1.Sub(t0).Microseconds())/1000/float64(n), float64(t2.Sub(t1).Microseconds())/1000/float64(n))
	return nil
}
