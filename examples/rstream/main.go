// Command rstream is librdmacm's rstream over cmrt's rsocket package: a
// streaming benchmark between a server and a client, each side sending
// and then receiving, over rsockets (or plain TCP sockets with -T s), with
// rdma-core's options and output.
//
//	rstream [-s server_address] [-b bind_address] [-f ip|name] [-B buffer_size]
//	        [-i inline_size] [-I iterations] [-C transfer_count]
//	        [-S transfer_size|all] [-p port (7471)] [-k keepalive_time]
//	        [-T s|a|b|n|r|v]
//
// Without -s it is the server. Without -I, -C or -S size it runs the
// latency tests (one transfer each way, many times) at 64 B, 4 KiB, 64 KiB
// and 1 MiB on one connection, then the bandwidth tests (many transfers
// one way, then back) on a second; -S all adds the sizes in between.
// Each test prints a line of rdma-core's table (name, bytes, xfers, iters,
// total, time, Gb/sec, usec/xfer). -T v verifies the data (common.c's byte
// pattern); -T s uses TCP sockets instead of rsockets; -T a, b and n
// (poll, blocking, non-blocking calls) are accepted: a Go connection is
// always a blocking one, and every receive here waits for all its bytes,
// as MSG_WAITALL. -T f (fork) and -T r (rdma_getaddrinfo) are accepted and
// change nothing. A connection's buffers are 1 MiB each way (rstream's
// SO_SNDBUF/SO_RCVBUF of 512 KiB, doubled), -B sets twice its value.
//
// The exit status is 0 on success, 1 on failure. The sockets run on the
// software fabric unless CMRT_FABRIC names another one.
package main

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/cmrt/cmrt/examples/internal/rsperf"
	"github.com/cmrt/cmrt/examples/internal/tool"
	"github.com/cmrt/cmrt/rsocket"
)

const prog = "rstream"

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

// optimization is what the next connection's inline size is set for.
type optimization int

const (
	optMixed optimization = iota
	optLatency
	optBandwidth
)

type rstream struct {
	stdout, stderr io.Writer
	dst, src, port string
	useRS, verify  bool
	custom         bool
	sizeOption     int
	iterations     int
	count, size    int
	bufSize        int
	inline         int
	keepalive      int
	opt            optimization
	name           string

	pat  rsperf.Pattern
	buf  []byte
	lis  net.Listener
	conn net.Conn
}

func usage(w io.Writer) {
	fmt.Fprintf(w, "usage: %s\n", prog)
	for _, l := range []string{"[-s server_address]", "[-b bind_address]", "[-f address_format]",
		"    name, ip, ipv6, or gid", "[-B buffer_size]", "[-i inline_size]", "[-I iterations]",
		"[-C transfer_count]", "[-S transfer_size or all]", "[-p port_number]", "[-k keepalive_time]",
		"[-T test_option]", "    s|sockets - use standard tcp/ip sockets",
		"    a|async - asynchronous operation (use poll)", "    b|blocking - use blocking calls",
		"    f|fork - fork server processing", "    n|nonblocking - use nonblocking calls",
		"    r|resolve - use rdma cm to resolve address", "    v|verify - verify data"} {
		fmt.Fprintf(w, "\t%s\n", l)
	}
}

// run is the program: args without the program name; the result is the
// exit status.
func run(args []string, stdout, stderr io.Writer) int {
	p := &rstream{stdout: stdout, stderr: stderr, port: "7471", useRS: true, iterations: 1,
		count: 1000, size: 1000, inline: 64, name: "custom"}
	opts, _, err := tool.Getopt(args, "s:b:f:B:i:I:C:S:p:k:T:")
	if err != nil {
		tool.PrintGetoptError(stderr, prog, err)
		usage(stdout)
		return tool.ExitFailure
	}
	for _, o := range opts {
		switch o.Name {
		case 's':
			p.dst = o.Arg
		case 'b':
			p.src = o.Arg
		case 'f':
			if !strings.HasPrefix(strings.ToLower(o.Arg), "ip") && !strings.HasPrefix(strings.ToLower(o.Arg), "name") {
				fmt.Fprintf(stderr, "Warning: unknown address format\n")
			}
		case 'B':
			p.bufSize = tool.Atoi(o.Arg)
		case 'i':
			p.inline = tool.Atoi(o.Arg)
		case 'I':
			p.custom, p.iterations = true, tool.Atoi(o.Arg)
		case 'C':
			p.custom, p.count = true, tool.Atoi(o.Arg)
		case 'S':
			if strings.HasPrefix(strings.ToLower(o.Arg), "all") {
				p.sizeOption = 1
			} else {
				p.custom, p.size = true, tool.Atoi(o.Arg)
			}
		case 'p':
			p.port = o.Arg
		case 'k':
			p.keepalive = tool.Atoi(o.Arg)
		case 'T':
			if !p.testOpt(o.Arg) {
				usage(stdout)
				return tool.ExitFailure
			}
		}
	}
	if p.custom && (p.size <= 0 || p.count <= 0 || p.iterations <= 0) {
		usage(stdout)
		return tool.ExitFailure
	}
	if err := p.run(); err != nil {
		return tool.ExitFailure
	}
	return tool.ExitSuccess
}

func (p *rstream) testOpt(a string) bool {
	a = strings.ToLower(a)
	if len(a) == 1 {
		switch a[0] {
		case 's', 'f': // f forks the server's work in rdma-core, on TCP sockets
			p.useRS = false
		case 'a', 'b', 'n', 'r':
		case 'v':
			p.verify = true
		default:
			return false
		}
		return true
	}
	for _, w := range []string{"socket", "async", "block", "nonblock", "resolve", "verify", "fork"} {
		if strings.HasPrefix(a, w) {
			switch w {
			case "socket", "fork":
				p.useRS = false
			case "verify":
				p.verify = true
			}
			return true
		}
	}
	return false
}

// options are the socket options of set_options for the next connection.
func (p *rstream) options() []rsocket.Option {
	buf := 1 << 19
	if p.bufSize != 0 {
		buf = p.bufSize
	}
	opts := []rsocket.Option{rsocket.WithSendBuffer(2 * buf), rsocket.WithRecvBuffer(2 * buf)}
	switch p.opt {
	case optLatency:
		opts = append(opts, rsocket.WithInline(p.inline))
	case optBandwidth:
		opts = append(opts, rsocket.WithInline(0))
	}
	if p.keepalive > 0 {
		opts = append(opts, rsocket.WithKeepalive(time.Duration(p.keepalive)*time.Second))
		fmt.Fprintf(p.stdout, "Keepalive: ON\n  time: %d\n", p.keepalive)
	}
	if p.useRS {
		if f, err := tool.Fabric(); err == nil {
			opts = append(opts, rsocket.WithFabric(f))
		}
	}
	return opts
}

func (p *rstream) run() error {
	maxSize := rsperf.Sizes[len(rsperf.Sizes)-1].Bytes
	if p.custom {
		maxSize = p.size
	}
	p.buf = make([]byte, maxSize)
	if p.dst == "" {
		if err := p.listen(); err != nil {
			return err
		}
		defer p.lis.Close()
	}
	rsperf.Header(p.stdout)
	if !p.custom {
		p.opt = optLatency
		if err := p.connect(); err != nil {
			return err
		}
		for _, s := range rsperf.Sizes {
			if s.Option > p.sizeOption {
				continue
			}
			p.name, p.count, p.size, p.iterations = rsperf.LatName(s.Bytes), 1, s.Bytes, rsperf.SizeToCount(s.Bytes)
			if err := p.runTest(); err != nil {
				p.conn.Close()
				return err
			}
		}
		p.shutdown()
		p.opt = optBandwidth
		if err := p.connect(); err != nil {
			return err
		}
		for _, s := range rsperf.Sizes {
			if s.Option > p.sizeOption {
				continue
			}
			p.name, p.iterations, p.size, p.count = rsperf.BwName(s.Bytes), 1, s.Bytes, rsperf.SizeToCount(s.Bytes)
			if err := p.runTest(); err != nil {
				p.conn.Close()
				return err
			}
		}
		p.shutdown()
		return nil
	}
	if err := p.connect(); err != nil {
		return err
	}
	err := p.runTest()
	p.shutdown()
	return err
}

// shutdown is rshutdown(SHUT_RDWR) and rclose.
func (p *rstream) shutdown() { p.conn.Close() }

func (p *rstream) listen() error {
	ap, err := tool.Getaddrinfo(p.src, p.port, true)
	if err != nil {
		fmt.Fprintf(p.stdout, "getaddrinfo: %v\n", err)
		return err
	}
	if p.useRS {
		p.lis, err = rsocket.Listen("tcp", ap.String(), append(p.options(), rsocket.WithBacklog(1))...)
	} else {
		p.lis, err = net.Listen("tcp", ap.String())
	}
	if err != nil {
		tool.Perror(p.stderr, "rbind", unwrapOp(err))
	}
	return err
}

func (p *rstream) connect() error {
	if p.dst == "" {
		if l, ok := p.lis.(*rsocket.Listener); ok {
			l.SetOptions(p.options()...)
		}
		c, err := p.lis.Accept()
		if err != nil {
			tool.Perror(p.stderr, "raccept", unwrapOp(err))
			return err
		}
		p.conn = c
		return nil
	}
	dst, err := tool.Getaddrinfo(p.dst, p.port, false)
	if err != nil {
		fmt.Fprintf(p.stdout, "getaddrinfo: %v\n", err)
		return err
	}
	opts := p.options()
	var local netip.AddrPort
	if p.src != "" {
		a, err := tool.LookupHost(p.src)
		if err != nil {
			fmt.Fprintf(p.stdout, "getaddrinfo src_addr: %v\n", err)
			return err
		}
		local = netip.AddrPortFrom(a, 0)
		opts = append(opts, rsocket.WithLocalAddr(local))
	}
	if p.useRS {
		p.conn, err = rsocket.Dial("tcp", dst.String(), opts...)
	} else {
		d := net.Dialer{}
		if local.IsValid() {
			d.LocalAddr = net.TCPAddrFromAddrPort(local)
		}
		p.conn, err = d.Dial("tcp", dst.String())
	}
	if err != nil {
		tool.Perror(p.stderr, "rconnect", unwrapOp(err))
	}
	return err
}

// unwrapOp takes the errno out of a *net.OpError for perror's words.
func unwrapOp(err error) error {
	var op *net.OpError
	if errors.As(err, &op) {
		return op.Err
	}
	return err
}

func (p *rstream) sendXfer(size int) error {
	if p.verify {
		p.pat.Format(p.buf[:size])
	}
	if _, err := p.conn.Write(p.buf[:size]); err != nil {
		tool.Perror(p.stderr, "rsend", unwrapOp(err))
		return err
	}
	return nil
}

func (p *rstream) recvXfer(size int) error {
	if _, err := io.ReadFull(p.conn, p.buf[:size]); err != nil {
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			err = syscall.ECONNRESET
		}
		tool.Perror(p.stderr, "rrecv", unwrapOp(err))
		return err
	}
	if p.verify {
		return p.pat.Verify(p.stdout, p.buf[:size])
	}
	return nil
}

func (p *rstream) xfer(send bool, size int) error {
	if send {
		return p.sendXfer(size)
	}
	return p.recvXfer(size)
}

func (p *rstream) runTest() error {
	client := p.dst != ""
	if err := p.xfer(client, 16); err != nil {
		return err
	}
	if err := p.xfer(!client, 16); err != nil {
		return err
	}
	start := time.Now()
	for i := 0; i < p.iterations; i++ {
		for t := 0; t < p.count; t++ {
			if err := p.xfer(client, p.size); err != nil {
				return err
			}
		}
		for t := 0; t < p.count; t++ {
			if err := p.xfer(!client, p.size); err != nil {
				return err
			}
		}
	}
	rsperf.Perf(p.stdout, p.name, p.size, p.count, p.iterations, time.Since(start))
	return nil
}
