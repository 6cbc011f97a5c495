// Command rhttp serves and fetches HTTP over rsockets: http.Server.Serve on
// an rsocket.Listener, and an http.Client whose Transport dials with
// rsocket.DialContext. Nothing else changes in a net/http program.
//
//	rhttp [-b bind_address] [-p port (7471)]                            server
//	rhttp -s server_address [-p port] [-c connections (1)] [-n requests (100)]
//	      [-S size (1024)]                                            client
//
// The server answers GET /hello with "hello over rsocket" and echoes the
// body of POST /echo. The client makes -n POST /echo requests of -S bytes
// on up to -c connections (concurrently), checks every reply, and prints
// the rate. The server runs until interrupted. The exit status is 0 on
// success, 1 on failure.
package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"time"

	"github.com/cmrt/cmrt/examples/internal/tool"
	"github.com/cmrt/cmrt/rsocket"
)

const prog = "rhttp"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr, nil))
}

type config struct {
	dst, src, port string
	conns, n, size int
}

func usage(w io.Writer) {
	fmt.Fprintf(w, "usage: %s\n", prog)
	for _, l := range []string{"[-s server_address]", "[-b bind_address]", "[-p port_number]",
		"[-c connections]", "[-n requests]", "[-S body_size]"} {
		fmt.Fprintf(w, "\t%s\n", l)
	}
}

// run is the program; ready, if not nil, receives the server's address
// once it listens.
func run(ctx context.Context, args []string, stdout, stderr io.Writer, ready chan<- string) int {
	c := config{port: "7471", conns: 1, n: 100, size: 1024}
	opts, _, err := tool.Getopt(args, "s:b:p:c:n:S:")
	if err != nil {
		tool.PrintGetoptError(stderr, prog, err)
		usage(stdout)
		return tool.ExitFailure
	}
	for _, o := range opts {
		switch o.Name {
		case 's':
			c.dst = o.Arg
		case 'b':
			c.src = o.Arg
		case 'p':
			c.port = o.Arg
		case 'c':
			c.conns = tool.Atoi(o.Arg)
		case 'n':
			c.n = tool.Atoi(o.Arg)
		case 'S':
			c.size = tool.Atoi(o.Arg)
		}
	}
	if c.conns <= 0 || c.n <= 0 || c.size < 0 {
		usage(stdout)
		return tool.ExitFailure
	}
	if c.dst == "" {
		err = serve(ctx, c, stdout, ready)
	} else {
		err = client(ctx, c, stdout)
	}
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", prog, err)
		return tool.ExitFailure
	}
	return tool.ExitSuccess
}

func fabricOpts() []rsocket.Option {
	if f, err := tool.Fabric(); err == nil {
		return []rsocket.Option{rsocket.WithFabric(f)}
	}
	return nil
}

func handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /hello", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "hello over rsocket from %s to %s\n", r.Context().Value(http.LocalAddrContextKey), r.RemoteAddr)
	})
	mux.HandleFunc("POST /echo", func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(w, r.Body)
	})
	return mux
}

func serve(ctx context.Context, c config, stdout io.Writer, ready chan<- string) error {
	l, err := rsocket.Listen("tcp", net.JoinHostPort(c.src, c.port), fabricOpts()...)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: handler(), ReadHeaderTimeout: 10 * time.Second}
	fmt.Fprintf(stdout, "%s: serving HTTP on %s\n", prog, l.Addr())
	if ready != nil {
		ready <- l.Addr().String()
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(l) }()
	select {
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		err := srv.Shutdown(sctx)
		<-errc
		return err
	case err := <-errc:
		return err
	}
}

// newClient returns an HTTP client whose connections are rsockets, at most
// conns of them.
func newClient(conns int) *http.Client {
	d := rsocket.NewDialer(fabricOpts()...)
	return &http.Client{Transport: &http.Transport{
		DialContext:         func(ctx context.Context, _, addr string) (net.Conn, error) { return d.DialContext(ctx, "tcp", addr) },
		MaxConnsPerHost:     conns,
		MaxIdleConnsPerHost: conns,
	}}
}

func client(ctx context.Context, c config, stdout io.Writer) error {
	hc := newClient(c.conns)
	defer hc.CloseIdleConnections()
	base := "http://" + net.JoinHostPort(c.dst, c.port)
	resp, err := hc.Get(base + "/hello")
	if err != nil {
		return err
	}
	hello, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%s", hello)
	t0 := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, c.conns)
	for k := 0; k < c.conns; k++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := k; j < c.n; j += c.conns {
				body := bytes.Repeat([]byte{byte(j)}, c.size)
				req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/echo", bytes.NewReader(body))
				resp, err := hc.Do(req)
				if err != nil {
					errs <- err
					return
				}
				got, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				if err != nil || !bytes.Equal(got, body) {
					errs <- fmt.Errorf("request %d: %d bytes back, %v", j, len(got), err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	var all []error
	for err := range errs {
		all = append(all, err)
	}
	if err := errors.Join(all...); err != nil {
		return err
	}
	d := time.Since(t0)
	fmt.Fprintf(stdout, "echo: %d requests of %d bytes on %d connections in %.3fs: %.0f requests/s\n",
		c.n, c.size, c.conns, d.Seconds(), float64(c.n)/d.Seconds())
	return nil
}
