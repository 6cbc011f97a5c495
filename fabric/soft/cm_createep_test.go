package soft_test

import (
	"context"
	"errors"
	"net/netip"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/cmrt/cmrt/id"
)

// TestCreateEP: rdma_getaddrinfo and rdma_create_ep's flow on synchronous
// ids. The passive endpoint is bound and gives every request's id the QP
// it was created with; the active one comes resolved with its QP, and a
// message crosses. Failed steps leave no id behind.
func TestCreateEP(t *testing.T) {
	ctx := context.Background()
	attr := &id.QPInitAttr{Cap: id.QPCap{MaxSendWR: 2, MaxRecvWR: 2, MaxSendSGE: 1, MaxRecvSGE: 1}, SigAll: true}
	before := id.Live()

	pai, err := id.GetAddrInfo(ctx, "127.0.0.1", "0", &id.AddrInfo{Flags: id.AIPassive})
	if err != nil {
		t.Fatal(err)
	}
	lis, err := id.CreateEP(ctx, pai, attr)
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Destroy()
	if st := lis.State(); st != id.StateAddrBound || lis.QP() != nil {
		t.Fatalf("passive endpoint: state %s, QP %v; want bound, no QP", st, lis.QP())
	}
	if err := lis.Listen(1); err != nil {
		t.Fatal(err)
	}

	type served struct {
		msg []byte
		err error
	}
	done := make(chan served, 1)
	exited := make(chan struct{}) // after the request's id is destroyed
	go func() {
		defer close(exited)
		cm, err := lis.GetRequest()
		if err != nil {
			done <- served{err: err}
			return
		}
		defer cm.Destroy()
		if cm.QP() == nil {
			_ = cm.Reject(nil)
			done <- served{err: errors.New("the request's id has no QP")}
			return
		}
		buf := make([]byte, 16)
		mr, err := cm.RegMsgs(buf)
		if err == nil {
			err = cm.PostRecv(1, buf, mr)
		}
		if err == nil {
			err = cm.Accept(nil)
		}
		var n int
		if err == nil {
			var wc id.WC
			wc, err = cm.GetRecvComp(ctx)
			n = int(wc.ByteLen)
		}
		_ = cm.Disconnect()
		done <- served{msg: buf[:n], err: err}
	}()

	aai, err := id.GetAddrInfo(ctx, "127.0.0.1", strconv.Itoa(int(lis.SrcPort())), nil)
	if err != nil {
		t.Fatal(err)
	}
	cli, err := id.CreateEP(ctx, aai, attr)
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Destroy()
	if st := cli.State(); st != id.StateRouteResolved || cli.QP() == nil {
		t.Fatalf("active endpoint: state %s, QP %v; want route resolved, with a QP", st, cli.QP())
	}
	if err := cli.Connect(nil); err != nil {
		t.Fatal(err)
	}
	if err := cli.PostSend(2, []byte("create_ep"), nil, id.SendInline); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-done:
		if r.err != nil || string(r.msg) != "create_ep" {
			t.Fatalf("server: %q, %v", r.msg, r.err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("server did not receive")
	}
	_ = cli.Disconnect()

	// Failures: nothing is left behind.
	for _, c := range []struct {
		name string
		ai   *id.AddrInfo
		want syscall.Errno
	}{
		{"no address info", nil, syscall.EINVAL},
		{"bad port space", &id.AddrInfo{PortSpace: 0x999, Dst: netip.MustParseAddrPort("127.0.0.1:1")}, syscall.EINVAL},
		{"non-local passive address", &id.AddrInfo{Flags: id.AIPassive, Src: netip.MustParseAddrPort("198.51.100.9:7000")}, syscall.EADDRNOTAVAIL},
	} {
		if ep, err := id.CreateEP(ctx, c.ai, nil); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, %v; want %v", c.name, ep, err, c.want)
		}
	}
	_ = cli.Destroy()
	<-exited
	_ = lis.Destroy()
	if n := id.Live(); n > before {
		t.Errorf("%d ids live at the end, %d at the start", n, before)
	}
}

// TestCreateEPRequestWithoutQP: when the QP a passive endpoint was created
// with cannot be made for a request, GetRequest fails with the QP's error
// and the request is rejected, so the client does not wait.
func TestCreateEPRequestWithoutQP(t *testing.T) {
	ctx := context.Background()
	pai, err := id.GetAddrInfo(ctx, "127.0.0.1", "0", &id.AddrInfo{Flags: id.AIPassive})
	if err != nil {
		t.Fatal(err)
	}
	lis, err := id.CreateEP(ctx, pai, &id.QPInitAttr{Cap: id.QPCap{MaxSendWR: -1}})
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Destroy()
	if err := lis.Listen(1); err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		cm, err := lis.GetRequest()
		if err == nil {
			_ = cm.Destroy()
		}
		got <- err
	}()
	cli, err := id.CreateEP(ctx, &id.AddrInfo{Dst: netip.AddrPortFrom(lo4, lis.SrcPort())}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Destroy()
	// A synchronous connect answered by REJECTED fails with ECONNREFUSED,
	// as librdmacm sets errno.
	if err := cli.Connect(nil); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("connect: %v, want REJECTED (ECONNREFUSED)", err)
	}
	if err := <-got; !errors.Is(err, syscall.EINVAL) {
		t.Errorf("GetRequest: %v, want the QP's EINVAL", err)
	}
}
