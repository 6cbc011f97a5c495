package soft_test

import (
	"net/netip"
	"testing"
	"time"

	"github.com/cmrt/cmrt/fabric/soft"
	"github.com/cmrt/cmrt/id"
)

// TestRCIdleConnDropsDataPath: a connection without a QP holds no data path
// once its start is over (the responder has the RTR, or its hold ended;
// the initiator's RTR repeats are done), since the path was most of an
// idle connection's memory; a QP created afterwards gets one again, and
// messages cross both ways as on a connection that kept it.
func TestRCIdleConnDropsDataPath(t *testing.T) {
	for _, tc := range []struct {
		name string
		cli  []soft.Option
	}{
		{"p2p-write", nil},
		{"no-p2p", []soft.Option{soft.WithP2P(0)}},
		{"no-p2p-no-hold", []soft.Option{soft.WithP2P(0)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var srvOpts []soft.Option
			if tc.name == "no-p2p-no-hold" {
				srvOpts = append(srvOpts, soft.WithResponderHold(-1))
			}
			fs, fc := soft.New(srvOpts...), soft.New(tc.cli...)
			srvCh, cliCh := newRCChan(t, fs), newRCChan(t, fc)
			lis := listen(t, srvCh)
			cid, _ := id.Create(cliCh, nil, id.PSTCP)
			_ = cid.ResolveAddr(netip.AddrPort{}, lis.LocalAddr(), time.Second)
			cliCh.want(t, id.EventAddrResolved)
			_ = cid.ResolveRoute(time.Second)
			cliCh.want(t, id.EventRouteResolved)
			if err := cid.Connect(nil); err != nil {
				t.Fatal(err)
			}
			ev := srvCh.want(t, id.EventConnectRequest)
			sid := ev.ID
			if err := sid.Accept(nil); err != nil {
				t.Fatal(err)
			}
			cliCh.want(t, id.EventEstablished)
			srvCh.want(t, id.EventEstablished)
			for _, e := range []*id.ID{cid, sid} {
				waitFor(t, func() bool { return !soft.HasDataPath(e.Endpoint()) })
			}

			// QPs made after the path was dropped: it is made again.
			attr := id.QPInitAttr{Cap: id.QPCap{MaxSendWR: 2, MaxRecvWR: 2}}
			for _, e := range []*id.ID{cid, sid} {
				if err := e.CreateQP(&attr); err != nil {
					t.Fatal(err)
				}
				if !soft.HasDataPath(e.Endpoint()) {
					t.Fatal("no data path after CreateQP")
				}
			}
			if err := cid.PostRecv(1, nil, nil); err != nil {
				t.Fatal(err)
			}
			if err := sid.PostRecv(2, nil, nil); err != nil {
				t.Fatal(err)
			}
			if err := sid.PostSend(3, nil, nil, id.SendSignaled); err != nil {
				t.Fatal(err)
			}
			wantWC(t, comp(t, sid.QP().SendCQ()), id.WCSuccess, id.WCSend)
			wantWC(t, comp(t, cid.QP().RecvCQ()), id.WCSuccess, id.WCRecv)
			if err := cid.PostSend(4, nil, nil, id.SendSignaled); err != nil {
				t.Fatal(err)
			}
			wantWC(t, comp(t, sid.QP().RecvCQ()), id.WCSuccess, id.WCRecv)
			wantWC(t, comp(t, cid.QP().SendCQ()), id.WCSuccess, id.WCSend)

			_ = cid.Disconnect()
			cliCh.want(t, id.EventDisconnected)
			srvCh.want(t, id.EventDisconnected)
			for _, i := range []*id.ID{cid, sid, lis} {
				_ = i.Destroy()
			}
			_ = srvCh.src.Close()
			_ = cliCh.src.Close()
			quiesceFabs(t, fs, fc)
		})
	}
}
