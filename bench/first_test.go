package bench

import (
	"context"
	"io"
	"net"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/cmrt/cmrt/id"
)

// greetingLen is the size of the server's first message.
const greetingLen = 64

// BenchmarkServerFirst measures connections on which the server speaks
// first, one at a time: from the client's connect to the arrival of the
// server's 64-byte greeting. cmrt: a synchronous client id (resolved and
// with its QP and a receive posted beforehand, untimed) calls Connect and
// waits for the receive completion; the server's synchronous id accepts
// and posts the greeting as Accept returns. tcp: net.Dial, then io.ReadFull
// of the greeting the server writes as Accept returns. It reports the p50
// and p99 of that time (connect-us); ns/op is the whole cycle, tear-down
// included.
func BenchmarkServerFirst(b *testing.B) {
	for _, impl := range impls([]string{"cmrt"}, []string{"tcp"}) {
		b.Run("impl="+impl, func(b *testing.B) {
			if impl == "cmrt" {
				serverFirstRC(b)
			} else {
				serverFirstTCP(b)
			}
		})
	}
}

func serverFirstRC(b *testing.B) {
	lis, err := id.Create(nil, nil, id.PSTCP, id.WithFabric(srvFab))
	if err != nil {
		b.Fatal(err)
	}
	defer lis.Destroy()
	if err := lis.Bind(netip.AddrPortFrom(loopback, 0)); err != nil {
		b.Fatal(err)
	}
	if err := lis.Listen(16); err != nil {
		b.Fatal(err)
	}
	greeting := make([]byte, greetingLen)
	accepted := make(chan *id.ID, 1)
	srvErr := make(chan error, 1)
	go func() { // the server: accept, greet, hand the id over for tear-down
		for {
			cm, err := lis.GetRequest()
			if err != nil {
				close(accepted)
				return
			}
			if err = cm.CreateQP(&id.QPInitAttr{}); err == nil {
				if err = cm.Accept(nil); err == nil {
					err = cm.PostSend(1, greeting, nil, id.SendInline)
				}
			}
			if err != nil {
				srvErr <- err
				_ = cm.Destroy()
				close(accepted)
				return
			}
			accepted <- cm
		}
	}()
	dst := lis.LocalAddr()
	buf := make([]byte, greetingLen)
	lat := make([]time.Duration, b.N)
	b.ReportAllocs()
	b.ResetTimer()
	for k := 0; k < b.N; k++ {
		cli, err := id.Create(nil, nil, id.PSTCP, id.WithFabric(cliFab))
		if err != nil {
			b.Fatal(err)
		}
		if err := cli.ResolveAddr(netip.AddrPort{}, dst, 2*time.Second); err != nil {
			b.Fatal(err)
		}
		if err := cli.ResolveRoute(2 * time.Second); err != nil {
			b.Fatal(err)
		}
		if err := cli.CreateQP(&id.QPInitAttr{}); err != nil {
			b.Fatal(err)
		}
		mr, err := cli.RegMsgs(buf)
		if err != nil {
			b.Fatal(err)
		}
		if err := cli.PostRecv(1, buf, mr); err != nil {
			b.Fatal(err)
		}
		t0 := time.Now()
		if err := cli.Connect(nil); err != nil {
			b.Fatal(err)
		}
		wc, err := cli.GetRecvComp(context.Background())
		lat[k] = time.Since(t0)
		if err != nil || wc.Status != id.WCSuccess || wc.ByteLen != greetingLen {
			b.Fatalf("greeting: %+v %v", wc, err)
		}
		srv, ok := <-accepted
		if !ok {
			b.Fatal(<-srvErr)
		}
		errc := make(chan error, 1)
		go func() { errc <- srv.Disconnect() }()
		if err := cli.Disconnect(); err != nil {
			b.Fatal(err)
		}
		if err := <-errc; err != nil {
			b.Fatal(err)
		}
		_ = cli.DeregMR(mr)
		if err := cli.Destroy(); err != nil {
			b.Fatal(err)
		}
		if err := srv.Destroy(); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	reportConnectLatency(b, lat)
}

func serverFirstTCP(b *testing.B) {
	ln, err := net.ListenTCP("tcp", net.TCPAddrFromAddrPort(netip.AddrPortFrom(loopback, 0)))
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	go func() { // the server: accept, greet, close when the client closes
		greeting := make([]byte, greetingLen)
		var one [1]byte
		for {
			c, err := ln.AcceptTCP()
			if err != nil {
				return
			}
			_ = c.SetNoDelay(true)
			_, _ = c.Write(greeting)
			_, _ = c.Read(one[:])
			_ = c.Close()
		}
	}()
	addr := ln.Addr().String()
	buf := make([]byte, greetingLen)
	lat := make([]time.Duration, b.N)
	b.ReportAllocs()
	b.ResetTimer()
	for k := 0; k < b.N; k++ {
		t0 := time.Now()
		c, err := net.Dial("tcp", addr)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := io.ReadFull(c, buf); err != nil {
			b.Fatal(err)
		}
		lat[k] = time.Since(t0)
		_ = c.Close()
	}
	b.StopTimer()
	reportConnectLatency(b, lat)
}

// reportConnectLatency reports the p50 and p99 of lat as connect-p50-us
// and connect-p99-us.
func reportConnectLatency(b *testing.B, lat []time.Duration) {
	slices.Sort(lat)
	q := func(f float64) float64 {
		return float64(lat[min(len(lat)-1, int(f*float64(len(lat))))].Nanoseconds()) / 1e3
	}
	b.ReportMetric(q(0.50), "connect-p50-us")
	b.ReportMetric(q(0.99), "connect-p99-us")
}
