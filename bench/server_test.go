package bench

import (
	"context"
	"errors"
	"io"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cmrt/cmrt/channel"
	"github.com/cmrt/cmrt/id"
)

// cmServer is an asynchronous cmrt listener on the server fabric: one event
// channel read by one goroutine, as librdmacm servers are written. It
// accepts every request (with a QP when qp is set), and destroys an id when
// its peer disconnects.
type cmServer struct {
	ch   *channel.Channel
	lis  *id.ID
	addr netip.AddrPort
	qp   *id.QPInitAttr

	established *counter
	destroyed   *counter
	errs        atomic.Int64
	lastErr     atomic.Value // error

	cancel context.CancelFunc
	done   chan struct{}
}

func newCMServer(tb testing.TB, qp *id.QPInitAttr) *cmServer {
	tb.Helper()
	ch, err := channel.New(channel.WithFabric(srvFab))
	if err != nil {
		tb.Fatal(err)
	}
	lis, err := id.Create(ch, nil, id.PSTCP)
	if err != nil {
		tb.Fatal(err)
	}
	if err := lis.Bind(netip.AddrPortFrom(loopback, 0)); err != nil {
		tb.Fatal(err)
	}
	if err := lis.Listen(0); err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &cmServer{ch: ch, lis: lis, addr: lis.LocalAddr(), qp: qp, cancel: cancel, done: make(chan struct{}),
		established: newCounter(), destroyed: newCounter()}
	go s.run(ctx)
	return s
}

func (s *cmServer) fail(err error) {
	s.errs.Add(1)
	s.lastErr.Store(err)
}

func (s *cmServer) run(ctx context.Context) {
	defer close(s.done)
	for {
		ev, err := s.ch.GetEventContext(ctx)
		if err != nil {
			return
		}
		typ, cm, status := ev.Type, ev.ID, ev.Status
		switch typ {
		case id.EventConnectRequest:
			if s.qp != nil {
				if err := cm.CreateQP(s.qp); err != nil {
					s.fail(err)
				}
			}
			err := cm.Accept(nil)
			_ = ev.Ack()
			if err != nil {
				// The peer gave up meanwhile.
				s.fail(err)
				_ = cm.Destroy()
			}
		case id.EventEstablished:
			_ = ev.Ack()
			s.established.Add(1)
		case id.EventDisconnected:
			_ = ev.Ack()
			_ = cm.Destroy()
			s.destroyed.Add(1)
		default:
			_ = ev.Ack()
			s.fail(errors.New(typ.String() + " status " + itoa(status)))
		}
	}
}

// waitDestroyed waits until n ids were destroyed.
func (s *cmServer) waitDestroyed(tb testing.TB, n int64) {
	tb.Helper()
	if !s.destroyed.wait(n, 60*time.Second) {
		tb.Fatalf("server: %d of %d ids destroyed after 60s (errors %d, last %v)", s.destroyed.Load(), n, s.errs.Load(), s.lastErr.Load())
	}
}

func (s *cmServer) close(tb testing.TB) {
	tb.Helper()
	s.cancel()
	<-s.done
	if err := s.lis.Destroy(); err != nil {
		tb.Error(err)
	}
	// Ids of connections still up are destroyed with the channel's
	// endpoints: only the events of a closed channel are lost.
	if err := s.ch.Close(); err != nil {
		tb.Errorf("server channel: %v", err)
	}
}

func itoa(n int) string {
	if n == 0 {
		return "0"
	}
	neg := n < 0
	if neg {
		n = -n
	}
	var b [20]byte
	k := len(b)
	for n > 0 {
		k--
		b[k] = byte('0' + n%10)
		n /= 10
	}
	if neg {
		k--
		b[k] = '-'
	}
	return string(b[k:])
}

// tcpServer is the baseline: a Go TCP listener with a goroutine per
// connection, which answers exch bytes with exch bytes when exch > 0 (an
// MPA Request/Reply) and closes on EOF.
type tcpServer struct {
	ln       *net.TCPListener
	addr     string
	exch     int
	closed   *counter
	accepted *counter
	conns    sync.WaitGroup
	done     chan struct{}
	hold     bool // keep connections open until close (BenchmarkScale)

	mu   sync.Mutex
	open []*net.TCPConn
}

func newTCPServer(tb testing.TB, exch int, hold bool) *tcpServer {
	tb.Helper()
	ln, err := net.ListenTCP("tcp", net.TCPAddrFromAddrPort(netip.AddrPortFrom(loopback, 0)))
	if err != nil {
		tb.Fatal(err)
	}
	s := &tcpServer{ln: ln, addr: ln.Addr().String(), exch: exch, hold: hold, done: make(chan struct{}), closed: newCounter(), accepted: newCounter()}
	go s.run()
	return s
}

func (s *tcpServer) run() {
	defer close(s.done)
	for {
		c, err := s.ln.AcceptTCP()
		if err != nil {
			return
		}
		if s.hold {
			s.mu.Lock()
			s.open = append(s.open, c)
			s.mu.Unlock()
		}
		s.conns.Add(1)
		s.accepted.Add(1)
		go s.serve(c)
	}
}

func (s *tcpServer) serve(c *net.TCPConn) {
	defer s.conns.Done()
	var buf [64]byte
	if s.exch > 0 {
		if _, err := io.ReadFull(c, buf[:s.exch]); err == nil {
			_, _ = c.Write(buf[:s.exch])
		}
	}
	for {
		if _, err := c.Read(buf[:]); err != nil {
			break
		}
	}
	_ = c.Close()
	s.closed.Add(1)
}

func (s *tcpServer) waitClosed(tb testing.TB, n int64) {
	tb.Helper()
	if !s.closed.wait(n, 60*time.Second) {
		tb.Fatalf("tcp server: %d of %d closed after 60s", s.closed.Load(), n)
	}
}

func (s *tcpServer) close() {
	_ = s.ln.Close()
	<-s.done
	s.mu.Lock()
	for _, c := range s.open {
		_ = c.Close()
	}
	s.open = nil
	s.mu.Unlock()
	s.conns.Wait()
}
