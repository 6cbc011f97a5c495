package fuzz

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"pgregory.net/rapid"

	"github.com/cmrt/cmrt/id"
	"github.com/cmrt/cmrt/id/journal"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// T is what the drivers need of *testing.T and *rapid.T.
type T interface {
	Name() string
	Logf(format string, args ...any)
	Errorf(format string, args ...any)
	Fatalf(format string, args ...any)
}

// chooser is where a driver's decisions come from: a fuzzer's bytes or
// rapid's generators.
type chooser interface {
	// intn returns a number in [0, n).
	intn(n int) int
	// more reports whether the driver should take another step.
	more() bool
}

// bytesChooser reads decisions from a fuzz input; once it is used up every
// decision is 0 and more reports false.
type bytesChooser struct {
	b []byte
	i int
}

func (c *bytesChooser) intn(n int) int {
	if n <= 1 || c.i >= len(c.b) {
		return 0
	}
	v := int(c.b[c.i])
	c.i++
	return v % n
}

func (c *bytesChooser) more() bool { return c.i < len(c.b) }

// rapidChooser draws decisions from rapid.
type rapidChooser struct {
	t     *rapid.T
	steps int
}

func (c *rapidChooser) intn(n int) int {
	if n <= 1 {
		return 0
	}
	return rapid.IntRange(0, n-1).Draw(c.t, "choice")
}

func (c *rapidChooser) more() bool {
	c.steps--
	return c.steps >= 0
}

// recorder collects every record of a journal, so that the check sees
// whole histories whatever the ring's size.
type recorder struct {
	j    *journal.Journal
	stop func()
	mu   sync.Mutex
	recs []journal.Record
}

func newRecorder() *recorder {
	r := &recorder{j: journal.New(256)}
	r.stop = r.j.Observe(func(rec journal.Record) {
		r.mu.Lock()
		r.recs = append(r.recs, rec)
		r.mu.Unlock()
	})
	return r
}

// records returns what was recorded, in sequence order.
func (r *recorder) records() []journal.Record {
	r.mu.Lock()
	out := slices.Clone(r.recs)
	r.mu.Unlock()
	slices.SortFunc(out, func(a, b journal.Record) int { return int(int64(a.Seq) - int64(b.Seq)) })
	return out
}

// check checks the journal against the model, ignoring the violation
// kinds in tolerate, and replays it in check mode. The error carries the
// journal as JSON lines.
func (r *recorder) check(tolerate ...journal.ViolationKind) error {
	recs := r.records()
	err := journal.Check(recs)
	var je *journal.Error
	if errors.As(err, &je) {
		err = je.Without(tolerate...)
	}
	if err == nil && !slices.Contains(tolerate, journal.StateDiverged) {
		_, err = journal.ReplayCheck(recs)
	}
	if err != nil {
		var buf bytes.Buffer
		_ = journal.WriteRecordsJSON(&buf, recs)
		return fmt.Errorf("%w\njournal (%d records):\n%s", err, len(recs), buf.String())
	}
	return nil
}

// fdCount counts the process's open descriptors.
func fdCount() int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return -1
	}
	return len(ents)
}

// leaks is a snapshot to compare with once a run has torn everything
// down: descriptors, live ids and goroutines.
type leaks struct {
	fds, live int
	g         goleak.Option
}

func snapshot() leaks {
	return leaks{fds: fdCount(), live: id.Live(), g: goleak.IgnoreCurrent()}
}

// verify fails t if ids, descriptors or goroutines outlive the run.
// Goroutines and descriptors may take a moment to go (fabric loops, ants
// workers): verify waits up to 5s for them.
func (l leaks) verify(t T) {
	if n := id.Live(); n != l.live {
		t.Fatalf("%d ids or joins live after the run, %d before", n, l.live)
	}
	deadline := time.Now().Add(5 * time.Second)
	for fdCount() != l.fds && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if n := fdCount(); n != l.fds {
		ents, _ := os.ReadDir("/proc/self/fd")
		var names []string
		for _, e := range ents {
			if dst, err := os.Readlink("/proc/self/fd/" + e.Name()); err == nil {
				names = append(names, e.Name()+"->"+dst)
			}
		}
		t.Fatalf("%d descriptors after the run, %d before: %v", n, l.fds, names)
	}
	if err := goleak.Find(l.g); err != nil {
		t.Fatalf("goroutines leaked: %v", err)
	}
}

// bounded runs fn, then meanwhile (which may unblock fn, e.g. by
// acknowledging events), and reports whether fn returned within d.
func bounded(d time.Duration, fn func(), meanwhile func()) bool {
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn()
	}()
	if meanwhile != nil {
		meanwhile()
	}
	select {
	case <-done:
		return true
	case <-time.After(d):
		return false
	}
}

func stacks() string {
	buf := make([]byte, 1<<20)
	return string(buf[:runtime.Stack(buf, true)])
}

// errnoOf returns a short name for an error, for logs.
func errnoOf(err error) string {
	if err == nil {
		return "ok"
	}
	return fmt.Sprint(err)
}

func sprintf(format string, args ...any) string { return fmt.Sprintf(format, args...) }
