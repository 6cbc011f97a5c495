package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/cmrt/cmrt/id"
	"github.com/cmrt/cmrt/id/journal"
)

func TestDemoJournal(t *testing.T) {
	path := filepath.Join(t.TempDir(), "demo.jsonl")
	var out, errs bytes.Buffer
	if rc := run([]string{"-n", "3", "-journal", path}, &out, &errs); rc != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", rc, out.String(), errs.String())
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	recs, err := journal.ReadJSON(f)
	if err != nil {
		t.Fatal(err)
	}
	// The whole history of every id of the run, and nothing else: a
	// listener, 3 clients and the 3 ids their requests made, all destroyed.
	if err := journal.Check(recs); err != nil {
		t.Fatal(err)
	}
	if len(recs) == 0 || recs[0].Seq != 1 {
		t.Fatalf("journal does not start at its first record: %d records", len(recs))
	}
	states, err := journal.ReplayCheck(recs)
	if err != nil {
		t.Fatal(err)
	}
	if len(states) != 7 {
		t.Errorf("%d ids in the journal, want 7", len(states))
	}
	for h, s := range states {
		if s != id.StateDestroyed {
			t.Errorf("id %d ends in %s", h, s)
		}
	}
	requests := 0
	for _, r := range recs {
		if r.Kind == journal.KindEvent && r.Event == id.EventConnectRequest {
			requests++
		}
	}
	if requests != 3 {
		t.Errorf("%d CONNECT_REQUESTs, want 3", requests)
	}
}

func TestDemoJournalBadPath(t *testing.T) {
	var out, errs bytes.Buffer
	if rc := run([]string{"-journal", filepath.Join(t.TempDir(), "no", "such", "dir.jsonl")}, &out, &errs); rc != 2 {
		t.Fatalf("exit %d, want 2; stderr %q", rc, errs.String())
	}
}
