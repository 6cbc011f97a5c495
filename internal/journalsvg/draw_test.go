package journalsvg

import (
	"bytes"
	"encoding/xml"
	"errors"
	"flag"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/cmrt/cmrt/id"
	"github.com/cmrt/cmrt/id/journal"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden with what Draw draws now")

// draw draws records and checks that the output is well-formed XML with
// an svg root.
func draw(t *testing.T, recs []journal.Record, opts ...Option) (string, Info) {
	t.Helper()
	var buf bytes.Buffer
	info, err := Draw(&buf, recs, opts...)
	if err != nil {
		t.Fatalf("Draw: %v", err)
	}
	wellFormed(t, buf.Bytes())
	return buf.String(), info
}

func wellFormed(t testing.TB, svg []byte) {
	t.Helper()
	dec := xml.NewDecoder(bytes.NewReader(svg))
	root := ""
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("not well-formed XML: %v", err)
		}
		if se, ok := tok.(xml.StartElement); ok && root == "" {
			root = se.Name.Local
		}
	}
	if root != "svg" {
		t.Fatalf("root element %q, want svg", root)
	}
}

// golden compares got with testdata/name.golden (rewritten with -update).
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./internal/journalsvg -update to write it)", err)
	}
	if got != string(want) {
		gl, wl := strings.Split(got, "\n"), strings.Split(string(want), "\n")
		for k := 0; k < len(gl) || k < len(wl); k++ {
			var g, w string
			if k < len(gl) {
				g = gl[k]
			}
			if k < len(wl) {
				w = wl[k]
			}
			if g != w {
				t.Fatalf("%s differs at line %d:\n got: %s\nwant: %s\n(go test ./internal/journalsvg -update rewrites it, if the change is meant)", path, k+1, g, w)
			}
		}
	}
}

// violating is a journal that breaks the model in four ways, with an
// illegal event a fuzzer would inject on purpose.
func violating() []journal.Record {
	b := newBuilder()
	l := b.listener(1)
	b.cycle(l, 1, 2, false)
	c := b.handle()
	b.call(c, 2, 0, journal.CallCreate, 0)
	b.event(c, 2, 0, id.EventEstablished, 0)                                                    // illegal event in IDLE
	b.add(journal.Record{ID: c, Channel: 2, Kind: journal.KindCall, Call: journal.CallConnect}) // succeeds in IDLE
	r := b.call(c, 2, 0, journal.CallResolveAddr, 0)
	r.State = id.StateEstablished // diverges from the fold
	b.state[c] = r.State
	b.call(c, 2, 0, journal.CallDestroy, 0)
	b.event(c, 2, 0, id.EventDisconnected, 0) // after destroy
	b.call(c, 2, 0, journal.CallBind, 22)     // EINVAL after destroy: fine
	b.call(l, 1, 0, journal.CallDestroy, 0)
	return b.recs
}

// sync is a synchronous listener and n synchronous clients: each client
// on a channel of its own, each request migrated to one, and a
// get_request on the listener per request.
func syncJournal(n int) []journal.Record {
	b := newBuilder()
	l := b.listener(1)
	for k := 0; k < n; k++ {
		cch := uint64(100 + 2*k)
		c := b.handle()
		b.call(c, cch, 0, journal.CallCreate, 0)
		b.call(c, cch, 0, journal.CallResolveAddr, 0)
		b.event(c, cch, 0, id.EventAddrResolved, 0)
		b.call(c, cch, 0, journal.CallResolveRoute, 0)
		b.event(c, cch, 0, id.EventRouteResolved, 0)
		b.call(c, cch, 0, journal.CallConnect, 0)
		s := b.handle()
		b.event(s, 1, l, id.EventConnectRequest, 0)
		b.call(s, cch+1, l, journal.CallMigrate, 0)
		b.call(l, 1, 0, journal.CallGetRequest, 0)
		b.call(s, cch+1, l, journal.CallAccept, 0)
		b.event(s, cch+1, l, id.EventEstablished, 0)
		b.event(c, cch, 0, id.EventEstablished, 0)
		b.call(c, cch, 0, journal.CallDisconnect, 0)
		b.event(s, cch+1, l, id.EventDisconnected, 0)
		b.event(c, cch, 0, id.EventDisconnected, 0)
		b.call(s, cch+1, l, journal.CallDestroy, 0)
		b.call(c, cch, 0, journal.CallDestroy, 0)
	}
	// A failed call and a cancel, for their marks.
	c := b.handle()
	b.call(c, 999, 0, journal.CallCreate, 0)
	b.call(c, 999, 0, journal.CallConnect, 22)
	b.call(c, 999, 0, journal.CallResolveAddr, 0)
	b.add(journal.Record{ID: c, Channel: 999, Kind: journal.KindCancel})
	b.call(c, 999, 0, journal.CallDestroy, 0)
	b.call(l, 1, 0, journal.CallDestroy, 0)
	return b.recs
}

func TestGolden(t *testing.T) {
	for _, tc := range []struct {
		name string
		recs []journal.Record
		opts []Option
	}{
		{"cycles", cycles(4), nil},
		{"cycles-uncollapsed", cycles(4), []Option{WithCollapse(0)}},
		{"cycles-10k", cycles(667), nil},
		{"violations", violating(), []Option{WithTitle("a journal that breaks the model")}},
		{"violations-tolerated", violating(), []Option{WithTolerate(journal.IllegalEvent)}},
		{"sync", syncJournal(5), nil},
		{"page2", cycles(30), []Option{WithCollapse(0), WithMaxRows(60), WithPage(2)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			svg, _ := draw(t, tc.recs, tc.opts...)
			golden(t, tc.name, svg)
		})
	}
}

func TestCheckJournalAgrees(t *testing.T) {
	// The test journals are what they claim: the good ones pass the
	// model, the bad one breaks it in the four places the picture shows.
	for _, recs := range [][]journal.Record{cycles(4), cycles(667), syncJournal(5)} {
		if err := journal.Check(recs); err != nil {
			t.Fatalf("test journal breaks the model: %v", err)
		}
	}
	var je *journal.Error
	if err := journal.Check(violating()); !errors.As(err, &je) || len(je.Violations) != 4 {
		t.Fatalf("violating journal: %v", err)
	}
}

func TestCollapseCycles(t *testing.T) {
	recs := cycles(667) // a listener and 667 connections: 10 008 records
	if len(recs) < 10000 {
		t.Fatalf("%d records", len(recs))
	}
	svg, info := draw(t, recs)
	// 666 accepted cycles are drawn as one client and one server id ×666;
	// the rejected one and the listener stand alone.
	if info.Records != len(recs) || info.IDs != 1+2*667 || info.CollapsedIDs != 2*665 || info.Pages != 1 || info.Violations != 0 {
		t.Errorf("info %+v", info)
	}
	if want := 3 + 15 + 11 + 1; info.Rows != want {
		t.Errorf("%d rows, want %d (the listener's 4, one accepted cycle, one rejected)", info.Rows, want)
	}
	for _, want := range []string{"id 2 ×666", "id 3 ×666", "to id 1332", "to id 1333", "REJECTED", "-104 ECONNRESET", "CONNECT_REQUEST", "1330 ids drawn in ×N lifelines"} {
		if !strings.Contains(svg, want) {
			t.Errorf("picture lacks %q", want)
		}
	}
	if len(svg) > 32<<10 {
		t.Errorf("collapsed picture of %d records is %d bytes", len(recs), len(svg))
	}
}

func TestUncollapsedIsPaged(t *testing.T) {
	recs := cycles(667)
	var total int
	var info Info
	for page := 1; ; page++ {
		var buf bytes.Buffer
		var err error
		info, err = Draw(&buf, recs, WithCollapse(0), WithPage(page))
		if errors.Is(err, ErrNoPage) {
			if page != info.Pages+1 {
				t.Fatalf("ErrNoPage at page %d of %d", page, info.Pages)
			}
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		wellFormed(t, buf.Bytes())
		// Every page is bounded: at most DefaultMaxRows rows, and the
		// lifelines of the ids on it.
		if buf.Len() > 256<<10 {
			t.Errorf("page %d is %d bytes", page, buf.Len())
		}
		total += strings.Count(buf.String(), `class="tm">`) - 2 // the time of each row, less the axis' title
	}
	if info.Rows != len(recs) || info.Pages != (len(recs)+DefaultMaxRows-1)/DefaultMaxRows {
		t.Errorf("info %+v", info)
	}
	if total != len(recs) {
		t.Errorf("%d rows drawn over %d pages, want %d", total, info.Pages, len(recs))
	}
}

func TestRepeatedRowsCollapse(t *testing.T) {
	svg, info := draw(t, syncJournal(5))
	// The children and clients collapse to one each; the listener's
	// get_request after each of the four others' requests becomes a block.
	if info.CollapsedIDs != 8 || info.Blocks != 1 {
		t.Errorf("info %+v", info)
	}
	for _, want := range []string{"×4  the next row, repeated 4 times", "own channels", "migrate → ch 101", "connect</tspan><tspan class=\"er\"> EINVAL", "cancel"} {
		if !strings.Contains(svg, want) {
			t.Errorf("picture lacks %q", want)
		}
	}
	// A block of several rows: a UD id joining and leaving a group.
	b := newBuilder()
	u := b.handle()
	b.add(journal.Record{ID: u, Channel: 1, Kind: journal.KindCall, Call: journal.CallCreate, QPType: id.UD})
	b.add(journal.Record{ID: u, Channel: 1, Kind: journal.KindCall, Call: journal.CallBind, QPType: id.UD})
	for k := 0; k < 50; k++ {
		b.add(journal.Record{ID: u, Channel: 1, Kind: journal.KindCall, Call: journal.CallJoin, QPType: id.UD})
		b.add(journal.Record{ID: u, Channel: 1, Kind: journal.KindEvent, Event: id.EventMulticastJoin, QPType: id.UD})
		b.add(journal.Record{ID: u, Channel: 1, Kind: journal.KindCall, Call: journal.CallLeave, QPType: id.UD})
	}
	b.add(journal.Record{ID: u, Channel: 1, Kind: journal.KindCall, Call: journal.CallDestroy, QPType: id.UD})
	if err := journal.Check(b.recs); err != nil {
		t.Fatal(err)
	}
	svg, info = draw(t, b.recs)
	if info.Blocks != 1 || info.Rows != 2+1+3+1 || !strings.Contains(svg, "×50  the next 3 rows, repeated 50 times") {
		t.Errorf("info %+v", info)
	}
	// Without collapsing, every record has its row.
	_, info = draw(t, b.recs, WithCollapse(0))
	if info.Blocks != 0 || info.Rows != len(b.recs) {
		t.Errorf("uncollapsed: info %+v", info)
	}
}

func TestViolationsInRed(t *testing.T) {
	recs := violating()
	svg, info := draw(t, recs)
	if info.Violations != 4 {
		t.Fatalf("info %+v", info)
	}
	if n := strings.Count(svg, `class="br"`); n != 4 {
		t.Errorf("%d red rows, want 4", n)
	}
	for _, want := range []string{"4 records break the model", "illegal event: RDMA_CM_EVENT_ESTABLISHED not allowed",
		"illegal call: connect succeeded in state IDLE", "state diverged: stored ESTABLISHED, fold ADDR_QUERY",
		"after destroy: RDMA_CM_EVENT_DISCONNECTED after destroy"} {
		if !strings.Contains(svg, want) {
			t.Errorf("picture lacks %q", want)
		}
	}
	// The bad id is never collapsed with a good one, and an EINVAL after
	// destroy is not a violation.
	if strings.Contains(svg, "×") {
		t.Errorf("a run was collapsed in a journal with one id per kind")
	}
	// Tolerated kinds are drawn apart and not counted.
	svg, info = draw(t, recs, WithTolerate(journal.IllegalEvent))
	if info.Violations != 3 || strings.Count(svg, `class="br"`) != 3 || strings.Count(svg, `class="tr"`) != 1 ||
		!strings.Contains(svg, "(illegal event, tolerated)") {
		t.Errorf("tolerated: info %+v", info)
	}
}

func TestDeterministic(t *testing.T) {
	recs := cycles(40)
	want, _ := draw(t, recs)
	// Any order of the same records draws the same picture.
	shuffled := append([]journal.Record(nil), recs...)
	rand.New(rand.NewPCG(1, 2)).Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
	if got, _ := draw(t, shuffled); got != want {
		t.Error("shuffled records draw another picture")
	}
	if got, _ := draw(t, recs); got != want {
		t.Error("a second draw differs")
	}
}

func TestEscapes(t *testing.T) {
	svg, _ := draw(t, cycles(2), WithTitle(`<script>alert("x")</script> & co`))
	if strings.Contains(svg, "<script>") || !strings.Contains(svg, "&lt;script&gt;") || !strings.Contains(svg, "&amp; co") {
		t.Errorf("title not escaped")
	}
}

func TestPages(t *testing.T) {
	recs := cycles(30) // 450 records
	_, info := draw(t, recs, WithCollapse(0), WithMaxRows(60))
	if info.Pages != 8 || info.Rows != len(recs) {
		t.Fatalf("info %+v", info)
	}
	for _, page := range []int{0, 9} {
		if _, err := Draw(io.Discard, recs, WithCollapse(0), WithMaxRows(60), WithPage(page)); !errors.Is(err, ErrNoPage) {
			t.Errorf("page %d: %v", page, err)
		}
	}
	// A page shows the rows it says, with the lifelines of its ids only.
	svg, _ := draw(t, recs, WithCollapse(0), WithMaxRows(60), WithPage(2))
	if !strings.Contains(svg, "rows 61-120 of 450, page 2 of 8") {
		t.Error("page 2 does not say which rows it holds")
	}
	heads := regexp.MustCompile(`class="t b">id (\d+)<`).FindAllStringSubmatch(svg, -1)
	if len(heads) == 0 || len(heads) > 12 {
		t.Errorf("%d lifelines on a page of 60 rows", len(heads))
	}
	// A block is never cut: pages of 2 rows hold a heading and its row.
	_, info = draw(t, syncJournal(5), WithMaxRows(2))
	if info.Pages < 10 {
		t.Errorf("info %+v", info)
	}
}

func TestEmpty(t *testing.T) {
	svg, info := draw(t, nil)
	if info.Pages != 1 || info.Rows != 0 || !strings.Contains(svg, "nothing to draw") {
		t.Errorf("empty journal: %+v", info)
	}
}

type failWriter struct{}

func (failWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }

func TestWriteError(t *testing.T) {
	if _, err := Draw(failWriter{}, cycles(1)); err == nil || !strings.Contains(err.Error(), "disk full") {
		t.Errorf("write error: %v", err)
	}
}
