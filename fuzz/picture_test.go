package fuzz

import (
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/cmrt/cmrt/id"
	"github.com/cmrt/cmrt/id/journal"
	"github.com/cmrt/cmrt/internal/journalsvg"
)

// pictureDir is where the pictures of failing journals go: the package's
// testdata directory, where the fuzzing engine and rapid keep failing
// inputs (tests point it elsewhere).
var pictureDir = "testdata"

// lastPicture is the picture this process last wrote for an input the
// fuzzing engine generated: while it minimizes a failing input, each
// smaller input that still fails replaces the one before.
var lastPicture struct {
	sync.Mutex
	path string
}

// corpusName is the name the fuzzing engine gives the file it writes for
// input b under testdata/fuzz/<Target>/: the first 16 hex digits of the
// SHA-256 of the file's contents.
func corpusName(b []byte) string {
	sum := sha256.Sum256(fmt.Appendf(nil, "go test fuzz v1\n[]byte(%q)\n", b))
	return fmt.Sprintf("%x", sum)[:16]
}

// picturePath says where the picture of a failing run goes, next to the
// input that replays it:
//
//   - a fuzz input: testdata/fuzz/<Target>/journal/<input>.svg, where
//     <input> is the corpus file the run replays (go test
//     -run=<Target>/<input>), or the name the engine gives a new failing
//     input. (A subdirectory: the engine reads every file directly under
//     testdata/fuzz/<Target> as an input.)
//   - a rapid check: testdata/rapid/<Test>/journal.svg, written by every
//     failing run, so the last one is rapid's minimized case.
func picturePath(t T, c chooser) (path string, generated bool) {
	target, sub, _ := strings.Cut(t.Name(), "/")
	target = strings.Map(func(r rune) rune {
		if r == '/' || r == os.PathSeparator {
			return '_'
		}
		return r
	}, target)
	bc, ok := c.(*bytesChooser)
	if !ok {
		return filepath.Join(pictureDir, "rapid", target, "journal.svg"), false
	}
	dir := filepath.Join(pictureDir, "fuzz", target)
	if sub != "" && !strings.ContainsAny(sub, `/\`) {
		if fi, err := os.Stat(filepath.Join(dir, sub)); err == nil && fi.Mode().IsRegular() {
			return filepath.Join(dir, "journal", sub+".svg"), false
		}
	}
	return filepath.Join(dir, "journal", corpusName(bc.b)+".svg"), true
}

// picture draws the recorded journal for a failing run (violations of the
// kinds in tolerate in orange, the others in red) and returns a line for
// the failure message saying where it is.
func (r *recorder) picture(t T, c chooser, tolerate ...journal.ViolationKind) string {
	path, generated := picturePath(t, c)
	if err := r.draw(path, t.Name(), tolerate); err != nil {
		return fmt.Sprintf("journal picture not written: %v\n", err)
	}
	if generated {
		lastPicture.Lock()
		if old := lastPicture.path; old != "" && old != path {
			_ = os.Remove(old)
		}
		lastPicture.path = path
		lastPicture.Unlock()
	}
	if abs, err := filepath.Abs(path); err == nil {
		path = abs
	}
	return fmt.Sprintf("journal picture (look here first): %s\n", path)
}

func (r *recorder) draw(path, name string, tolerate []journal.ViolationKind) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	_, err = journalsvg.Draw(f, r.records(), journalsvg.WithTitle(name+": the journal of the failing run"),
		journalsvg.WithTolerate(tolerate...), journalsvg.WithMaxRows(1<<20))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// namedT is a T with a name, for the test of picture.
type namedT struct{ name string }

func (n namedT) Name() string        { return n.name }
func (namedT) Logf(string, ...any)   {}
func (namedT) Errorf(string, ...any) {}
func (namedT) Fatalf(string, ...any) {}

func TestFailingJournalPicture(t *testing.T) {
	dir := t.TempDir()
	defer func(old string) { pictureDir = old }(pictureDir)
	pictureDir = dir
	lastPicture.path = ""

	// A journal that breaks the model: an ESTABLISHED for an idle id.
	rec := newRecorder()
	rec.stop()
	rec.recs = []journal.Record{
		{Seq: 1, Time: 1e9, ID: 7, Channel: 1, Kind: journal.KindCall, QPType: id.RC, Call: journal.CallCreate, State: id.StateIdle},
		{Seq: 2, Time: 2e9, ID: 7, Channel: 1, Kind: journal.KindEvent, QPType: id.RC, Event: id.EventEstablished, State: id.StateIdle},
		{Seq: 3, Time: 3e9, ID: 7, Channel: 1, Kind: journal.KindCall, QPType: id.RC, Call: journal.CallDestroy, State: id.StateDestroyed},
	}
	check := func(msg, path, class string) {
		t.Helper()
		if want := "journal picture (look here first): " + path + "\n"; msg != want {
			t.Fatalf("message %q, want %q", msg, want)
		}
		svg, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(svg), "illegal event") || !strings.Contains(string(svg), `class="`+class+`"`) {
			t.Errorf("%s does not show the violation in %s", path, class)
		}
	}

	// rapid: one picture per test, the last failing run's.
	check(rec.picture(namedT{"TestRapidFake"}, &rapidChooser{}), filepath.Join(dir, "rapid", "TestRapidFake", "journal.svg"), "br")

	// A new input the engine found: named as the engine names its file;
	// a smaller one that still fails (minimization) replaces it.
	a, b := []byte("10000000120800007101"), []byte{0, 1, 0, 0, 0, '%', 0, 0}
	pa := filepath.Join(dir, "fuzz", "FuzzFake", "journal", "8160fab5bd7ad76b.svg")
	check(rec.picture(namedT{"FuzzFake"}, &bytesChooser{b: a}), pa, "br")
	pb := filepath.Join(dir, "fuzz", "FuzzFake", "journal", "ff15be87604d822b.svg")
	check(rec.picture(namedT{"FuzzFake"}, &bytesChooser{b: b}), pb, "br")
	if _, err := os.Stat(pa); !os.IsNotExist(err) {
		t.Errorf("the picture of the larger input is left: %v", err)
	}

	// A corpus file replayed (go test -run=FuzzFake/<file>): the picture
	// takes the file's name, and tolerated kinds are drawn in orange.
	if err := os.WriteFile(filepath.Join(dir, "fuzz", "FuzzFake", "input1"), []byte("go test fuzz v1\n[]byte(\"\")\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	check(rec.picture(namedT{"FuzzFake/input1"}, &bytesChooser{}, journal.IllegalEvent), filepath.Join(dir, "fuzz", "FuzzFake", "journal", "input1.svg"), "tr")
	if _, err := os.Stat(pb); err != nil {
		t.Errorf("a replay removed the last generated input's picture: %v", err)
	}

	// A seed with no file of its own is named by its contents.
	check(rec.picture(namedT{"FuzzSoftRC/seed#3"}, &bytesChooser{b: b}), filepath.Join(dir, "fuzz", "FuzzSoftRC", "journal", "ff15be87604d822b.svg"), "br")

	// Where it cannot be written, the message says so.
	pictureDir = filepath.Join(dir, "fuzz", "FuzzFake", "input1") // a file
	if msg := rec.picture(namedT{"TestRapidFake"}, &rapidChooser{}); !strings.HasPrefix(msg, "journal picture not written: ") {
		t.Errorf("message %q", msg)
	}
}

func TestCorpusName(t *testing.T) {
	// The committed inputs were written by the engine: their names are
	// what corpusName computes from their values.
	for name, b := range map[string][]byte{
		"FuzzFake/8160fab5bd7ad76b":   []byte("10000000120800007101"),
		"FuzzSoftRC/ff15be87604d822b": {0, 1, 0, 0, 0, '%', 0, 0},
	} {
		want := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", b)
		if got, err := os.ReadFile(filepath.Join("testdata", "fuzz", name)); err != nil || string(got) != want {
			t.Fatalf("%s: %q, %v", name, got, err)
		}
		if got := corpusName(b); got != filepath.Base(name) {
			t.Errorf("corpusName = %s, want %s", got, filepath.Base(name))
		}
	}
}
