package diffkernel

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cmrt/cmrt/fabric"
	"github.com/cmrt/cmrt/id"
	"github.com/cmrt/cmrt/id/journal"
	"github.com/cmrt/cmrt/internal/callseq"
)

// Config configures a Runner.
type Config struct {
	// Device is the device under test.
	Device Device
	// Soft is the software fabric on Device's netdev: the side compared
	// with the kernel, and the peers' fabric (callseq.Op.Peer).
	Soft fabric.Fabric
	// Kernel is the kernel fabric. Nil compares the software fabric with
	// a recorded trace instead (RunTrace).
	Kernel fabric.Fabric
	// Settle bounds how long an operation's epoch may take to agree
	// (default 3s); Quiet is how long both sides must have recorded
	// nothing before it ends (default 25ms).
	Settle, Quiet time.Duration
	// KeepGoing runs a sequence to its end whatever diverges (Result.Div
	// is the first divergence): for the probe table.
	KeepGoing bool
}

// Runner runs sequences on the software fabric and the kernel side by
// side, and compares them epoch by epoch.
type Runner struct {
	cfg Config
	tm  timing
}

// NewRunner returns a runner.
func NewRunner(cfg Config) *Runner {
	if cfg.Settle <= 0 {
		cfg.Settle = 3 * time.Second
	}
	if cfg.Quiet <= 0 {
		cfg.Quiet = 25 * time.Millisecond
	}
	return &Runner{cfg: cfg, tm: defaultTiming}
}

// Result is the outcome of one sequence.
type Result struct {
	// N is the sequence's number (its ports and groups).
	N   int
	Seq callseq.Seq
	// Div is the first divergence, nil if none.
	Div *Divergence
	// Soft and Kernel are what each side did, epoch by epoch (the
	// kernel's as recorded, before the equivalences).
	Soft, Kernel Trace
	// Used counts the equivalences applied; Reordered the epochs whose
	// items came in another order the model allows too.
	Used      map[string]int
	Reordered int
	// Took is how long the sequence ran.
	Took time.Duration
	// Probe is the outcome of the sequence's probe ("" if it made none),
	// and ProbeTaken whether the kernel took the call the model refuses.
	Probe      string
	ProbeTaken bool
}

// flavour returns the flavour of the kernel on the device.
func (d Device) flavour() Flavour {
	if d.Mode == callseq.ModeIB {
		return IB
	}
	return IWARP
}

// qpn numbers the QPs connect and accept announce, process-wide: the IB
// CM refuses a QP number it still holds a connection for (stale
// connection), and shrinking reruns sequences.
var qpn atomic.Uint32

func init() { qpn.Store(uint32(os.Getpid()&0xfff) << 12) }

// party is one side of a comparison: a live fabric, or a recorded trace.
type party interface {
	do(op callseq.Op) skip
	// state returns the state of op's id before it is made, and expects
	// whether an event must follow the op when its call succeeds.
	state(k int) id.State
	expects(op callseq.Op, before id.State) bool
	mark() int
	epoch(mark int, sk skip) (Epoch, time.Time)
	waiting() bool
	probed() (string, bool, id.State)
	teardown() []string
	records() []journal.Record
}

func (s *side) epoch(n int, sk skip) (Epoch, time.Time) {
	recs, slots, last := s.since(n)
	return epochOf(recs, slots, sk), last
}

func (s *side) records() []journal.Record {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]journal.Record, len(s.recs))
	for k, r := range s.recs {
		out[k] = r.Record
	}
	return out
}

// recorded plays a recorded trace as the kernel side.
type recorded struct {
	t Trace
	k int
}

func (r *recorded) do(callseq.Op) skip {
	r.k++
	if r.k-1 < len(r.t.Epochs) {
		return r.t.Epochs[r.k-1].Skip
	}
	return ""
}
func (r *recorded) mark() int                         { return r.k }
func (r *recorded) state(int) id.State                { return 0 }
func (r *recorded) expects(callseq.Op, id.State) bool { return false }
func (r *recorded) epoch(n int, _ skip) (Epoch, time.Time) {
	if n < len(r.t.Epochs) {
		return r.t.Epochs[n], time.Time{}
	}
	return Epoch{Slots: map[int]Items{}}, time.Time{}
}
func (r *recorded) waiting() bool                    { return false }
func (r *recorded) probed() (string, bool, id.State) { return "", false, 0 }
func (r *recorded) teardown() []string               { return nil }
func (r *recorded) records() []journal.Record        { return nil }

// Run runs sequence number n on both fabrics and compares them.
func (r *Runner) Run(n int, seq callseq.Seq) (*Result, error) {
	if r.cfg.Kernel == nil {
		return nil, errors.New("diffkernel: Run needs a kernel fabric (RunTrace compares with a recorded one)")
	}
	softEnv, kernEnv := envs(r.cfg.Device, n)
	soft, err := newSide("soft", IWARP, r.cfg.Soft, r.cfg.Soft, softEnv, r.tm, &qpn)
	if err != nil {
		return nil, err
	}
	kern, err := newSide("kernel", r.cfg.Device.flavour(), r.cfg.Kernel, r.cfg.Soft, kernEnv, r.tm, &qpn)
	if err != nil {
		soft.teardown()
		return nil, err
	}
	kern.probes = true
	return r.run(n, seq, soft, kern), nil
}

// RunTrace runs sequence number t.Seq on the software fabric and compares
// it with the kernel's recorded trace t.
func (r *Runner) RunTrace(n int, t Trace) (*Result, error) {
	softEnv, _ := envs(r.cfg.Device, n)
	soft, err := newSide("soft", IWARP, r.cfg.Soft, r.cfg.Soft, softEnv, r.tm, &qpn)
	if err != nil {
		return nil, err
	}
	return r.run(n, t.Seq, soft, &recorded{t: t}), nil
}

func (r *Runner) run(n int, seq callseq.Seq, soft, kern party) *Result {
	start := time.Now()
	fl := r.cfg.Device.flavour()
	res := &Result{N: n, Seq: seq, Soft: Trace{Seq: seq}, Kernel: Trace{Seq: seq}}
	cmp := newComparer(fl)
	for k, op := range seq {
		ma, mb := soft.mark(), kern.mark()
		sta, stb := soft.state(op.Slot), kern.state(op.Slot)
		var ska, skb skip
		var wg sync.WaitGroup
		wg.Add(1)
		go func() { defer wg.Done(); skb = kern.do(op) }()
		ska = soft.do(op)
		wg.Wait()
		if op.Probe {
			// The model refused the call; did the kernel take it? The
			// probe ends the comparison: the library no longer knows the
			// id's state.
			var st id.State
			res.Probe, res.ProbeTaken, st = kern.probed()
			if res.ProbeTaken && res.Div == nil {
				res.Div = &Divergence{Epoch: k, Op: op, Slot: op.Slot, What: "probe", ProbeState: st,
					Detail: "the kernel takes " + res.Probe + "; the model (journal.CallAllowed) refuses it"}
			}
			res.Soft.Epochs = append(res.Soft.Epochs, Epoch{Slots: map[int]Items{}})
			res.Kernel.Epochs = append(res.Kernel.Epochs, Epoch{Slots: map[int]Items{}, Probe: res.Probe})
			break
		}
		began := time.Now()
		var ea, eb Epoch
		var div *Divergence
		for {
			var la, lb time.Time
			ea, la = soft.epoch(ma, ska)
			eb, lb = kern.epoch(mb, skb)
			var next *comparer
			next, div = cmp.compare(k, op, ea, eb)
			last := began
			if la.After(last) {
				last = la
			}
			if lb.After(last) {
				last = lb
			}
			settled := ea.Unmapped == 0 && eb.Unmapped == 0 && !soft.waiting() && !kern.waiting() &&
				answered(op, ea, soft.expects(op, sta)) && answered(op, eb, kern.expects(op, stb))
			if div == nil && settled && time.Since(last) >= r.cfg.Quiet {
				cmp = next
				break
			}
			if time.Since(began) > r.cfg.Settle {
				if div == nil {
					cmp = next // agreeing, though something is still due
				}
				break
			}
			time.Sleep(2 * time.Millisecond)
		}
		res.Soft.Epochs = append(res.Soft.Epochs, ea)
		res.Kernel.Epochs = append(res.Kernel.Epochs, eb)
		if div != nil && res.Div == nil {
			res.Div = div
		}
		if div != nil {
			if !r.cfg.KeepGoing {
				break
			}
			cmp = next0(cmp, k, op, ea, eb)
		}
	}
	res.Used, res.Reordered = cmp.used, cmp.reordered
	var notesA, notesB []string
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); notesB = kern.teardown() }()
	notesA = soft.teardown()
	wg.Wait()
	if res.Div == nil {
		if res.Probe != "" {
			// A probe may leave the kernel's id where the library does not
			// know it (a refused call can still act: rdma_accept on a
			// connecting IB id rejects it), and its destroy may wait for the
			// CM's time-wait: what the kernel side did after it tells nothing.
			notesB = nil
		}
		recsB := kern.records()
		if res.Probe != "" {
			recsB = nil
		}
		res.Div = r.afterwards(len(seq), notesA, notesB, soft.records(), recsB)
	}
	if res.Div != nil {
		res.Div.Known = matchKnown(&Match{Flavour: fl, Div: res.Div, Seq: seq, Soft: res.Soft.Epochs, Kernel: res.Kernel.Epochs})
	}
	res.Took = time.Since(start)
	return res
}

// next0 is the comparer after an epoch whatever diverged in it.
func next0(c *comparer, k int, op callseq.Op, a, b Epoch) *comparer {
	n, _ := c.compare(k, op, a, b)
	return n
}

// answered reports whether an epoch that must hold an event when its
// operation's call succeeded (expect) does.
func answered(op callseq.Op, e Epoch, expect bool) bool {
	if !expect {
		return true
	}
	ok := false
	for _, it := range e.Slots[op.Slot] {
		if it.Kind == journal.KindCall && it.Call == op.Call {
			ok = it.Status == 0
		}
	}
	if !ok {
		return true // the call failed (or was skipped): nothing is due
	}
	for _, is := range e.Slots {
		for _, it := range is {
			if it.Kind == journal.KindEvent {
				return true
			}
		}
	}
	return false
}

// afterwards checks what the epochs do not show: a call that hung, and
// whole journals against the model (journal.Check).
func (r *Runner) afterwards(k int, notesA, notesB []string, recsA, recsB []journal.Record) *Divergence {
	for _, x := range []struct {
		who   string
		notes []string
	}{{"soft", notesA}, {"kernel", notesB}} {
		for _, n := range x.notes {
			if isHang(n) {
				return &Divergence{Epoch: k, Slot: -1, What: "driver", Detail: x.who + ": " + n}
			}
		}
	}
	for _, x := range []struct {
		who  string
		recs []journal.Record
	}{{"soft", recsA}, {"kernel", recsB}} {
		if len(x.recs) == 0 {
			continue
		}
		if err := journal.Check(x.recs); err != nil {
			var je *journal.Error
			if errors.As(err, &je) && len(je.Violations) > 0 {
				v := je.Violations[0]
				return &Divergence{Epoch: k, Slot: -1, What: "model",
					Detail: fmt.Sprintf("%s journal: %s: %s (in %s): %s", x.who, v.Kind, recString(v.Record), v.Before, v.Msg)}
			}
		}
	}
	return nil
}

func isHang(note string) bool {
	return strings.Contains(note, "did not return") || strings.Contains(note, "still running")
}

// recString formats a record without its handles, channel and time.
func recString(r journal.Record) string {
	return fmt.Sprintf("%s %s", r.QPType, itemOf(rec{Record: r, ParentSlot: -1}).text())
}
