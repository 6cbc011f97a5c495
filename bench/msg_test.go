package bench

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cmrt/cmrt/id"
)

// rcPair is one RC connection over the software fabric with a QP at each
// end, set up with synchronous ids (client on cliFab, server on srvFab).
type rcPair struct {
	lis, srv, cli *id.ID
	sqp, cqp      id.QP
	closed        bool
}

func newRCPair(tb testing.TB, attr id.QPInitAttr) *rcPair {
	tb.Helper()
	p := &rcPair{}
	var err error
	if p.lis, err = id.Create(nil, nil, id.PSTCP, id.WithFabric(srvFab)); err != nil {
		tb.Fatal(err)
	}
	if err := p.lis.Bind(netip.AddrPortFrom(loopback, 0)); err != nil {
		tb.Fatal(err)
	}
	if err := p.lis.Listen(1); err != nil {
		tb.Fatal(err)
	}
	type res struct {
		cm  *id.ID
		err error
	}
	srvc := make(chan res, 1)
	go func() {
		cm, err := p.lis.GetRequest()
		if err == nil {
			if err = cm.CreateQP(&attr); err == nil {
				err = cm.Accept(nil)
			}
		}
		srvc <- res{cm, err}
	}()
	if p.cli, err = id.Create(nil, nil, id.PSTCP, id.WithFabric(cliFab)); err != nil {
		tb.Fatal(err)
	}
	if err := p.cli.ResolveAddr(netip.AddrPort{}, p.lis.LocalAddr(), 2*time.Second); err != nil {
		tb.Fatal(err)
	}
	if err := p.cli.ResolveRoute(2 * time.Second); err != nil {
		tb.Fatal(err)
	}
	if err := p.cli.CreateQP(&attr); err != nil {
		tb.Fatal(err)
	}
	if err := p.cli.Connect(nil); err != nil {
		tb.Fatal(err)
	}
	r := <-srvc
	if r.err != nil {
		tb.Fatal(r.err)
	}
	p.srv = r.cm
	p.sqp, p.cqp = p.srv.QP(), p.cli.QP()
	return p
}

func (p *rcPair) close(tb testing.TB) {
	tb.Helper()
	if p.closed {
		return
	}
	p.closed = true
	errc := make(chan error, 1)
	go func() { errc <- p.srv.Disconnect() }()
	if err := p.cli.Disconnect(); err != nil {
		tb.Error(err)
	}
	if err := <-errc; err != nil {
		tb.Error(err)
	}
	for _, cm := range []*id.ID{p.cli, p.srv, p.lis} {
		if err := cm.Destroy(); err != nil {
			tb.Error(err)
		}
	}
}

func regMR(tb testing.TB, qp id.QP, buf []byte) id.MR {
	tb.Helper()
	mr, err := qp.RegMR(buf, id.AccessLocalWrite)
	if err != nil {
		tb.Fatal(err)
	}
	return mr
}

// waitWC waits for one completion without allocating. A destroyed CQ
// gives a completion with WCGeneralErr (its queued completions, such as a
// flushed receive, are gone with it).
func waitWC(cq id.CQ, wc []id.WC) id.WC {
	for cq.Poll(wc[:1]) == 0 {
		if err := cq.Wait(context.Background()); err != nil {
			return id.WC{Status: id.WCGeneralErr}
		}
	}
	return wc[0]
}

// tcpPair is a loopback TCP connection.
type tcpPair struct{ cli, srv *net.TCPConn }

func newTCPPair(tb testing.TB) *tcpPair {
	tb.Helper()
	ln, err := net.ListenTCP("tcp", net.TCPAddrFromAddrPort(netip.AddrPortFrom(loopback, 0)))
	if err != nil {
		tb.Fatal(err)
	}
	defer ln.Close()
	cli, err := net.DialTCP("tcp", nil, ln.Addr().(*net.TCPAddr))
	if err != nil {
		tb.Fatal(err)
	}
	srv, err := ln.AcceptTCP()
	if err != nil {
		tb.Fatal(err)
	}
	return &tcpPair{cli: cli, srv: srv}
}

func (p *tcpPair) close() {
	_ = p.cli.Close()
	_ = p.srv.Close()
}

// BenchmarkPingPong measures the round trip of an n-byte message and its
// echo: RC Sends through the QP interface (work requests reused, receive
// completions awaited with CQ.Wait) against a Go TCP connection (Write +
// io.ReadFull each way). It reports the mean (ns/op) and the p50 and p99
// round trip.
func BenchmarkPingPong(b *testing.B) {
	for _, n := range ints(b, *flagSizes) {
		b.Run("size="+sizeName(n), func(b *testing.B) {
			for _, impl := range impls([]string{"cmrt"}, []string{"tcp"}) {
				b.Run("impl="+impl, func(b *testing.B) {
					if impl == "cmrt" {
						pingPongRC(b, n)
					} else {
						pingPongTCP(b, n)
					}
				})
			}
		})
	}
}

func pingPongRC(b *testing.B, n int) {
	p := newRCPair(b, id.QPInitAttr{})
	defer p.close(b)
	cbuf, sbuf := make([]byte, n), make([]byte, n)
	cm, sm := regMR(b, p.cqp, cbuf), regMR(b, p.sqp, sbuf)
	crecv, srecv := &id.RecvWR{Buf: cbuf, MR: cm}, &id.RecvWR{Buf: sbuf, MR: sm}
	csend := &id.SendWR{Opcode: id.WRSend, Buf: cbuf, MR: cm}
	ssend := &id.SendWR{Opcode: id.WRSend, Buf: sbuf, MR: sm}
	if err := p.sqp.PostRecv(srecv); err != nil {
		b.Fatal(err)
	}
	done := make(chan struct{})
	go func() { // the echo
		defer close(done)
		var wc [1]id.WC
		for {
			if w := waitWC(p.sqp.RecvCQ(), wc[:]); w.Status != id.WCSuccess {
				return
			}
			_ = p.sqp.PostRecv(srecv)
			_ = p.sqp.PostSend(ssend)
		}
	}()
	rtt := make([]time.Duration, b.N)
	var wc [1]id.WC
	b.SetBytes(int64(2 * n))
	b.ReportAllocs()
	b.ResetTimer()
	for k := 0; k < b.N; k++ {
		t0 := time.Now()
		_ = p.cqp.PostRecv(crecv)
		_ = p.cqp.PostSend(csend)
		if w := waitWC(p.cqp.RecvCQ(), wc[:]); w.Status != id.WCSuccess {
			b.Fatalf("%+v", w)
		}
		rtt[k] = time.Since(t0)
	}
	b.StopTimer()
	reportLatency(b, rtt)
	p.close(b)
	<-done // the echo ends with the flushed receive
}

func pingPongTCP(b *testing.B, n int) {
	p := newTCPPair(b)
	defer p.close()
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, n)
		for {
			if _, err := io.ReadFull(p.srv, buf); err != nil {
				return
			}
			if _, err := p.srv.Write(buf); err != nil {
				return
			}
		}
	}()
	buf := make([]byte, n)
	rtt := make([]time.Duration, b.N)
	b.SetBytes(int64(2 * n))
	b.ReportAllocs()
	b.ResetTimer()
	for k := 0; k < b.N; k++ {
		t0 := time.Now()
		if _, err := p.cli.Write(buf); err != nil {
			b.Fatal(err)
		}
		if _, err := io.ReadFull(p.cli, buf); err != nil {
			b.Fatal(err)
		}
		rtt[k] = time.Since(t0)
	}
	b.StopTimer()
	reportLatency(b, rtt)
	_ = p.cli.Close()
	<-done
}

func reportLatency(b *testing.B, rtt []time.Duration) {
	slices.Sort(rtt)
	q := func(f float64) float64 {
		return float64(rtt[min(len(rtt)-1, int(f*float64(len(rtt))))].Nanoseconds()) / 1e3
	}
	b.ReportMetric(q(0.50), "p50-us")
	b.ReportMetric(q(0.99), "p99-us")
	if *flagSamples != "" {
		if err := writeSamples(*flagSamples, b.Name(), rtt); err != nil {
			b.Fatal(err)
		}
	}
}

// writeSamples writes sorted round trips to dir/<name>.txt, name's slashes
// made underscores: a comment line naming the case, then one round trip
// in nanoseconds per line. Each run of a case replaces the file, so it
// holds the run whose p50 and p99 the benchmark reported (the last).
func writeSamples(dir, name string, rtt []time.Duration) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	f, err := os.Create(filepath.Join(dir, strings.ReplaceAll(name, "/", "_")+".txt"))
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	fmt.Fprintf(w, "# %s: %d round trips, ns, sorted\n", name, len(rtt))
	for _, d := range rtt {
		w.WriteString(strconv.FormatInt(d.Nanoseconds(), 10))
		w.WriteByte('\n')
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// BenchmarkStream measures one-way throughput of n-byte messages. cmrt:
// RC Sends into receives the server reposts, two batches in flight, the
// server returning credit for each batch with a zero-length Send (as
// fabric/soft's BenchmarkRCStream). tcp: a Write of n bytes per message
// (a syscall each), read with io.ReadFull of n bytes; tcp-bufio: the same
// through a 256 KiB bufio.Writer and bufio.Reader, batching small messages
// as the RC data path batches FPDUs. The timer stops when the server has
// received everything.
func BenchmarkStream(b *testing.B) {
	for _, n := range ints(b, *flagSizes) {
		b.Run("size="+sizeName(n), func(b *testing.B) {
			for _, impl := range impls([]string{"cmrt"}, []string{"tcp", "tcp-bufio"}) {
				b.Run("impl="+impl, func(b *testing.B) {
					switch impl {
					case "cmrt":
						streamRC(b, n)
					case "tcp":
						streamTCP(b, n, false)
					case "tcp-bufio":
						streamTCP(b, n, true)
					}
				})
			}
		})
	}
}

// flagStreamWin is the receive memory BenchmarkStream's cmrt server posts
// (finding 28 in BENCHMARKS.md). The default, 32 MiB, is the shape of the
// published figures; a receiver sized like TCP's socket buffers posts a
// few MiB, which stay in the cache.
var flagStreamWin = flag.Int("bench.streamwindow", 32<<20, "bytes of receives BenchmarkStream's cmrt server posts: two batches, each credited with one Send")

func streamRC(b *testing.B, n int) {
	// Two batches of receives of at most -bench.streamwindow bytes in all.
	batch := max(1, min(128, *flagStreamWin/2/n))
	attr := id.QPInitAttr{Cap: id.QPCap{MaxSendWR: 2 * batch, MaxRecvWR: 2 * batch}}
	p := newRCPair(b, attr)
	defer p.close(b)
	sbuf := make([]byte, n)
	cm := regMR(b, p.cqp, sbuf)
	rbufs := make([]byte, 2*batch*n)
	sm := regMR(b, p.sqp, rbufs)
	recvs := make([]id.RecvWR, 2*batch)
	for k := range recvs {
		recvs[k] = id.RecvWR{WRID: uint64(k), Buf: rbufs[k*n : (k+1)*n], MR: sm}
		if err := p.sqp.PostRecv(&recvs[k]); err != nil {
			b.Fatal(err)
		}
	}
	credit := &id.SendWR{Opcode: id.WRSend}
	creditRecv := &id.RecvWR{}
	send := &id.SendWR{Opcode: id.WRSend, Buf: sbuf, MR: cm}
	total := (b.N + batch - 1) / batch * batch
	done := make(chan struct{})
	go func() {
		defer close(done)
		var wc [1]id.WC
		for got := 0; got < total; {
			w := waitWC(p.sqp.RecvCQ(), wc[:])
			if w.Status != id.WCSuccess {
				return
			}
			_ = p.sqp.PostRecv(&recvs[w.WRID])
			if got++; got%batch == 0 {
				_ = p.sqp.PostSend(credit)
			}
		}
	}()
	for k := 0; k < 2; k++ {
		_ = p.cqp.PostRecv(creditRecv)
	}
	var wc [1]id.WC
	b.SetBytes(int64(n))
	b.ReportAllocs()
	b.ResetTimer()
	for sent := 0; sent < total; sent += batch {
		if sent >= 2*batch {
			if w := waitWC(p.cqp.RecvCQ(), wc[:]); w.Status != id.WCSuccess {
				b.Fatalf("%+v", w)
			}
			_ = p.cqp.PostRecv(creditRecv)
		}
		// At most two batches are unreceived, so unwritten: the send
		// queue (two batches deep) never fills.
		for k := 0; k < batch; k++ {
			if err := p.cqp.PostSend(send); err != nil {
				b.Fatal(err)
			}
		}
	}
	<-done
	b.StopTimer()
}

func streamTCP(b *testing.B, n int, buffered bool) {
	p := newTCPPair(b)
	defer p.close()
	var r io.Reader = p.srv
	var w io.Writer = p.cli
	var bw *bufio.Writer
	if buffered {
		r = bufio.NewReaderSize(p.srv, 256<<10)
		bw = bufio.NewWriterSize(p.cli, 256<<10)
		w = bw
	}
	done := make(chan error, 1)
	total := b.N
	go func() {
		buf := make([]byte, n)
		for k := 0; k < total; k++ {
			if _, err := io.ReadFull(r, buf); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	buf := make([]byte, n)
	b.SetBytes(int64(n))
	b.ReportAllocs()
	b.ResetTimer()
	for k := 0; k < total; k++ {
		if _, err := w.Write(buf); err != nil {
			b.Fatal(err)
		}
	}
	if bw != nil {
		if err := bw.Flush(); err != nil {
			b.Fatal(err)
		}
	}
	if err := <-done; err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
}

func TestWriteSamples(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "rep1")
	rtt := []time.Duration{1500, 2500, 40 * time.Microsecond}
	if err := writeSamples(dir, "BenchmarkPingPong/size=64B/impl=cmrt", rtt); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "BenchmarkPingPong_size=64B_impl=cmrt.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if want := "# BenchmarkPingPong/size=64B/impl=cmrt: 3 round trips, ns, sorted\n1500\n2500\n40000\n"; string(b) != want {
		t.Errorf("file:\n%s\nwant:\n%s", b, want)
	}
	// A later run of the case replaces the file.
	if err := writeSamples(dir, "BenchmarkPingPong/size=64B/impl=cmrt", rtt[:1]); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "BenchmarkPingPong_size=64B_impl=cmrt.txt")); strings.Count(string(b), "\n") != 2 {
		t.Errorf("second run appended:\n%s", b)
	}
}
