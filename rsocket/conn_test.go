package rsocket

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/net/nettest"

	"github.com/cmrt/cmrt/fabric"
	"github.com/cmrt/cmrt/fabric/soft"
)

// pipe returns the two ends of a connection over the software fabric on
// loopback: c1 dialed, c2 accepted.
func pipe(t testing.TB, opts ...Option) (c1, c2 *Conn, stop func()) {
	t.Helper()
	return pipeWith(t, opts, opts)
}

// pipeWith is pipe with the dialing side's options dopts and the
// accepting side's lopts.
func pipeWith(t testing.TB, dopts, lopts []Option) (c1, c2 *Conn, stop func()) {
	t.Helper()
	l, err := Listen("tcp", "127.0.0.1:0", lopts...)
	if err != nil {
		t.Fatal(err)
	}
	type res struct {
		c   net.Conn
		err error
	}
	ch := make(chan res, 1)
	go func() {
		c, err := l.Accept()
		ch <- res{c, err}
	}()
	d, err := Dial("tcp", l.Addr().String(), dopts...)
	if err != nil {
		l.Close()
		t.Fatal(err)
	}
	r := <-ch
	if r.err != nil {
		d.Close()
		l.Close()
		t.Fatal(r.err)
	}
	return d.(*Conn), r.c.(*Conn), func() {
		d.Close()
		r.c.Close()
		l.Close()
	}
}

func TestNettestConn(t *testing.T) {
	nettest.TestConn(t, func() (c1, c2 net.Conn, stop func(), err error) {
		a, b, s := pipe(t)
		return a, b, s, nil
	})
}

// TestSmallBuffers runs the conformance suite with the smallest queues and
// buffers, so credits, buffer halves and the send ring wrap all the time.
func TestSmallBuffers(t *testing.T) {
	nettest.TestConn(t, func() (c1, c2 net.Conn, stop func(), err error) {
		a, b, s := pipe(t, WithSQSize(16), WithRQSize(16), WithRecvBuffer(4096), WithSendBuffer(4096), WithInline(0))
		return a, b, s, nil
	})
}

func TestTransferSizes(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []Option
	}{
		{"default", nil},
		{"small", []Option{WithSQSize(16), WithRQSize(16), WithRecvBuffer(4096), WithSendBuffer(5000)}},
		{"inline-large", []Option{WithInline(4096)}},
	} {
		for _, tr := range transports {
			t.Run(tc.name+"-"+tr.name, func(t *testing.T) {
				c1, c2, stop := pipe(t, with(tr.opts, tc.opts...)...)
				defer stop()
				for _, n := range []int{1, 63, 64, 65, 4096, 100 << 10, 1 << 20} {
					want := make([]byte, n)
					for k := range want {
						want[k] = byte(k*7 + n)
					}
					errc := make(chan error, 1)
					go func() {
						_, err := c1.Write(want)
						errc <- err
					}()
					got := make([]byte, n)
					if _, err := io.ReadFull(c2, got); err != nil {
						t.Fatalf("%d bytes: %v", n, err)
					}
					if err := <-errc; err != nil {
						t.Fatal(err)
					}
					if !bytes.Equal(got, want) {
						t.Fatalf("%d bytes: data differs", n)
					}
				}
			})
		}
	}
}

func TestCloseWriteGivesEOF(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) { testCloseWriteGivesEOF(t, tr.opts) })
	}
}

func testCloseWriteGivesEOF(t *testing.T, opts []Option) {
	c1, c2, stop := pipe(t, opts...)
	defer stop()
	if _, err := c1.Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	if err := c1.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(c2)
	if err != nil || string(b) != "hello" {
		t.Fatalf("ReadAll = %q, %v", b, err)
	}
	// The other direction still works.
	if _, err := c2.Write([]byte("back")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4)
	if _, err := io.ReadFull(c1, buf); err != nil || string(buf) != "back" {
		t.Fatalf("read back %q, %v", buf, err)
	}
	if _, err := c1.Write([]byte("x")); !errors.Is(err, syscall.EPIPE) {
		t.Fatalf("Write after CloseWrite: %v, want EPIPE", err)
	}
	if err := c2.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	if n, err := c1.Read(buf); n != 0 || err != io.EOF {
		t.Fatalf("Read after both shut down: %d, %v", n, err)
	}
}

func TestCloseUnblocksAndIsIdempotent(t *testing.T) {
	c1, _, stop := pipe(t)
	defer stop()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		_, err := c1.Read(make([]byte, 8))
		if !errors.Is(err, net.ErrClosed) {
			t.Errorf("Read: %v, want net.ErrClosed", err)
		}
	}()
	// Blocked already or not, the Read must end with net.ErrClosed.
	if err := c1.Close(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if err := c1.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := c1.Write([]byte("x")); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Write after Close: %v", err)
	}
}

func TestPeerCloseGivesEOFAndReset(t *testing.T) {
	c1, c2, stop := pipe(t)
	defer stop()
	if _, err := c1.Write([]byte("last words")); err != nil {
		t.Fatal(err)
	}
	c1.Close()
	b, err := io.ReadAll(c2)
	if err != nil || string(b) != "last words" {
		t.Fatalf("ReadAll = %q, %v", b, err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		_, err := c2.Write([]byte("x"))
		if errors.Is(err, syscall.ECONNRESET) {
			break
		}
		if err != nil || time.Now().After(deadline) {
			t.Fatalf("Write to a closed peer: %v, want ECONNRESET", err)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestDeadline(t *testing.T) {
	c1, _, stop := pipe(t)
	defer stop()
	c1.SetReadDeadline(time.Now().Add(30 * time.Millisecond))
	t0 := time.Now()
	_, err := c1.Read(make([]byte, 1))
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("Read: %v", err)
	}
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("not a timeout net.Error: %v", err)
	}
	if d := time.Since(t0); d < 25*time.Millisecond {
		t.Fatalf("returned after %v", d)
	}
}

func TestDialNoListener(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	_, err = Dial("tcp", addr)
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("Dial: %v, want ECONNREFUSED", err)
	}
}

func TestAddrs(t *testing.T) {
	c1, c2, stop := pipe(t)
	defer stop()
	if c1.RemoteAddr().String() != c2.LocalAddr().String() || c1.LocalAddr().String() != c2.RemoteAddr().String() {
		t.Fatalf("addresses: %v-%v, %v-%v", c1.LocalAddr(), c1.RemoteAddr(), c2.LocalAddr(), c2.RemoteAddr())
	}
	if c1.LocalAddr().Network() != "rsocket" {
		t.Fatal(c1.LocalAddr().Network())
	}
}

// namedFabric is a fabric that only has a name, for pollTimeFor.
type namedFabric struct {
	fabric.Fabric
	name string
}

func (f namedFabric) Name() string { return f.name }

// declaredFabric is a named fabric that declares where its completions
// are made (fabric.InProcessCompleter).
type declaredFabric struct {
	namedFabric
	inProcess bool
}

func (f declaredFabric) CompletesInProcess() bool { return f.inProcess }

// TestPollTime checks who spins before blocking: connections on the
// software fabric block at once unless WithPollTime says otherwise (a
// spinning caller there holds back the goroutines that make its
// completions), connections on a fabric that does not declare its
// completions made in process (the kernel fabric) poll for
// DefaultPollTime. What decides is the declaration, not the fabric's
// name (the kernel fabric may be registered under any name: WithName).
func TestPollTime(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []Option
		want time.Duration
	}{
		{"soft default", nil, 0},
		{"soft WithPollTime", []Option{WithPollTime(7 * time.Microsecond)}, 7 * time.Microsecond},
		{"soft WithPollTime negative", []Option{WithPollTime(-time.Second)}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c1, c2, stop := pipe(t, tc.opts...)
			defer stop()
			if c1.cfg.pollTime != tc.want || c2.cfg.pollTime != tc.want {
				t.Fatalf("poll time %v (dialed), %v (accepted), want %v", c1.cfg.pollTime, c2.cfg.pollTime, tc.want)
			}
		})
	}
	for _, tc := range []struct {
		name   string
		f      fabric.Fabric
		want   time.Duration
		direct bool
	}{
		{"soft", soft.Default(), 0, true},
		{"soft under another name", soft.New(soft.WithName("kernel")), 0, true},
		{"undeclared kernel", namedFabric{name: "kernel"}, DefaultPollTime, false},
		{"undeclared, named soft", namedFabric{name: "soft"}, DefaultPollTime, false},
		{"declared outside, named soft", declaredFabric{namedFabric{name: "soft"}, false}, DefaultPollTime, false},
		{"declared in process, named kernel", declaredFabric{namedFabric{name: "kernel"}, true}, 0, true},
		{"none", nil, 0, true},
	} {
		if got := pollTimeFor(tc.f); got != tc.want {
			t.Errorf("%s: pollTimeFor = %v, want %v", tc.name, got, tc.want)
		}
		if got := inProcess(tc.f); got != tc.direct {
			t.Errorf("%s: inProcess = %v, want %v", tc.name, got, tc.direct)
		}
	}
}
