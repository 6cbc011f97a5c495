// Command cmtime is librdmacm's cmtime over cmrt: it times each step of
// setting up and tearing down many RDMA CM connections between a client
// and a server and prints a table of the steps.
//
// It is the single-pair cmtime of rdma-core v52 to v58 (2024): the server
// runs when no -s is given, the client otherwise.
//
//	cmtime [-S] [-s server_address] [-b bind_address] [-c connections (100)]
//	       [-p port_number (7471)] [-q base_qpn (1000)]
//	       [-m mimic_qp_delay_us] [-n num_threads (1)] [-r retries (2)]
//	       [-t timeout_ms (2000)] [-O oob_port]
//
// Both sides open one event channel, read by one goroutine, and a work
// queue served by -n goroutines (cmtime's threads) that issues the
// per-connection calls; there is never a goroutine per connection. Client
// and server synchronize out of band over a TCP connection at the start of
// each test and after the connect and disconnect phases, exchanging the
// same bytes as rdma-core's cmtime (meant to let either side be
// rdma-core's v52-v58 where the ports do not clash, see -O; checked only
// against v44, with -O 0).
//
// The client connects -c connections three times: a warm-up of one, the
// "QPs test" and the "test - no QPs", which gives fake QP numbers counted
// up from -q. With -m the QPs test is "simulated": creating and modifying
// a QP is a sleep of -m microseconds. For each test it prints rdma-core's
// table:
//
//	cm_conn               100
//	threads                 1
//	step             avg/iter  total(us)    us/conn    sum(us)    max(us)    min(us)
//	full connect        ...
//
// total(us) is the time from the step's first start to its last end,
// avg/iter is total/connections, sum(us) the sum of the connections' own
// times (0 for full connect), us/conn sum/connections, max and min the
// extremes of the connections' times; steps that did not run print 0.
// rdma-core's server prints a total of 0 for the steps it times only per
// connection (create qp, and the QP attribute and state steps), next to a
// non-zero sum; here their total spans the connections' first start to
// their last end, as on the client.
//
// What the fabrics do:
//
//   - Both fabrics create QPs (rdma_create_qp): "create qp" and "destroy
//     qp" are timed, each QP on the one completion queue of the run (made
//     untimed with the first QP, ID.CreateCQ, as rdma-core's cmtime makes
//     its one CQ) and in its id's own protection domain, and the QPs move through their states inside the CM
//     (on the kernel fabric, as librdmacm moves them), so the init/rtr/rts
//     rows are 0 and "establish" is 0 (the connection is ESTABLISHED
//     without CONNECT_RESPONSE).
//   - The "no QPs" test of the kernel fabric uses fake QP numbers: "init/
//     rtr/rts qp attr" time rdma_init_qp_attr's kernel call, "init/rtr/rts
//     qp" the -m sleep, and the client completes each connection on
//     CONNECT_RESPONSE with rdma_establish.
//
// Extensions and deviations: -O sets the out-of-band TCP port. rdma-core
// uses -p for it; so does cmtime on the kernel fabric, but on the software
// fabric the rdma_cm port is itself a TCP port, so the default there is
// -p + 1. -O 0 turns the synchronization off: each side then runs a
// single test of -c connections (no warm-up, no "no QPs" run) and exits,
// which is how it works with rdma-core's cmtime before v52 (whose server
// never exits). Fake QP numbers keep counting across the tests instead of
// restarting at -q, and the server's are offset by 0x800000, so that a
// client and a server on the same node never offer the kernel's IB CM the
// same QP number (which it would reject as a stale connection). The
// client keeps at most 1024 connection requests outstanding (a listener's
// largest backlog; past it a software-fabric or iWARP listener refuses
// requests, and the IB CM drops them to be retried seconds later). A step
// running for more than a second shows its progress on stderr (a line
// rewritten in place on a terminal, every tenth otherwise); stdout is
// rdma-core's. Errors are reported as rdma-core's (perror text, event
// lines) and end the program with status 1 after releasing everything,
// also when the peer's out-of-band connection drops (rdma-core hangs).
// -S (a TCP socket baseline) is supported. The progress line "\tModify
// QPs to INIT" is printed only where the fabric computes QP attributes, and
// "\tAllocating verbs resources" where it makes the shared completion
// queue (both fabrics).
package main

import (
	"fmt"
	"io"
	"os"
	"strconv"
	"sync"

	"github.com/cmrt/cmrt/examples/internal/tool"
)

const prog = "cmtime"

func main() { os.Exit(run(tool.Args(), os.Stdout, os.Stderr)) }

// config holds the command line.
type config struct {
	dst, src   string // -s, -b
	iter       int    // -c
	port       string // -p
	oobPort    int    // -O; -1: the default
	baseQPN    uint32 // -q
	mimicDelay uint32 // -m
	mimic      bool
	threads    int  // -n
	retries    int  // -r
	sockTest   bool // -S
	timeoutMS  int  // -t
}

func usage(w io.Writer, argv0 string) {
	fmt.Fprintf(w, "usage: %s\n", argv0)
	fmt.Fprintf(w, "\t[-S] (run socket baseline test)\n")
	fmt.Fprintf(w, "\t[-s server_address]\n")
	fmt.Fprintf(w, "\t[-b bind_address]\n")
	fmt.Fprintf(w, "\t[-c connections]\n")
	fmt.Fprintf(w, "\t[-p port_number]\n")
	fmt.Fprintf(w, "\t[-q base_qpn]\n")
	fmt.Fprintf(w, "\t[-m mimic_qp_delay_us]\n")
	fmt.Fprintf(w, "\t[-n num_threads]\n")
	fmt.Fprintf(w, "\t[-r retries]\n")
	fmt.Fprintf(w, "\t[-t timeout_ms]\n")
	fmt.Fprintf(w, "\t[-O oob_port] (cmrt: default -p, or -p + 1 on the software fabric; 0: no sync)\n")
}

// parse reads the command line (program name first); it reports a usage
// error as rdma-core does and returns false.
func parse(argv []string, stdout, stderr io.Writer) (config, bool) {
	c := config{iter: 100, port: "7471", oobPort: -1, baseQPN: 1000, threads: 1, retries: 2, timeoutMS: 2000}
	opts, _, err := tool.Getopt(argv[1:], "s:b:c:m:n:p:q:r:St:O:")
	if err != nil {
		tool.PrintGetoptError(stderr, argv[0], err)
		usage(stdout, argv[0])
		return c, false
	}
	for _, o := range opts {
		switch o.Name {
		case 's':
			c.dst = o.Arg
		case 'b':
			c.src = o.Arg
		case 'c':
			c.iter = tool.Atoi(o.Arg)
		case 'p':
			c.port = o.Arg
		case 'q':
			c.baseQPN = uint32(tool.Atoi(o.Arg))
		case 'm':
			c.mimicDelay, c.mimic = uint32(tool.Atoi(o.Arg)), true
		case 'n':
			c.threads = tool.Atoi(o.Arg)
		case 'r':
			c.retries = tool.Atoi(o.Arg)
		case 'S':
			c.sockTest = true
		case 't':
			c.timeoutMS = tool.Atoi(o.Arg)
		case 'O':
			p, err := strconv.ParseUint(o.Arg, 10, 16)
			if err != nil {
				fmt.Fprintf(stderr, "%s: -O %s: not a port number\n", argv[0], o.Arg)
				usage(stdout, argv[0])
				return c, false
			}
			c.oobPort = int(p)
		}
	}
	// rdma-core divides by the connection count and waits for the threads
	// to serve its work queue: fewer than one of either is an error here.
	if c.iter < 1 || c.threads < 1 {
		fmt.Fprintf(stderr, "%s: -c and -n must be at least 1\n", argv[0])
		usage(stdout, argv[0])
		return c, false
	}
	return c, true
}

// run is the program: argv is its command line, program name first, as C's
// main gets it; the result is the exit status.
func run(argv []string, stdout, stderr io.Writer) int {
	stdout, stderr = &lockedWriter{w: stdout}, &lockedWriter{w: stderr}
	cfg, ok := parse(argv, stdout, stderr)
	if !ok {
		return tool.ExitFailure
	}
	t := newTest(cfg, stdout, stderr)
	t.prog.tty = tool.IsTerminal(stderrFile(stderr))
	return t.main()
}

// lockedWriter serializes the writes of the event goroutine, the workers
// and the main flow.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func stderrFile(w io.Writer) any {
	if l, ok := w.(*lockedWriter); ok {
		return l.w
	}
	return w
}
