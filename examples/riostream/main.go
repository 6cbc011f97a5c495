// Command riostream is librdmacm's riostream over cmrt's rsocket package:
// rstream's benchmark with zero-copy transfers. Each side maps its buffer
// for the peer's direct writes (riomap: rsocket.Conn.IOMap) and writes
// into the peer's mapping (riowrite: Conn.IOWrite); no message tells the
// receiver, which watches the last byte of its buffer for the marker the
// sender put there.
//
//	riostream [-s server_address] [-b bind_address] [-f ip|name] [-B buffer_size]
//	          [-i inline_size] [-I iterations] [-C transfer_count]
//	          [-S transfer_size|all] [-p port (7471)] [-T a|b|n|v]
//
// Options, tests and output are rstream's (see there), over rsockets only.
// Without -s it is the server. The exit status is 0 on success, 1 on
// failure. The sockets run on the software fabric unless CMRT_FABRIC names
// another one.
package main

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/cmrt/cmrt/examples/internal/rsperf"
	"github.com/cmrt/cmrt/examples/internal/tool"
	"github.com/cmrt/cmrt/rsocket"
)

const prog = "riostream"

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

type optimization int

const (
	optMixed optimization = iota
	optLatency
	optBandwidth
)

type riostream struct {
	stdout, stderr io.Writer
	dst, src, port string
	verify         bool
	custom         bool
	sizeOption     int
	iterations     int
	count, size    int
	bufSize        int
	inline         int
	opt            optimization
	name           string

	pat  rsperf.Pattern
	buf  []byte
	lis  *rsocket.Listener
	conn *rsocket.Conn
}

func usage(w io.Writer) {
	fmt.Fprintf(w, "usage: %s\n", prog)
	for _, l := range []string{"[-s server_address]", "[-b bind_address]", "[-f address_format]",
		"    name, ip, ipv6, or gid", "[-B buffer_size]", "[-i inline_size]", "[-I iterations]",
		"[-C transfer_count]", "[-S transfer_size or all]", "[-p port_number]", "[-T test_option]",
		"    a|async - asynchronous operation (use poll)", "    b|blocking - use blocking calls",
		"    n|nonblocking - use nonblocking calls", "    v|verify - verify data"} {
		fmt.Fprintf(w, "\t%s\n", l)
	}
}

// run is the program: args without the program name; the result is the
// exit status.
func run(args []string, stdout, stderr io.Writer) int {
	p := &riostream{stdout: stdout, stderr: stderr, port: "7471", iterations: 1,
		count: 1000, size: 1000, inline: 64, name: "custom"}
	opts, _, err := tool.Getopt(args, "s:b:f:B:i:I:C:S:p:T:")
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
			if a := strings.ToLower(o.Arg); !strings.HasPrefix(a, "ip") && !strings.HasPrefix(a, "name") {
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
		case 'T':
			switch a := strings.ToLower(o.Arg); {
			case a == "v" || strings.HasPrefix(a, "verify"):
				p.verify = true
			case a == "a" || a == "b" || a == "n" || strings.HasPrefix(a, "async") ||
				strings.HasPrefix(a, "block") || strings.HasPrefix(a, "nonblock"):
			default:
				usage(stdout)
				return tool.ExitFailure
			}
		}
	}
	if p.custom && (p.size < 2 || p.count <= 0 || p.iterations <= 0) {
		usage(stdout)
		return tool.ExitFailure
	}
	if err := p.run(); err != nil {
		return tool.ExitFailure
	}
	return tool.ExitSuccess
}

// options are set_options' socket options for the next connection.
func (p *riostream) options() []rsocket.Option {
	buf := 1 << 19
	if p.bufSize != 0 {
		buf = p.bufSize
	}
	opts := []rsocket.Option{rsocket.WithSendBuffer(2 * buf), rsocket.WithRecvBuffer(2 * buf), rsocket.WithIOMapSize(1)}
	switch p.opt {
	case optLatency:
		opts = append(opts, rsocket.WithInline(p.inline))
	case optBandwidth:
		opts = append(opts, rsocket.WithInline(0))
	}
	if f, err := tool.Fabric(); err == nil {
		opts = append(opts, rsocket.WithFabric(f))
	}
	return opts
}

func (p *riostream) run() error {
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
		for _, phase := range []optimization{optLatency, optBandwidth} {
			p.opt = phase
			if err := p.connect(); err != nil {
				return err
			}
			for _, s := range rsperf.Sizes {
				if s.Option > p.sizeOption {
					continue
				}
				if phase == optLatency {
					p.name, p.count, p.size, p.iterations = rsperf.LatName(s.Bytes), 1, s.Bytes, rsperf.SizeToCount(s.Bytes)
				} else {
					p.name, p.iterations, p.size, p.count = rsperf.BwName(s.Bytes), 1, s.Bytes, rsperf.SizeToCount(s.Bytes)
				}
				if err := p.runTest(); err != nil {
					p.conn.Close()
					return err
				}
			}
			p.conn.Close()
		}
		return nil
	}
	if err := p.connect(); err != nil {
		return err
	}
	err := p.runTest()
	p.conn.Close()
	return err
}

func (p *riostream) listen() error {
	ap, err := tool.Getaddrinfo(p.src, p.port, true)
	if err != nil {
		fmt.Fprintf(p.stdout, "getaddrinfo: %v\n", err)
		return err
	}
	l, err := rsocket.Listen("tcp", ap.String(), append(p.options(), rsocket.WithBacklog(1))...)
	if err != nil {
		tool.Perror(p.stderr, "rbind", unwrapOp(err))
		return err
	}
	p.lis = l.(*rsocket.Listener)
	return nil
}

func (p *riostream) connect() error {
	if p.dst == "" {
		p.lis.SetOptions(p.options()...)
		c, err := p.lis.Accept()
		if err != nil {
			tool.Perror(p.stderr, "raccept", unwrapOp(err))
			return err
		}
		p.conn = c.(*rsocket.Conn)
		return nil
	}
	dst, err := tool.Getaddrinfo(p.dst, p.port, false)
	if err != nil {
		fmt.Fprintf(p.stdout, "getaddrinfo: %v\n", err)
		return err
	}
	c, err := rsocket.Dial("tcp", dst.String(), p.options()...)
	if err != nil {
		tool.Perror(p.stderr, "rconnect", unwrapOp(err))
		return err
	}
	p.conn = c.(*rsocket.Conn)
	return nil
}

func unwrapOp(err error) error {
	var op *net.OpError
	if errors.As(err, &op) {
		return op.Err
	}
	return err
}

// sendMsg and recvMsg are the 16-byte rsend/rrecv exchange that starts
// each test.
func (p *riostream) sendMsg(size int) error {
	if _, err := p.conn.Write(p.buf[:size]); err != nil {
		tool.Perror(p.stderr, "rsend", unwrapOp(err))
		return err
	}
	return nil
}

func (p *riostream) recvMsg(size int) error {
	if _, err := io.ReadFull(p.conn, p.buf[:size]); err != nil {
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			err = syscall.ECONNRESET
		}
		tool.Perror(p.stderr, "rrecv", unwrapOp(err))
		return err
	}
	return nil
}

// sendXfer writes the buffer into the peer's mapping at offset 0.
func (p *riostream) sendXfer(size int) error {
	for off := 0; off < size; {
		n, err := p.conn.IOWrite(p.buf[off:size], int64(off))
		if err != nil {
			tool.Perror(p.stderr, "riowrite", unwrapOp(err))
			return err
		}
		off += n
	}
	return nil
}

// recvXfer waits until the peer's last write put marker in the last byte
// of the buffer, watching memory as riostream does; after a short spin it
// sleeps between looks, to leave the CPU to the fabric (rdma-core spins,
// which on a machine with fewer cores than busy threads delays the very
// writes it waits for).
func (p *riostream) recvXfer(size int, marker byte) error {
	for k := 0; loadByte(p.buf, size-1) != marker; k++ {
		switch {
		case k < 256:
			runtime.Gosched()
		default:
			time.Sleep(time.Microsecond)
		}
	}
	if p.verify {
		return p.pat.Verify(p.stdout, p.buf[:size-1])
	}
	return nil
}

// loadByte reads b[i] with an atomic load of its aligned word (b comes
// from make, whose memory is at least 8-byte aligned): the peer's writes
// land there from the fabric, outside the Go memory model, and a plain
// load could be hoisted out of the loop.
func loadByte(b []byte, i int) byte {
	word := (*uint32)(unsafe.Add(unsafe.Pointer(unsafe.SliceData(b)), i&^3))
	return byte(atomic.LoadUint32(word) >> (8 * (i & 3)))
}

func (p *riostream) runTest() error {
	client := p.dst != ""
	last := p.size - 1
	p.buf[last] = 0xff
	if _, err := p.conn.IOMap(p.buf[:p.size], 0); err != nil {
		tool.Perror(p.stderr, "riomap", unwrapOp(err))
		return err
	}
	sync := []func(int) error{p.recvMsg, p.sendMsg}
	if client {
		sync[0], sync[1] = p.sendMsg, p.recvMsg
	}
	for _, f := range sync {
		if err := f(16); err != nil {
			return err
		}
	}
	var marker byte
	start := time.Now()
	for i := 0; i < p.iterations; i++ {
		if !client {
			if err := p.recvXfer(p.size, marker); err != nil {
				return err
			}
			marker++
		}
		for t := 0; t < p.count-1; t++ {
			if err := p.sendXfer(p.size); err != nil {
				return err
			}
		}
		p.buf[last] = marker
		marker++
		if p.verify {
			p.pat.Format(p.buf[:last])
		}
		if err := p.sendXfer(p.size); err != nil {
			return err
		}
		if client {
			if err := p.recvXfer(p.size, marker); err != nil {
				return err
			}
			marker++
		}
	}
	rsperf.Perf(p.stdout, p.name, p.size, p.count, p.iterations, time.Since(start))
	if err := p.conn.IOUnmap(p.buf[:p.size]); err != nil {
		tool.Perror(p.stderr, "riounmap", unwrapOp(err))
		return err
	}
	return nil
}
