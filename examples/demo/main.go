// Command demo runs an RDMA CM server and client in one process on the
// software fabric (loopback, no RDMA hardware, no root): the client connects
// -n ids with private data, the server accepts all but the last, which it
// rejects with private data, and every connection is then disconnected.
// Each event is printed as it happens, a failure's status with its name
// ("status -104 ECONNRESET"); the exit status is 0 only if every event the
// flow promises arrived, with the right private data.
//
// The server runs on a reactor (an epoll loop dispatching to typed handlers
// on a worker pool); the client reads its event channel directly, as a C
// librdmacm program does.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/cmrt/cmrt/channel"
	"github.com/cmrt/cmrt/examples/internal/tool"
	"github.com/cmrt/cmrt/handlers"
	"github.com/cmrt/cmrt/id"
	"github.com/cmrt/cmrt/id/journal"
	"github.com/cmrt/cmrt/reactor"
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

// printer serializes output lines from the server's handlers and the client.
type printer struct {
	mu    sync.Mutex
	w     io.Writer
	start time.Time
}

func (p *printer) printf(side, format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	fmt.Fprintf(p.w, "%8.3fms %-6s %s\n", float64(time.Since(p.start).Microseconds())/1000, side, fmt.Sprintf(format, args...))
}

func (p *printer) event(side string, ev *id.Event) {
	extra := ""
	if pd := strings.TrimRight(string(ev.PrivateData()), "\x00"); pd != "" {
		extra = fmt.Sprintf(" private data %q", pd)
	}
	if ev.Status != 0 {
		extra += " status " + tool.StatusText(ev.Type, ev.Status) // "-104 ECONNRESET"
	}
	p.printf(side, "id %-3d %s%s", ev.ID.Handle(), ev.Type, extra)
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	n := fs.Int("n", 4, "connections to make (the last one is rejected)")
	addr := fs.String("a", "127.0.0.1", "address to listen on and connect to")
	timeout := fs.Duration("t", 10*time.Second, "give up after this long")
	journalFile := fs.String("journal", "", "write the journal of the run's ids to this file as JSON lines (go run ./cmd/cmrt draw FILE draws it)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *n < 2 {
		fmt.Fprintln(stderr, "demo: -n must be at least 2 (one accepted, one rejected)")
		return 2
	}
	ip, err := netip.ParseAddr(*addr)
	if err != nil {
		fmt.Fprintf(stderr, "demo: bad address %q: %v\n", *addr, err)
		return 2
	}
	var opts []id.Option
	if *journalFile != "" {
		f, err := os.Create(*journalFile)
		if err != nil {
			fmt.Fprintln(stderr, "demo:", err)
			return 2
		}
		j := journal.New(1)
		stop := j.ObserveJSON(f)
		defer func() { stop(); f.Close() }()
		opts = append(opts, id.WithJournal(j))
	}
	p := &printer{w: stdout, start: time.Now()}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	if err := demo(ctx, p, ip, *n, opts...); err != nil {
		fmt.Fprintln(stderr, "demo: FAIL:", err)
		return 1
	}
	p.printf("demo", "OK: %d connections established and disconnected, 1 rejected", *n-1)
	return 0
}

func demo(ctx context.Context, p *printer, ip netip.Addr, n int, opts ...id.Option) error {
	// --- server: a listener on its own channel, driven by a reactor.
	sch, err := channel.New()
	if err != nil {
		return err
	}
	defer sch.Close()
	var errMu sync.Mutex
	var handlerErr error
	r, err := reactor.New(reactor.WithWorkers(4), reactor.WithErrorHandler(func(err error) {
		errMu.Lock()
		defer errMu.Unlock()
		if handlerErr == nil {
			handlerErr = err
		}
	}))
	if err != nil {
		return err
	}
	defer r.Close(context.Background())
	serverDone := make(chan struct{}, n)
	mux := handlers.New().
		OnConnectRequest(func(ev *id.Event) error {
			p.event("server", ev)
			pd := string(ev.PrivateData())
			if strings.HasPrefix(pd, "reject me") {
				p.printf("server", "id %-3d reject with private data", ev.ID.Handle())
				if err := ev.ID.Reject([]byte("sorry, full")); err != nil {
					return err
				}
				serverDone <- struct{}{}
				return ev.ID.Destroy()
			}
			reply := "welcome " + strings.TrimPrefix(pd, "hello from ")
			return ev.ID.Accept(&id.ConnParam{PrivateData: []byte(reply)})
		}).
		OnEstablished(func(ev *id.Event) error { p.event("server", ev); return nil }).
		OnDisconnected(func(ev *id.Event) error {
			p.event("server", ev)
			serverDone <- struct{}{}
			return ev.ID.Destroy() // from inside its own handler
		}).
		DefaultFunc(func(ev *id.Event) error {
			p.event("server", ev)
			return fmt.Errorf("unexpected %s", ev.Type)
		})
	if err := r.Register(sch, mux); err != nil {
		return err
	}
	listener, err := id.Create(sch, "demo server", id.PSTCP, opts...)
	if err != nil {
		return err
	}
	defer listener.Destroy()
	if err := listener.Bind(netip.AddrPortFrom(ip, 0)); err != nil {
		return err
	}
	if err := listener.Listen(0); err != nil {
		return err
	}
	p.printf("server", "id %-3d listening on %s (device %s)", listener.Handle(), listener.LocalAddr(), listener.DeviceName())

	// --- client: n ids on one channel, read directly.
	cch, err := channel.New()
	if err != nil {
		return err
	}
	defer cch.Close()
	clients := make([]*id.ID, n)
	for k := range clients {
		if clients[k], err = id.Create(cch, k, id.PSTCP, opts...); err != nil {
			return err
		}
		defer clients[k].Destroy()
		if err := clients[k].ResolveAddr(netip.AddrPort{}, listener.LocalAddr(), 2*time.Second); err != nil {
			return err
		}
	}
	want := map[id.EventType]int{id.EventAddrResolved: n, id.EventRouteResolved: n, id.EventEstablished: n - 1,
		id.EventRejected: 1, id.EventDisconnected: n - 1}
	got := make(map[id.EventType]int)
	for got[id.EventDisconnected] < n-1 || got[id.EventRejected] < 1 {
		ev, err := cch.GetEventContext(ctx)
		if err != nil {
			return fmt.Errorf("client waiting for events (%v so far): %w", got, err)
		}
		p.event("client", ev)
		k := ev.ID.Context().(int)
		got[ev.Type]++
		switch ev.Type {
		case id.EventAddrResolved:
			err = ev.ID.ResolveRoute(2 * time.Second)
		case id.EventRouteResolved:
			msg := fmt.Sprintf("hello from client %d", k)
			if k == n-1 {
				msg = fmt.Sprintf("reject me (client %d)", k)
			}
			err = ev.ID.Connect(&id.ConnParam{PrivateData: []byte(msg)})
		case id.EventEstablished:
			if want := fmt.Sprintf("welcome client %d", k); string(ev.PrivateData()) != want {
				err = fmt.Errorf("client %d: reply %q, want %q", k, ev.PrivateData(), want)
			}
			if got[id.EventEstablished] == n-1 {
				for _, c := range clients[:n-1] {
					if derr := c.Disconnect(); derr != nil {
						err = derr
					}
				}
			}
		case id.EventRejected:
			if !strings.HasPrefix(string(ev.PrivateData()), "sorry, full") {
				err = fmt.Errorf("reject private data %q", ev.PrivateData())
			}
		case id.EventDisconnected:
		default:
			err = fmt.Errorf("client %d: unexpected %s status %s", k, ev.Type, tool.StatusText(ev.Type, ev.Status))
		}
		_ = ev.Ack()
		if err != nil {
			return err
		}
	}
	for t, c := range want {
		if got[t] != c {
			return fmt.Errorf("client saw %d %s, want %d", got[t], t, c)
		}
	}
	for k := 0; k < n; k++ {
		select {
		case <-serverDone:
		case <-ctx.Done():
			return errors.New("server did not see every connection end")
		}
	}
	errMu.Lock()
	defer errMu.Unlock()
	return handlerErr
}
