// Command rgrpc serves and calls gRPC over rsockets: grpc.Server.Serve on
// an rsocket.Listener, and clients that dial with rsocket.DialContext
// through grpc.WithContextDialer. Nothing else changes in a gRPC program.
//
//	rgrpc [-b bind_address] [-p port (7471)] [-T s]                 server
//	rgrpc -s server_address [-p port] [-c connections (1)] [-n requests (1000)]
//	      [-S size (64)] [-T s]                                     client
//
// The service (cmrt.rsocket.Echo) echoes: Unary returns its request,
// Stream sends back each message. The client makes -n unary calls spread
// over -c connections, then streams -n messages on each connection,
// checks every reply, and prints the rates. -T s uses TCP instead of
// rsockets, for comparison. The server runs until interrupted. The exit
// status is 0 on success, 1 on failure.
//
// gRPC is a dependency of this example only: the rsocket package does not
// link it.
package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/cmrt/cmrt/examples/internal/tool"
	"github.com/cmrt/cmrt/rsocket"
)

const prog = "rgrpc"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr, nil))
}

type config struct {
	dst, src, port string
	conns, n, size int
	tcp            bool
}

func usage(w io.Writer) {
	fmt.Fprintf(w, "usage: %s\n", prog)
	for _, l := range []string{"[-s server_address]", "[-b bind_address]", "[-p port_number]",
		"[-c connections]", "[-n requests]", "[-S message_size]", "[-T s] (TCP sockets)"} {
		fmt.Fprintf(w, "\t%s\n", l)
	}
}

// run is the program; ready, if not nil, receives the server's address
// once it listens.
func run(ctx context.Context, args []string, stdout, stderr io.Writer, ready chan<- string) int {
	c := config{port: "7471", conns: 1, n: 1000, size: 64}
	opts, _, err := tool.Getopt(args, "s:b:p:c:n:S:T:")
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
		case 'T':
			if o.Arg != "s" {
				usage(stdout)
				return tool.ExitFailure
			}
			c.tcp = true
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

// listen listens on rsockets, or TCP with -T s.
func listen(c config) (net.Listener, error) {
	addr := net.JoinHostPort(c.src, c.port)
	if c.tcp {
		return net.Listen("tcp", addr)
	}
	return rsocket.Listen("tcp", addr, fabricOpts()...)
}

// dialer is gRPC's context dialer over rsockets, or TCP with -T s.
func dialer(c config) func(context.Context, string) (net.Conn, error) {
	if c.tcp {
		var d net.Dialer
		return func(ctx context.Context, addr string) (net.Conn, error) { return d.DialContext(ctx, "tcp", addr) }
	}
	d := rsocket.NewDialer(fabricOpts()...)
	return func(ctx context.Context, addr string) (net.Conn, error) { return d.DialContext(ctx, "tcp", addr) }
}

func serve(ctx context.Context, c config, stdout io.Writer, ready chan<- string) error {
	l, err := listen(c)
	if err != nil {
		return err
	}
	s := grpc.NewServer()
	s.RegisterService(&serviceDesc, echo{})
	fmt.Fprintf(stdout, "%s: serving %s on %s\n", prog, serviceName, l.Addr())
	if ready != nil {
		ready <- l.Addr().String()
	}
	errc := make(chan error, 1)
	go func() { errc <- s.Serve(l) }()
	select {
	case <-ctx.Done():
		s.GracefulStop()
		<-errc
		return nil
	case err := <-errc:
		return err
	}
}

// newClient connects a gRPC client to addr over rsockets.
func newClient(c config, addr string) (*grpc.ClientConn, error) {
	return grpc.NewClient("passthrough:///"+addr, grpc.WithContextDialer(dialer(c)),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
}

func client(ctx context.Context, c config, stdout io.Writer) error {
	addr := net.JoinHostPort(c.dst, c.port)
	ccs := make([]*grpc.ClientConn, c.conns)
	for k := range ccs {
		cc, err := newClient(c, addr)
		if err != nil {
			return err
		}
		defer cc.Close()
		ccs[k] = cc
	}
	t0 := time.Now()
	if err := unaryCalls(ctx, ccs, c.n, c.size); err != nil {
		return err
	}
	d := time.Since(t0)
	fmt.Fprintf(stdout, "unary: %d requests of %d bytes over %d connections in %.3fs: %.0f requests/s\n",
		c.n, c.size, c.conns, d.Seconds(), float64(c.n)/d.Seconds())
	t0 = time.Now()
	if err := streams(ctx, ccs, c.n, c.size); err != nil {
		return err
	}
	d = time.Since(t0)
	fmt.Fprintf(stdout, "stream: %d messages of %d bytes on each of %d connections in %.3fs: %.0f messages/s\n",
		c.n, c.size, c.conns, d.Seconds(), float64(c.n*c.conns)/d.Seconds())
	return nil
}

// payload is message k's bytes.
func payload(k, size int) []byte {
	b := make([]byte, size)
	for j := range b {
		b[j] = byte(k + j)
	}
	return b
}

// unaryCalls makes n calls spread over the connections, one goroutine per
// connection, checking each echo.
func unaryCalls(ctx context.Context, ccs []*grpc.ClientConn, n, size int) error {
	var wg sync.WaitGroup
	errs := make(chan error, len(ccs))
	for k, cc := range ccs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := k; j < n; j += len(ccs) {
				in, out := wrapperspb.Bytes(payload(j, size)), new(wrapperspb.BytesValue)
				if err := cc.Invoke(ctx, unaryMethod, in, out); err != nil {
					errs <- fmt.Errorf("unary call %d: %w", j, err)
					return
				}
				if !bytes.Equal(in.Value, out.Value) {
					errs <- fmt.Errorf("unary call %d: reply differs", j)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	return errors.Join(collect(errs)...)
}

// streams sends n messages on one bidirectional stream per connection,
// reading each echo back before the next.
func streams(ctx context.Context, ccs []*grpc.ClientConn, n, size int) error {
	var wg sync.WaitGroup
	errs := make(chan error, len(ccs))
	for _, cc := range ccs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			st, err := cc.NewStream(ctx, &serviceDesc.Streams[0], streamMethod)
			if err != nil {
				errs <- err
				return
			}
			for j := 0; j < n; j++ {
				in, out := wrapperspb.Bytes(payload(j, size)), new(wrapperspb.BytesValue)
				if err := st.SendMsg(in); err != nil {
					errs <- fmt.Errorf("stream send %d: %w", j, err)
					return
				}
				if err := st.RecvMsg(out); err != nil {
					errs <- fmt.Errorf("stream receive %d: %w", j, err)
					return
				}
				if !bytes.Equal(in.Value, out.Value) {
					errs <- errors.New("stream: reply " + strconv.Itoa(j) + " differs")
					return
				}
			}
			if err := st.CloseSend(); err != nil {
				errs <- err
				return
			}
			if err := st.RecvMsg(new(wrapperspb.BytesValue)); err != io.EOF {
				errs <- fmt.Errorf("stream end: %v", err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	return errors.Join(collect(errs)...)
}

func collect(errs <-chan error) []error {
	var out []error
	for err := range errs {
		out = append(out, err)
	}
	return out
}
