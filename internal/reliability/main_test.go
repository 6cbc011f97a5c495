package reliability_test

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"net/netip"
	"os"
	osexec "os/exec"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/cmrt/cmrt/channel"
	"github.com/cmrt/cmrt/fabric/soft"
	"github.com/cmrt/cmrt/handlers"
	"github.com/cmrt/cmrt/id"
	"github.com/cmrt/cmrt/reactor"
)

// TestMain runs a helper role instead of the tests when the binary is
// started as a helper process.
func TestMain(m *testing.M) {
	if role := os.Getenv(helperEnv); role != "" {
		os.Exit(runHelper(role))
	}
	os.Exit(m.Run())
}

func runHelper(role string) int {
	switch role {
	case "server":
		return helperServer()
	case "client":
		return helperClient()
	case "starved":
		return helperStarved()
	case "ports":
		return helperPorts()
	}
	say("fail unknown role %q", role)
	return 2
}

// helperBase is what a helper starts with, to report what it leaves.
type helperBase struct {
	g, fds, live int
}

func helperStart() helperBase {
	warmPoller()
	return helperBase{g: runtime.NumGoroutine(), fds: fdCount(), live: id.Live()}
}

// leaks reports, after everything is destroyed and the fabric is idle,
// what is left above the start: goroutines, descriptors and ids.
func (b helperBase) report(f *soft.Fabric) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = f.QuiesceContext(ctx)
	deadline := time.Now().Add(5 * time.Second)
	var g, fds, live int
	for {
		g, fds, live = runtime.NumGoroutine()-b.g, fdCount()-b.fds, id.Live()-b.live
		if (g <= 0 && fds <= 0 && live <= 0) || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if fds > 0 {
		out, _ := osexec.Command("ls", "-l", fmt.Sprintf("/proc/%d/fd", os.Getpid())).CombinedOutput()
		fmt.Fprintf(os.Stderr, "descriptors left:\n%s", out)
	}
	say("leaks goroutines=%d fds=%d ids=%d", max(g, 0), max(fds, 0), max(live, 0))
}

func helperLogger() zerolog.Logger {
	return zerolog.New(os.Stderr).Level(zerolog.DebugLevel).With().Timestamp().Int("pid", os.Getpid()).Logger()
}

// commands reads stdin lines until "quit" or EOF, passing others to fn.
func commands(fn func(cmd string)) {
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "quit" {
			return
		}
		fn(line)
	}
}

func tokenOf(pd []byte) uint64 {
	if len(pd) < 8 {
		return 0
	}
	return binary.BigEndian.Uint64(pd)
}

func tokenPD(token uint64) []byte {
	return binary.BigEndian.AppendUint64(nil, token)
}

// helperServer is an RC server on a reactor with workers: it accepts every
// request (creating a QP and echoing every message when qp=1), reports each
// connection's figures when it ends, and destroys its ids from the
// handlers. Arguments: listen (address:port), workers, qp, ack (ACK_TIMEOUT
// exponent for accepted connections), depth (receives per connection),
// verbose (a line per event).
func helperServer() int {
	base := helperStart()
	log := helperLogger()
	f := soft.New(soft.WithLogger(log), soft.WithRequestTimeout(envDuration("CMRT_REL_ARG_REQTIMEOUT", 5*time.Second)))
	ch, err := channel.New(channel.WithFabric(f))
	if err != nil {
		say("fail channel: %v", err)
		return 1
	}
	mux, err := newCQMux()
	if err != nil {
		say("fail cq mux: %v", err)
		return 1
	}
	srv := &server{f: f, mux: mux, useQP: arg("qp", "1") == "1", depth: argInt("depth", 16),
		verbose: arg("verbose", "0") == "1", conns: make(map[*id.ID]*peer)}
	r, err := reactor.New(reactor.WithWorkers(argInt("workers", 4)), reactor.WithLogger(log),
		reactor.WithErrorHandler(func(err error) { log.Warn().Err(err).Msg("reactor") }))
	if err != nil {
		say("fail reactor: %v", err)
		return 1
	}
	h := handlers.New().
		OnConnectRequest(srv.onRequest).
		OnEstablished(srv.onEstablished).
		OnDisconnected(srv.onDisconnected).
		DefaultFunc(srv.onOther)
	l, err := id.Create(ch, nil, id.PSTCP)
	if err != nil {
		say("fail create: %v", err)
		return 1
	}
	if err := l.Bind(netip.MustParseAddrPort(arg("listen", "0.0.0.0:0"))); err != nil {
		say("fail bind: %v", err)
		return 1
	}
	if n := argInt("ack", -1); n >= 0 {
		if err := l.SetAckTimeout(uint8(n)); err != nil {
			say("fail ack timeout: %v", err)
			return 1
		}
	}
	if err := l.Listen(0); err != nil {
		say("fail listen: %v", err)
		return 1
	}
	if err := r.Register(ch, h); err != nil {
		say("fail register: %v", err)
		return 1
	}
	say("port %d", l.SrcPort())
	commands(func(cmd string) {
		if cmd == "stats" {
			srv.mu.Lock()
			say("stats conns=%d requests=%d established=%d closed=%d", len(srv.conns), srv.requests, srv.established, srv.closed)
			srv.mu.Unlock()
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := r.Close(ctx); err != nil {
		say("fail reactor close: %v", err)
	}
	srv.mu.Lock()
	left := srv.conns
	srv.conns = nil
	srv.mu.Unlock()
	for cm, p := range left {
		if p != nil {
			mux.remove(p)
		}
		_ = cm.Destroy()
	}
	_ = l.Destroy()
	// Events queued after the reactor stopped (for ids destroyed above
	// they are gone already).
	for {
		e, err := next(ch, 10*time.Millisecond)
		if err != nil {
			break
		}
		if e.Type == id.EventConnectRequest {
			_ = e.ID.Reject(nil)
			_ = e.ID.Destroy()
		}
	}
	if err := ch.Close(); err != nil {
		say("fail channel close: %v", err)
	}
	mux.close()
	say("rss %d", rssKiB(0))
	base.report(f)
	return 0
}

type server struct {
	f       *soft.Fabric
	mux     *cqMux
	useQP   bool
	depth   int
	verbose bool

	mu                            sync.Mutex
	conns                         map[*id.ID]*peer
	requests, established, closed int
}

func (s *server) onRequest(ev *id.Event) error {
	token := tokenOf(ev.PrivateData())
	var p *peer
	if s.useQP {
		var err error
		if p, err = newPeer(ev.ID, token, s.depth, true); err != nil {
			say("fail create QP: %v", err)
			_ = ev.ID.Reject(nil)
			return ev.ID.Destroy()
		}
		if err := s.mux.add(p); err != nil {
			say("fail cq mux add: %v", err)
		}
	}
	s.mu.Lock()
	if s.conns == nil { // shutting down
		s.mu.Unlock()
		_ = ev.ID.Reject(nil)
		return ev.ID.Destroy()
	}
	s.conns[ev.ID] = p
	s.requests++
	s.mu.Unlock()
	ev.ID.SetContext(token)
	if s.verbose {
		say("request %d", token)
	}
	if err := ev.ID.Accept(nil); err != nil {
		// The peer left before the answer: nothing else is reported.
		say("event %d accept-failed %v", token, err)
		s.mu.Lock()
		if s.conns != nil {
			delete(s.conns, ev.ID)
		}
		s.mu.Unlock()
		if p != nil {
			s.mux.remove(p)
		}
		return ev.ID.Destroy()
	}
	return nil
}

func (s *server) onEstablished(ev *id.Event) error {
	s.mu.Lock()
	s.established++
	s.mu.Unlock()
	if s.verbose {
		say("established %v", ev.ID.Context())
	}
	return nil
}

// onDisconnected reports the connection's figures and destroys it.
func (s *server) onDisconnected(ev *id.Event) error {
	s.mu.Lock()
	p, ok := s.conns[ev.ID]
	delete(s.conns, ev.ID)
	s.closed++
	s.mu.Unlock()
	if !ok {
		return nil
	}
	if p != nil {
		p.drain()
		p.mu.Lock()
		p.closed = true
		p.mu.Unlock()
		s.mux.remove(p)
		say("closed %s status=%d", p.stats(), ev.Status)
	} else {
		say("closed token=%v status=%d", ev.ID.Context(), ev.Status)
	}
	return ev.ID.Destroy()
}

// onOther reports any other event and destroys ids that are finished.
func (s *server) onOther(ev *id.Event) error {
	say("event %v %s %d", ev.ID.Context(), ev.Type, ev.Status)
	switch ev.Type {
	case id.EventRejected, id.EventUnreachable, id.EventConnectError, id.EventDeviceRemoval:
		s.mu.Lock()
		p, ok := s.conns[ev.ID]
		delete(s.conns, ev.ID)
		s.mu.Unlock()
		if ok {
			if p != nil {
				s.mux.remove(p)
			}
			return ev.ID.Destroy()
		}
	}
	return nil
}

// helperClient connects n ids to dst (private data: their token 1..n) on
// one channel and prints every event as "event <token> <TYPE> <status>".
// Arguments: dst, n, ack. Commands: "disconnect", "quit".
func helperClient() int {
	base := helperStart()
	log := helperLogger()
	f := soft.New(soft.WithLogger(log), soft.WithConnectTimeout(envDuration("CMRT_REL_ARG_TIMEOUT", 5*time.Second)))
	ch, err := channel.New(channel.WithFabric(f))
	if err != nil {
		say("fail channel: %v", err)
		return 1
	}
	dst := netip.MustParseAddrPort(arg("dst", ""))
	n := argInt("n", 1)
	var mu sync.Mutex
	ids := map[*id.ID]bool{}
	for k := 1; k <= n; k++ {
		c, err := id.Create(ch, uint64(k), id.PSTCP)
		if err != nil {
			say("fail create: %v", err)
			return 1
		}
		if a := argInt("ack", -1); a >= 0 {
			_ = c.SetAckTimeout(uint8(a))
		}
		ids[c] = true
		if err := c.ResolveAddr(netip.AddrPort{}, dst, 2*time.Second); err != nil {
			say("fail resolve: %v", err)
			return 1
		}
	}
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
			}
			e, err := next(ch, 50*time.Millisecond)
			if err != nil {
				continue
			}
			tok := e.ID.Context()
			switch e.Type {
			case id.EventAddrResolved:
				_ = e.ID.ResolveRoute(2 * time.Second)
				continue
			case id.EventRouteResolved:
				_ = e.ID.Connect(&id.ConnParam{PrivateData: tokenPD(tok.(uint64))})
				continue
			}
			say("event %v %s %d", tok, e.Type, e.Status)
		}
	}()
	commands(func(cmd string) {
		if cmd == "disconnect" {
			mu.Lock()
			for c := range ids {
				_ = c.Disconnect()
			}
			mu.Unlock()
		}
	})
	close(stop)
	<-done
	mu.Lock()
	for c := range ids {
		_ = c.Destroy()
	}
	mu.Unlock()
	if err := ch.Close(); err != nil {
		say("fail channel close: %v", err)
	}
	base.report(f)
	return 0
}

// helperStarved is an RC server with almost no descriptors to spare: after
// set-up its RLIMIT_NOFILE leaves spare descriptors (argument spare), so a
// flood of connections drives accept(2) into EMFILE. It accepts what
// completes the MPA exchange and destroys ids when they disconnect.
// Arguments: spare, reqtimeout.
func helperStarved() int {
	log := helperLogger()
	f := soft.New(soft.WithLogger(log), soft.WithRequestTimeout(envDuration("CMRT_REL_ARG_REQTIMEOUT", 30*time.Second)))
	ch, err := channel.New(channel.WithFabric(f))
	if err != nil {
		say("fail channel: %v", err)
		return 1
	}
	l, err := id.Create(ch, nil, id.PSTCP)
	if err != nil {
		say("fail create: %v", err)
		return 1
	}
	if err := l.Bind(netip.MustParseAddrPort(arg("listen", "127.0.0.1:0"))); err != nil {
		say("fail bind: %v", err)
		return 1
	}
	if err := l.Listen(0); err != nil {
		say("fail listen: %v", err)
		return 1
	}
	lim := uint64(fdCount() + argInt("spare", 8))
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &syscall.Rlimit{Cur: lim, Max: lim}); err != nil {
		say("fail setrlimit: %v", err)
		return 1
	}
	say("port %d limit %d open %d", l.SrcPort(), lim, fdCount())
	go func() {
		for {
			e, err := next(ch, time.Hour)
			if err != nil {
				return
			}
			switch e.Type {
			case id.EventConnectRequest:
				if err := e.ID.Accept(nil); err != nil {
					_ = e.ID.Destroy()
				}
			case id.EventEstablished:
				say("established")
			case id.EventDisconnected:
				_ = e.ID.Destroy()
			}
		}
	}()
	commands(func(string) {})
	fmt.Fprintln(os.Stderr, "quitting")
	return 0
}
