// Command diffkernel runs random CM call sequences on the software fabric
// and on the kernel's rdma_cm side by side, in the test VM (siw0 on dummy1,
// rxe0 on dummy0), and compares the two journals step by step (package
// internal/diffkernel). It prints every divergence the equivalence table
// and the documented divergences do not explain, shrunk to a minimal
// sequence with both sides' traces, and, as its last line,
//
//	diff-kernel: N sequences, D divergences, K documented
//
// where D counts the sequences with an undocumented divergence and K those
// that ran into a documented one. It exits 1 when D > 0. make diff-kernel
// builds it statically and runs it in the VM (scripts/diff-kernel.sh).
//
//	diffkernel [-n N] [-seed S] [-dev siw0,rxe0] [-workers W] [-ops OPS] [-shrink RUNS] [-v]
//	diffkernel -dev rxe0 -seq FILE     (run the sequences in FILE, separated by "---" lines, and print both traces)
package main

import (
	"flag"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/cmrt/cmrt/fabric"
	"github.com/cmrt/cmrt/fabric/kernel"
	"github.com/cmrt/cmrt/fabric/soft"
	"github.com/cmrt/cmrt/id"
	"github.com/cmrt/cmrt/id/journal"
	"github.com/cmrt/cmrt/internal/callseq"
	"github.com/cmrt/cmrt/internal/diffkernel"
	"github.com/cmrt/cmrt/internal/portrange"
)

var (
	nSeq     = flag.Int("n", 100, "sequences to run, spread over the devices")
	seedFlag = flag.Uint64("seed", 0, "seed (0: from the clock); the same seed draws the same sequences")
	devFlag  = flag.String("dev", "siw0,rxe0", "devices under test, comma-separated")
	workers  = flag.Int("workers", 2, "sequences run at once")
	ops      = flag.Int("ops", 14, "operations per sequence")
	shrinkN  = flag.Int("shrink", 40, "runs spent shrinking each kind of undocumented divergence (0: none)")
	shrinkK  = flag.Int("shrinkdoc", 0, "runs spent shrinking the first of each documented divergence (0: printed as found)")
	seqFile  = flag.String("seq", "", "run the sequences in this file (callseq text, separated by \"---\" lines) once each and print both traces")
	verbose  = flag.Bool("v", false, "print every sequence and its traces")
	hangFlag = flag.Duration("hang", 2*time.Minute, "a sequence still running after this long is a divergence (it hung): reported with its sequence, and left behind")
	budget   = flag.Duration("budget", 0, "start no sequence after this long (0: no limit): the summary counts the sequences run")
	probes   = flag.Bool("probes", false, "print the probe table: in each of a set of states, every call the model refuses, made on the kernel past the library's check")
	split    = flag.Bool("split-ports", true, "give the kernel's rdma_cm the lower half of net.ipv4.ip_local_port_range (written: the VM's, run as root) and the software fabric the upper half, so that siw never listens on a port the software fabric holds")
)

// softPorts is the range the software fabric picks automatic ports from
// (zeros: its default, the whole ip_local_port_range).
var softPorts [2]int

func main() {
	flag.Parse()
	var devs []diffkernel.Device
	for _, name := range strings.Split(*devFlag, ",") {
		d, err := diffkernel.DeviceByName(strings.TrimSpace(name))
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		devs = append(devs, d)
	}
	if *split {
		softPorts = splitPortRange()
	}
	runners := make([]*diffkernel.Runner, len(devs))
	for k, d := range devs {
		runners[k] = diffkernel.NewRunner(diffkernel.Config{Device: d, Soft: softFabric(d), Kernel: kernel.Default()})
	}
	if *seqFile != "" {
		os.Exit(runOne(runners[0], devs[0]))
	}
	if *probes {
		for k, d := range devs {
			probeTable(d, diffkernel.NewRunner(diffkernel.Config{Device: d, Soft: softFabric(d), Kernel: kernel.Default(), KeepGoing: true}), k)
		}
		return
	}
	seed := *seedFlag
	if seed == 0 {
		seed = uint64(time.Now().UnixNano()) & (1<<48 - 1)
	}
	fmt.Printf("diff-kernel: seed %d (DIFF_SEED=%d draws the same sequences), %d sequences on %s, %d at once\n",
		seed, seed, *nSeq, *devFlag, *workers)
	os.Exit(runMany(seed, devs, runners))
}

// softFabric is the software fabric on d's netdev. Its timeouts are the
// kernel's order of magnitude or longer: a connection to a host that never
// answers ends in neither within a sequence.
func softFabric(d diffkernel.Device) fabric.Fabric {
	return soft.New(soft.WithName("diff-"+d.Netdev), soft.WithNetdevs(d.Netdev),
		soft.WithConnectTimeout(time.Minute), soft.WithSIDRRetry(4*time.Second, 15),
		soft.WithPortRange(softPorts[0], softPorts[1]))
}

// splitPortRange gives the kernel the lower half of its automatic port
// range and returns the upper half for the software fabric. Both sides pick
// automatic ports from that range, and siw listens on a real TCP port for
// each kernel listener: with one range, a kernel listen on an unbound id
// could draw a port the software side's sockets held at that moment and
// fail EADDRINUSE (siw0, seed 2026, sequence 268, seen once in CI), a
// collision of the two sides' ports, not of semantics. Without the right to
// write the range, the software fabric still keeps to the upper half and
// the collision is only rarer.
func splitPortRange() [2]int {
	low, high := portrange.ReadOrDefault()
	mid := low + (high-low)/2
	if err := portrange.Write(low, mid); err != nil {
		fmt.Fprintf(os.Stderr, "diff-kernel: the kernel keeps ports %d-%d (%v); the software fabric takes %d-%d\n", low, high, err, mid+1, high)
	}
	return [2]int{mid + 1, high}
}

func runOne(r *diffkernel.Runner, d diffkernel.Device) int {
	text, err := os.ReadFile(*seqFile)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	rc := 0
	for k, part := range strings.Split(string(text), "\n---\n") {
		seq, err := callseq.Parse(part)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
		res, err := r.Run(k, seq)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
		printResult(d, res)
		if res.Div != nil && res.Div.Known == nil {
			rc = 1
		}
	}
	return rc
}

func printResult(d diffkernel.Device, res *diffkernel.Result) {
	fmt.Printf("--- sequence %d on %s, %v\n", res.N, d.Name, res.Took.Round(time.Millisecond))
	if res.Div != nil {
		fmt.Printf("divergence: %s\n", res.Div)
	}
	fmt.Printf("kernel trace:\n%s", indent(res.Kernel.String()))
	fmt.Printf("soft trace:\n%s", indent(res.Soft.String()))
}

func indent(s string) string {
	var b strings.Builder
	for _, l := range strings.SplitAfter(s, "\n") {
		if l != "" {
			b.WriteString("    " + l)
		}
	}
	return b.String()
}

// probeTable probes, in every state of diffkernel.ProbeStates for d's
// mode, each call the model refuses, and prints what the kernel answered:
// "probe <device> | <state> | <call> | <answer>".
func probeTable(d diffkernel.Device, r *diffkernel.Runner, k int) {
	n := k * 10000
	for _, ps := range diffkernel.ProbeStates() {
		if ps.Mode >= 0 && ps.Mode != int(d.Mode) {
			continue
		}
		for _, seq := range diffkernel.ProbeSeqs(ps) {
			n++
			res, err := r.Run(n, seq)
			op := seq[len(seq)-1]
			switch {
			case err != nil:
				fmt.Printf("probe %s | %s | %s | error: %v\n", d.Name, ps.Name, op.Call, err)
			case res.Probe == "":
				if _, ok := journal.CallAllowed(stateOf(res), op.Call, qpOf(res)); !ok && *verbose {
					fmt.Printf("probe %s | %s | %s | not made (id in %s)\n", d.Name, ps.Name, op.Call, stateOf(res))
				}
			default:
				fmt.Printf("probe %s | %s | %s | %s\n", d.Name, ps.Name, op.Call, res.Probe)
			}
			if *verbose && res != nil && res.Div != nil {
				fmt.Printf("    (the sequence diverged first: %s)\n", res.Div)
			}
		}
	}
}

// stateOf and qpOf return the probed id's state and QP type as the
// kernel side's trace last left them.
func stateOf(res *diffkernel.Result) id.State {
	slot := res.Seq[len(res.Seq)-1].Slot
	st := id.StateIdle
	for _, e := range res.Kernel.Epochs {
		if is := e.Slots[slot]; len(is) > 0 {
			st = is[len(is)-1].State
		}
	}
	return st
}

func qpOf(res *diffkernel.Result) id.QPType {
	slot := res.Seq[len(res.Seq)-1].Slot
	for _, e := range res.Kernel.Epochs {
		if is := e.Slots[slot]; len(is) > 0 {
			return is[0].QP
		}
	}
	return id.RC
}

// tally is what the run found on one device.
type tally struct {
	seqs, divs, known int
	used              map[string]int
	reordered         int
	byKey             map[string]int
	knownBy           map[string]int
	took              time.Duration
	probes, taken     int
}

func runMany(seed uint64, devs []diffkernel.Device, runners []*diffkernel.Runner) int {
	start := time.Now()
	type job struct{ n, dev int }
	jobs := make(chan job)
	var mu sync.Mutex
	tallies := make([]tally, len(devs))
	for k := range tallies {
		tallies[k] = tally{used: map[string]int{}, byKey: map[string]int{}, knownBy: map[string]int{}}
	}
	var shrinkSeq int
	var wg sync.WaitGroup
	for w := 0; w < max(*workers, 1); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range jobs {
				d := devs[j.dev]
				seq := callseq.Generate(callseq.NewRand(seed, uint64(j.n)), callseq.Config{Mode: d.Mode, MaxOps: *ops})
				res, hung, err := runBounded(runners[j.dev], j.n, seq)
				if hung {
					mu.Lock()
					tallies[j.dev].seqs++
					tallies[j.dev].divs++
					tallies[j.dev].byKey["hung"]++
					fmt.Printf("=== divergence on %s in sequence %d: the sequence still runs after %v (a call or a teardown hung); left behind:\n%s",
						d.Name, j.n, *hangFlag, indent(seq.String()))
					mu.Unlock()
					continue
				}
				if err != nil {
					fmt.Printf("sequence %d on %s: %v\n", j.n, d.Name, err)
					mu.Lock()
					tallies[j.dev].seqs++
					tallies[j.dev].divs++
					mu.Unlock()
					continue
				}
				if *verbose {
					mu.Lock()
					printResult(d, res)
					mu.Unlock()
				}
				mu.Lock()
				t := &tallies[j.dev]
				t.seqs++
				t.took += res.Took
				t.reordered += res.Reordered
				if res.Probe != "" {
					t.probes++
					if res.ProbeTaken {
						t.taken++
					}
				}
				for k, v := range res.Used {
					t.used[k] += v
				}
				first := false
				if res.Div != nil {
					if res.Div.Known != nil {
						t.known++
						first = t.knownBy[res.Div.Known.Name] == 0
						t.knownBy[res.Div.Known.Name]++
					} else {
						t.divs++
						key := res.Div.Key()
						first = t.byKey[key] == 0
						t.byKey[key]++
					}
				}
				mu.Unlock()
				if first {
					report(d, runners[j.dev], res, &mu, &shrinkSeq)
				}
			}
		}()
	}
	cut := -1
	for n := 0; n < *nSeq; n++ {
		if *budget > 0 && time.Since(start) > *budget {
			cut = n
			break
		}
		jobs <- job{n: n, dev: n % len(devs)}
	}
	close(jobs)
	wg.Wait()
	if cut >= 0 {
		fmt.Printf("diff-kernel: the budget of %v ended the run after %d of %d sequences\n", *budget, cut, *nSeq)
	}
	seqs, divs, known := 0, 0, 0
	for k, d := range devs {
		t := tallies[k]
		seqs, divs, known = seqs+t.seqs, divs+t.divs, known+t.known
		fmt.Printf("%s: %d sequences, %d divergences (%d kinds), %d documented %s, %d reordered as the model allows; "+
			"equivalences applied: %s; %d probes of calls the model refuses, %d taken by the kernel; mean %v a sequence\n",
			d.Name, t.seqs, t.divs, len(t.byKey), t.known, counts(t.knownBy), t.reordered, counts(t.used),
			t.probes, t.taken, (t.took / time.Duration(max(t.seqs, 1))).Round(time.Millisecond))
	}
	fmt.Printf("diff-kernel: seed %d, %v\n", seed, time.Since(start).Round(time.Second))
	fmt.Printf("diff-kernel: %d sequences, %d divergences, %d documented\n", seqs, divs, known)
	if divs > 0 {
		return 1
	}
	return 0
}

func counts(m map[string]int) string {
	if len(m) == 0 {
		return "none"
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %d", k, m[k])
	}
	return "(" + strings.Join(parts, ", ") + ")"
}

// report shrinks the first sequence of a kind of divergence and prints it
// with both traces.
func report(d diffkernel.Device, r *diffkernel.Runner, res *diffkernel.Result, mu *sync.Mutex, shrinkSeq *int) {
	key := res.Div.Key()
	best := res
	runs := *shrinkN
	if res.Div.Known != nil {
		runs = *shrinkK
	}
	if runs > 0 {
		callseq.Shrink(res.Seq, func(s callseq.Seq) bool {
			mu.Lock()
			*shrinkSeq++
			n := diffkernel.ShrinkBase + *shrinkSeq
			mu.Unlock()
			x, err := r.Run(n, s)
			if err != nil || x.Div == nil || x.Div.Key() != key {
				return false
			}
			best = x
			return true
		}, runs)
	}
	mu.Lock()
	defer mu.Unlock()
	what := "divergence"
	if k := res.Div.Known; k != nil {
		what = "documented divergence " + k.Name
	}
	fmt.Printf("=== %s on %s in sequence %d: %s\n", what, d.Name, res.N, res.Div)
	fmt.Printf("minimal sequence (%d of %d operations; run it with -dev %s -seq FILE):\n%s",
		len(best.Seq), len(res.Seq), d.Name, indent(best.Seq.String()))
	if best != res {
		fmt.Printf("its divergence: %s\n", best.Div)
	}
	fmt.Printf("kernel trace:\n%s", indent(best.Kernel.String()))
	fmt.Printf("soft trace:\n%s", indent(best.Soft.String()))
}

// runBounded runs seq on r, giving up after -hang: a sequence that hangs
// (a call or a teardown that never returns) is reported and its goroutine
// left behind, so that the other sequences, the budget and the summary
// still come.
func runBounded(r *diffkernel.Runner, n int, seq callseq.Seq) (*diffkernel.Result, bool, error) {
	type out struct {
		res *diffkernel.Result
		err error
	}
	done := make(chan out, 1)
	go func() {
		res, err := r.Run(n, seq)
		done <- out{res, err}
	}()
	t := time.NewTimer(*hangFlag)
	defer t.Stop()
	select {
	case o := <-done:
		return o.res, false, o.err
	case <-t.C:
		return nil, true, nil
	}
}
