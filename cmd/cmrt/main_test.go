package main

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite docs/demo-journal.svg with what cmrt draw draws now")

// The demo's journal and its picture, shown in README. To make them anew:
//
//	go run ./examples/demo -journal docs/demo-journal.jsonl
//	go test ./cmd/cmrt -run TestDemoPicture -update
const (
	demoJournal = "../../docs/demo-journal.jsonl"
	demoPicture = "../../docs/demo-journal.svg"
)

func cmrt(t *testing.T, stdin string, args ...string) (rc int, stdout, stderr string) {
	t.Helper()
	var out, errs bytes.Buffer
	rc = run(args, strings.NewReader(stdin), &out, &errs)
	return rc, out.String(), errs.String()
}

func TestCheck(t *testing.T) {
	rc, out, errs := cmrt(t, "", "check", demoJournal)
	if rc != 0 || out != "60 records, 9 ids: no violation of the model\n" || errs != "" {
		t.Errorf("good journal: exit %d, stdout %q, stderr %q", rc, out, errs)
	}
	rc, out, _ = cmrt(t, "", "check", "testdata/bad.jsonl")
	if rc != 1 {
		t.Errorf("bad journal: exit %d, want 1", rc)
	}
	for _, want := range []string{
		"seq 2, id 1: illegal event: RDMA_CM_EVENT_ESTABLISHED not allowed for a RC id in state IDLE",
		"seq 5, id 1: after destroy: RDMA_CM_EVENT_DISCONNECTED after destroy",
		"5 records, 1 id: 2 violations of the model",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("check output lacks %q:\n%s", want, out)
		}
	}
	// Standard input, without a file or with -.
	journal, err := os.ReadFile("testdata/bad.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"check"}, {"check", "-"}} {
		if rc, out2, _ := cmrt(t, string(journal), args...); rc != 1 || out2 != out {
			t.Errorf("%v from stdin: exit %d, output %q", args, rc, out2)
		}
	}
}

func TestReplay(t *testing.T) {
	rc, out, errs := cmrt(t, "", "replay", demoJournal)
	if rc != 0 || errs != "" {
		t.Fatalf("good journal: exit %d, stderr %q", rc, errs)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 10 || !strings.HasPrefix(lines[0], "id ") {
		t.Fatalf("want a heading and 9 ids:\n%s", out)
	}
	for _, l := range lines[1:] {
		if !strings.HasSuffix(l, "DESTROYED") {
			t.Errorf("every id of the demo ends destroyed: %q", l)
		}
	}
	if want := "6        RC  1        5        DESTROYED"; !strings.Contains(out, want) {
		t.Errorf("replay lacks the first accepted request %q:\n%s", want, out)
	}

	rc, out, _ = cmrt(t, "", "replay", "testdata/diverged.jsonl")
	if rc != 1 {
		t.Errorf("diverged journal: exit %d, want 1", rc)
	}
	for _, want := range []string{
		"1        RC  -        3        LISTEN",
		"2        UD  -        2        IDLE",
		"journal diverges at #4 id 1 ch 1 RC call listen status 0 -> ESTABLISHED: from ADDR_BOUND the fold gives LISTEN",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("replay output lacks %q:\n%s", want, out)
		}
	}
}

func TestDemoPicture(t *testing.T) {
	rc, svg, errs := cmrt(t, "", "draw", demoJournal)
	if rc != 0 || errs != "" {
		t.Fatalf("draw: exit %d, stderr %q", rc, errs)
	}
	if *update {
		if err := os.WriteFile(demoPicture, []byte(svg), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(demoPicture)
	if err != nil {
		t.Fatal(err)
	}
	if svg != string(want) {
		t.Fatalf("docs/demo-journal.svg is not what cmrt draw draws from docs/demo-journal.jsonl today; "+
			"if the change is meant: go test ./cmd/cmrt -run TestDemoPicture -update\n%s", firstDiff(svg, string(want)))
	}
	// What README says the picture shows.
	for _, s := range []string{"id 6 ×3", "REJECTED", "-104 ECONNRESET", "CONNECT_REQUEST", "no violation of the model"} {
		if !strings.Contains(svg, s) {
			t.Errorf("picture lacks %q", s)
		}
	}
}

func firstDiff(a, b string) string {
	al, bl := strings.Split(a, "\n"), strings.Split(b, "\n")
	for k := 0; k < len(al) && k < len(bl); k++ {
		if al[k] != bl[k] {
			return "line " + strconv.Itoa(k+1) + ":\n got: " + al[k] + "\nwant: " + bl[k]
		}
	}
	return "one is longer"
}

func TestDraw(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "bad.svg")
	rc, stdout, errs := cmrt(t, "", "draw", "-o", out, "-title", "bad", "testdata/bad.jsonl")
	if rc != 0 || stdout != "" || errs != "" {
		t.Fatalf("draw -o: exit %d, stdout %q, stderr %q", rc, stdout, errs)
	}
	svg, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(svg, []byte("2 records break the model (red)")) || bytes.Count(svg, []byte(`class="br"`)) != 2 {
		t.Errorf("the picture of a bad journal does not mark its two violations:\n%s", svg)
	}
	// Pages: the demo's 30 rows in pages of 10.
	rc, svg2, errs := cmrt(t, "", "draw", "-max", "10", "-page", "3", demoJournal)
	if rc != 0 || !strings.Contains(svg2, "rows 21-30 of 30, page 3 of 3") || errs != "cmrt draw: page 3 of 3 (30 rows; -page N draws another)\n" {
		t.Errorf("-page 3: exit %d, stderr %q", rc, errs)
	}
	if rc, _, errs := cmrt(t, "", "draw", "-max", "10", "-page", "4", demoJournal); rc != 2 || !strings.Contains(errs, "no such page: page 4 of 3") {
		t.Errorf("-page 4: exit %d, stderr %q", rc, errs)
	}
	// Without collapsing, all 60 records have a row.
	if rc, svg3, _ := cmrt(t, "", "draw", "-collapse", "0", demoJournal); rc != 0 || !strings.Contains(svg3, "rows 1-60 of 60") {
		t.Errorf("-collapse 0: exit %d", rc)
	}
}

func TestErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		err  string
	}{
		{nil, "usage: cmrt check"},
		{[]string{"frobnicate"}, `unknown command "frobnicate"`},
		{[]string{"check", "testdata/missing.jsonl"}, "no such file or directory"},
		{[]string{"check", "testdata/unreadable.jsonl"}, `journal record 2: unknown call "teleport"`},
		{[]string{"replay", "testdata/unreadable.jsonl"}, `unknown call "teleport"`},
		{[]string{"draw", "testdata/unreadable.jsonl"}, `unknown call "teleport"`},
		{[]string{"check", "a", "b"}, "one journal at a time"},
		{[]string{"draw", "-max", "0", demoJournal}, "-max must be at least 1"},
		{[]string{"draw", "-nonsense"}, "flag provided but not defined"},
		{[]string{"draw", "-o", "/nonexistent/dir/x.svg", demoJournal}, "no such file or directory"},
	} {
		rc, _, errs := cmrt(t, "", tc.args...)
		if rc != 2 || !strings.Contains(errs, tc.err) {
			t.Errorf("%v: exit %d, stderr %q; want 2 and %q", tc.args, rc, errs, tc.err)
		}
	}
	if rc, out, _ := cmrt(t, "", "help"); rc != 0 || !strings.Contains(out, "usage:") {
		t.Errorf("help: exit %d", rc)
	}
}
