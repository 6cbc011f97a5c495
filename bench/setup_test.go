package bench

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cmrt/cmrt/channel"
	"github.com/cmrt/cmrt/id"
)

// mpaLen is the size of an MPA Request or Reply without private data:
// the 20-byte header and the 4-byte IRD/ORD block of enhanced mode.
const mpaLen = 24

// Setup implementations.
const (
	implSync  = "cmrt-sync"  // synchronous ids, one goroutine per concurrent id
	implAsync = "cmrt-async" // asynchronous ids on one channel, one event goroutine
	implTCP   = "tcp"        // net.Dial + Accept + Close
	implTCPX  = "tcp-mpa"    // tcp with a 24-byte request/reply (the MPA exchange)
)

// BenchmarkConnSetup measures connections per second for connect + accept
// + establish + disconnect + destroy over the software fabric on loopback,
// with conc connections in flight, against Go TCP connect/accept/close.
// One op is one connection, counted when both ends are torn down. The
// server is the same asynchronous cmrt listener for both cmrt clients.
func BenchmarkConnSetup(b *testing.B) {
	for _, conc := range ints(b, *flagConc) {
		b.Run(fmt.Sprintf("conc=%d", conc), func(b *testing.B) {
			for _, impl := range impls([]string{implSync, implAsync}, []string{implTCP, implTCPX}) {
				b.Run("impl="+impl, func(b *testing.B) {
					switch impl {
					case implSync:
						benchSetupSync(b, conc)
					case implAsync:
						benchSetupAsync(b, conc)
					case implTCP:
						benchSetupTCP(b, conc, 0)
					case implTCPX:
						benchSetupTCP(b, conc, mpaLen)
					}
				})
			}
		})
	}
}

// Steps of a synchronous connection, timed at concurrency 1.
const (
	stCreate = iota
	stResolveAddr
	stResolveRoute
	stConnect
	stDisconnect
	stDestroy
	numSteps
)

var stepUnits = [numSteps]string{"create-us", "resolve-addr-us", "resolve-route-us", "connect-us", "disconnect-us", "destroy-us"}

// stepTimes accumulates the time of each step of synchronous connections
// made one at a time, and keeps every connect step's (its median is
// steadier than the mean on a loaded machine, where a few cycles take
// milliseconds).
type stepTimes struct {
	sum     [numSteps]time.Duration
	connect []time.Duration
}

// syncConn runs one connection with a synchronous id; steps, when not nil,
// accumulates the time of each step.
func syncConn(dst netip.AddrPort, steps *stepTimes) error {
	var t [numSteps + 1]time.Time
	t[0] = time.Now()
	cm, err := id.Create(nil, nil, id.PSTCP, id.WithFabric(cliFab))
	if err != nil {
		return err
	}
	t[1] = time.Now()
	err = cm.ResolveAddr(netip.AddrPort{}, dst, 2*time.Second)
	t[2] = time.Now()
	if err == nil {
		err = cm.ResolveRoute(2 * time.Second)
	}
	t[3] = time.Now()
	if err == nil {
		err = cm.Connect(nil)
	}
	t[4] = time.Now()
	if err == nil {
		err = cm.Disconnect()
	}
	t[5] = time.Now()
	if derr := cm.Destroy(); err == nil {
		err = derr
	}
	t[6] = time.Now()
	if steps != nil && err == nil {
		for k := range steps.sum {
			steps.sum[k] += t[k+1].Sub(t[k])
		}
		steps.connect = append(steps.connect, t[stConnect+1].Sub(t[stConnect]))
	}
	return err
}

func benchSetupSync(b *testing.B, conc int) {
	srv := newCMServer(b, nil)
	defer srv.close(b)
	var steps *stepTimes
	if conc == 1 {
		steps = &stepTimes{connect: make([]time.Duration, 0, b.N)}
	}
	b.ReportAllocs()
	b.ResetTimer()
	retries := connectAll(b, conc, func() func() error {
		return func() error { return syncConn(srv.addr, steps) }
	})
	srv.waitDestroyed(b, int64(b.N))
	b.StopTimer()
	reportSetup(b, retries)
	if steps != nil {
		for k, d := range steps.sum {
			b.ReportMetric(float64(d.Microseconds())/float64(b.N), stepUnits[k])
		}
		if n := len(steps.connect); n > 0 {
			slices.Sort(steps.connect)
			b.ReportMetric(float64(steps.connect[n/2].Nanoseconds())/1e3, "connect-p50-us")
		}
	}
}

func benchSetupAsync(b *testing.B, conc int) {
	srv := newCMServer(b, nil)
	defer srv.close(b)
	ch, err := channel.New(channel.WithFabric(cliFab))
	if err != nil {
		b.Fatal(err)
	}
	defer ch.Close()
	b.ReportAllocs()
	b.ResetTimer()
	retries, err := asyncCycles(ch, srv.addr, b.N, conc, nil)
	if err != nil {
		b.Fatal(err)
	}
	srv.waitDestroyed(b, int64(b.N))
	b.StopTimer()
	reportSetup(b, int64(retries))
}

// asyncClient drives asynchronous ids on one channel from one goroutine,
// as cmtime and librdmacm clients do. Calls are issued from the event loop.
type asyncClient struct {
	ch      *channel.Channel
	dst     netip.AddrPort
	qp      *id.QPInitAttr
	started int
	retries int
}

// start creates an id and starts resolving its address.
func (c *asyncClient) start() error {
	cm, err := id.Create(c.ch, nil, id.PSTCP)
	if err != nil {
		return err
	}
	c.started++
	if err := cm.ResolveAddr(netip.AddrPort{}, c.dst, 2*time.Second); err != nil {
		_ = cm.Destroy()
		return err
	}
	return nil
}

// asyncCycles runs n connections, conc at a time, each through
// resolve addr, resolve route, connect, disconnect and destroy; a failed
// attempt is destroyed and retried. When established is not nil, ids stop
// at ESTABLISHED and are handed to it instead (BenchmarkScale).
func asyncCycles(ch *channel.Channel, dst netip.AddrPort, n, conc int, established func(*id.ID)) (retries int, err error) {
	c := &asyncClient{ch: ch, dst: dst}
	return c.run(n, conc, established)
}

func (c *asyncClient) run(n, conc int, established func(*id.ID)) (int, error) {
	for k := 0; k < min(n, conc); k++ {
		if err := c.start(); err != nil {
			return c.retries, err
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	for done := 0; done < n; {
		ev, err := c.ch.GetEventContext(ctx)
		if err != nil {
			return c.retries, fmt.Errorf("after %d of %d connections: %w", done, n, err)
		}
		typ, cm, status := ev.Type, ev.ID, ev.Status
		_ = ev.Ack()
		var cerr error
		finished := false
		switch typ {
		case id.EventAddrResolved:
			cerr = cm.ResolveRoute(2 * time.Second)
		case id.EventRouteResolved:
			if c.qp != nil {
				cerr = cm.CreateQP(c.qp)
			}
			if cerr == nil {
				cerr = cm.Connect(nil)
			}
		case id.EventEstablished:
			if established != nil {
				established(cm)
				finished = true
			} else {
				cerr = cm.Disconnect()
			}
		case id.EventDisconnected:
			cerr = cm.Destroy()
			finished = cerr == nil
		default:
			cerr = fmt.Errorf("%s status %d", typ, status)
		}
		if cerr != nil {
			// A failed attempt: destroy it and start another.
			c.retries++
			if c.retries > n+10 {
				return c.retries, fmt.Errorf("too many failed connections (last: %w)", cerr)
			}
			_ = cm.Destroy()
			if err := c.start(); err != nil {
				return c.retries, err
			}
			continue
		}
		if finished {
			done++
			if c.started-c.retries < n {
				if err := c.start(); err != nil {
					return c.retries, err
				}
			}
		}
	}
	return c.retries, nil
}

func benchSetupTCP(b *testing.B, conc, exch int) {
	srv := newTCPServer(b, exch, false)
	defer srv.close()
	b.ReportAllocs()
	b.ResetTimer()
	fails := connectAll(b, conc, func() func() error {
		var buf [64]byte
		return func() error { return tcpConn(srv.addr, exch, buf[:]) }
	})
	srv.waitClosed(b, int64(b.N))
	b.StopTimer()
	reportSetup(b, fails)
}

// tcpConn connects, exchanges exch bytes each way if exch > 0, and closes.
func tcpConn(addr string, exch int, buf []byte) error {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return err
	}
	if exch > 0 {
		if _, err = c.Write(buf[:exch]); err == nil {
			_, err = io.ReadFull(c, buf[:exch])
		}
	}
	if cerr := c.Close(); err == nil {
		err = cerr
	}
	return err
}

// connectAll makes b.N connections on min(conc, b.N) workers, each retrying
// a failed connection; past b.N+10 failures in all it fails b. work
// returns one worker's connect function. It returns the failures.
func connectAll(b *testing.B, conc int, work func() func() error) int64 {
	var next, fails atomic.Int64
	var firstErr atomic.Value
	var wg sync.WaitGroup
	for w := 0; w < min(conc, b.N); w++ {
		conn := work()
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(b.N) {
				for {
					err := conn()
					if err == nil {
						break
					}
					firstErr.CompareAndSwap(nil, err)
					if fails.Add(1) > int64(b.N)+10 {
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	if fails.Load() > int64(b.N)+10 {
		b.Fatalf("too many failed connections: %d (first: %v)", fails.Load(), firstErr.Load())
	}
	return fails.Load()
}

func reportSetup(b *testing.B, retries int64) {
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "conn/s")
	if retries > 0 {
		b.ReportMetric(float64(retries)/float64(b.N), "retries/op")
	}
}
