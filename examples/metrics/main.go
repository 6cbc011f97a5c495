// Command metrics serves cmrt's Prometheus metrics (package
// reactor/promcollector) at /metrics, for an RDMA CM server that runs in
// the same process on the software fabric (loopback, no RDMA hardware, no
// root).
//
// The server listens on a reactor and accepts every connection whose
// private data is not "reject". At start the command makes -n connections
// to it itself (the last one rejected) and disconnects them, so that the
// metrics have something to show; then it serves /metrics on -listen until
// interrupted, or, with -once, prints what /metrics serves and exits.
//
//	go run ./examples/metrics -listen 127.0.0.1:9464 &
//	curl -s 127.0.0.1:9464/metrics | grep ^cmrt_
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/signal"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/cmrt/cmrt/channel"
	"github.com/cmrt/cmrt/handlers"
	"github.com/cmrt/cmrt/id"
	"github.com/cmrt/cmrt/id/journal"
	"github.com/cmrt/cmrt/reactor"
	"github.com/cmrt/cmrt/reactor/promcollector"
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("metrics", flag.ContinueOnError)
	fs.SetOutput(stderr)
	listen := fs.String("listen", "127.0.0.1:9464", "serve /metrics on this address")
	addr := fs.String("a", "127.0.0.1", "address the RDMA CM server listens on")
	n := fs.Int("n", 3, "connections to make at start (the last one is rejected)")
	once := fs.Bool("once", false, "print what /metrics serves after the connections, and exit")
	timeout := fs.Duration("t", 10*time.Second, "give up the connections at start after this long")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	ip, err := netip.ParseAddr(*addr)
	if err != nil || *n < 0 {
		fmt.Fprintf(stderr, "metrics: bad address %q or -n %d\n", *addr, *n)
		return 2
	}
	a, err := start(*listen, ip)
	if err != nil {
		fmt.Fprintln(stderr, "metrics:", err)
		return 1
	}
	defer a.close()
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	err = a.connect(ctx, *n)
	cancel()
	if err != nil {
		fmt.Fprintln(stderr, "metrics:", err)
		return 1
	}
	url := "http://" + a.ln.Addr().String() + "/metrics"
	if *once {
		resp, err := http.Get(url)
		if err != nil {
			fmt.Fprintln(stderr, "metrics:", err)
			return 1
		}
		defer resp.Body.Close()
		if _, err := io.Copy(stdout, resp.Body); err != nil {
			fmt.Fprintln(stderr, "metrics:", err)
			return 1
		}
		return 0
	}
	fmt.Fprintf(stdout, "serving %s (RDMA CM server on %s); interrupt to stop\n", url, a.listener.LocalAddr())
	sig, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	<-sig.Done()
	return 0
}

// app is the RDMA CM server, its reactor and the HTTP server of /metrics.
type app struct {
	j        *journal.Journal
	col      *promcollector.Collector
	r        *reactor.Reactor
	sch      *channel.Channel
	listener *id.ID
	ln       net.Listener
	http     *http.Server
	served   chan error
}

// start starts the RDMA CM server on ip (any port) and serves /metrics on
// listen. Its ids record into a journal of their own, which the collector
// counts.
func start(listen string, ip netip.Addr) (a *app, err error) {
	a = &app{j: journal.New(journal.DefaultCapacity)}
	a.col = promcollector.New(promcollector.WithJournal(a.j)) // before the first id: it counts from now on
	defer func() {
		if err != nil {
			a.close()
		}
	}()
	if a.sch, err = channel.New(); err != nil {
		return nil, err
	}
	if a.r, err = reactor.New(reactor.WithWorkers(2)); err != nil {
		return nil, err
	}
	mux := handlers.New().
		OnConnectRequest(func(ev *id.Event) error {
			if string(ev.PrivateData()) == "reject" {
				if err := ev.ID.Reject(nil); err != nil {
					return err
				}
				return ev.ID.Destroy()
			}
			return ev.ID.Accept(nil)
		}).
		OnEstablished(func(*id.Event) error { return nil }).
		OnDisconnected(func(ev *id.Event) error { return ev.ID.Destroy() })
	if err = a.r.Register(a.sch, mux); err != nil {
		return nil, err
	}
	if a.listener, err = id.Create(a.sch, nil, id.PSTCP, id.WithJournal(a.j)); err != nil {
		return nil, err
	}
	if err = a.listener.Bind(netip.AddrPortFrom(ip, 0)); err != nil {
		return nil, err
	}
	if err = a.listener.Listen(0); err != nil {
		return nil, err
	}

	if err = a.col.AddReactor("server", a.r); err != nil {
		return nil, err
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(a.col, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	hm := http.NewServeMux()
	hm.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	if a.ln, err = net.Listen("tcp", listen); err != nil {
		return nil, err
	}
	a.http = &http.Server{Handler: hm, ReadHeaderTimeout: 5 * time.Second}
	a.served = make(chan error, 1)
	go func() { a.served <- a.http.Serve(a.ln) }()
	return a, nil
}

// connect makes n connections to the server, the last one rejected, and
// disconnects the others; the client reads its channel directly.
func (a *app) connect(ctx context.Context, n int) error {
	if n == 0 {
		return nil
	}
	cch, err := channel.New()
	if err != nil {
		return err
	}
	defer cch.Close()
	clients := make([]*id.ID, n)
	for k := range clients {
		pd := "hello"
		if k == n-1 {
			pd = "reject"
		}
		if clients[k], err = id.Create(cch, pd, id.PSTCP, id.WithJournal(a.j)); err != nil {
			return err
		}
		defer clients[k].Destroy()
		if err := clients[k].ResolveAddr(netip.AddrPort{}, a.listener.LocalAddr(), 2*time.Second); err != nil {
			return err
		}
	}
	established, disconnected, rejected := 0, 0, 0
	for disconnected < n-1 || rejected < 1 {
		ev, err := cch.GetEventContext(ctx)
		if err != nil {
			return fmt.Errorf("waiting for the client's events: %w", err)
		}
		switch ev.Type {
		case id.EventAddrResolved:
			err = ev.ID.ResolveRoute(2 * time.Second)
		case id.EventRouteResolved:
			err = ev.ID.Connect(&id.ConnParam{PrivateData: []byte(ev.ID.Context().(string))})
		case id.EventEstablished:
			if established++; established == n-1 {
				for _, c := range clients[:n-1] {
					if derr := c.Disconnect(); derr != nil {
						err = derr
					}
				}
			}
		case id.EventRejected:
			rejected++
		case id.EventDisconnected:
			disconnected++
		default:
			err = fmt.Errorf("client: unexpected %s status %d", ev.Type, ev.Status)
		}
		_ = ev.Ack()
		if err != nil {
			return err
		}
	}
	// The server's last DISCONNECTED may still be on its way.
	for a.r.Stats().Events < uint64(n+2*(n-1)) || a.r.Stats().Pending > 0 {
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for the server's events: %w", ctx.Err())
		case <-time.After(time.Millisecond):
		}
	}
	return nil
}

// close stops serving and releases the server.
func (a *app) close() {
	if a.http != nil {
		_ = a.http.Close()
		if err := <-a.served; err != nil && !errors.Is(err, http.ErrServerClosed) {
			fmt.Fprintln(os.Stderr, "metrics: serve:", err)
		}
	}
	if a.col != nil {
		a.col.Close()
	}
	if a.listener != nil {
		_ = a.listener.Destroy()
	}
	if a.r != nil {
		_ = a.r.Close(context.Background())
	}
	if a.sch != nil {
		_ = a.sch.Close()
	}
}
