// Command cmrt reads a cmrt journal: the JSON lines journal.Journal's WriteJSON
// and ObserveJSON write (journal.ReadJSON reads them), from a file or, without
// one or with "-", from standard input.
//
//	cmrt check [FILE]     check the journal against the model (journal.Check)
//	cmrt replay [FILE]    the final state of every id (journal.Replay, journal.ReplayCheck)
//	cmrt draw [flags] [FILE]
//	                      the journal as an SVG sequence diagram
//
// check prints every violation in words and exits 1 if there is any.
// replay prints one line per id (handle, QP type, listener, records, final
// state) and checks that every record's stored state is the fold of those
// before it: a divergence is printed and exits 1. draw writes the picture
// (package internal/journalsvg) to standard output or to -o; flags:
//
//	-o FILE       write the SVG here
//	-collapse N   draw runs of at least N like ids, or N repetitions of a
//	              block of rows, once with a ×N mark (default 3; 0: never)
//	-max N        rows per page (default 400)
//	-page N       the page to draw (default 1); stderr says how many
//	-title T      the picture's title
//
// Exit status: 0 fine, 1 the journal breaks the model (check, replay), 2
// the journal cannot be read or the command line is wrong.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"

	"github.com/cmrt/cmrt/id"
	"github.com/cmrt/cmrt/id/journal"
	"github.com/cmrt/cmrt/internal/journalsvg"
)

func main() { os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr)) }

const usage = `usage: cmrt check [FILE]
       cmrt replay [FILE]
       cmrt draw [-o FILE] [-collapse N] [-max N] [-page N] [-title T] [FILE]
FILE holds a journal's JSON lines (id.Journal.WriteJSON); without FILE, or
with -, standard input.
`

func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	switch args[0] {
	case "check":
		return check(args[1:], stdin, stdout, stderr)
	case "replay":
		return replay(args[1:], stdin, stdout, stderr)
	case "draw":
		return draw(args[1:], stdin, stdout, stderr)
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, usage)
		return 0
	}
	fmt.Fprintf(stderr, "cmrt: unknown command %q\n%s", args[0], usage)
	return 2
}

// read parses the flags of a command and reads the journal its one
// argument names.
func read(fs *flag.FlagSet, args []string, stdin io.Reader, stderr io.Writer) ([]journal.Record, bool) {
	fs.SetOutput(stderr)
	if err := fs.Parse(args); err != nil {
		return nil, false
	}
	if fs.NArg() > 1 {
		fmt.Fprintf(stderr, "cmrt %s: one journal at a time\n", fs.Name())
		return nil, false
	}
	in, name := stdin, "standard input"
	if f := fs.Arg(0); f != "" && f != "-" {
		fh, err := os.Open(f)
		if err != nil {
			fmt.Fprintf(stderr, "cmrt %s: %v\n", fs.Name(), err)
			return nil, false
		}
		defer fh.Close()
		in, name = fh, f
	}
	recs, err := journal.ReadJSON(in)
	if err != nil {
		fmt.Fprintf(stderr, "cmrt %s: %s: %v\n", fs.Name(), name, err)
		return nil, false
	}
	return recs, true
}

func check(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	recs, ok := read(flag.NewFlagSet("check", flag.ContinueOnError), args, stdin, stderr)
	if !ok {
		return 2
	}
	err := journal.Check(recs)
	var je *journal.Error
	if errors.As(err, &je) {
		for _, v := range je.Violations {
			fmt.Fprintf(stdout, "seq %d, id %d: %s: %s\n\t%s\n", v.Record.Seq, v.Record.ID, v.Kind, v.Msg, v.Record.String())
		}
		fmt.Fprintf(stdout, "%s, %s: %s of the model\n", plural(len(recs), "record"), plural(countIDs(recs), "id"), plural(len(je.Violations), "violation"))
		return 1
	} else if err != nil {
		fmt.Fprintf(stderr, "cmrt check: %v\n", err)
		return 2
	}
	fmt.Fprintf(stdout, "%s, %s: no violation of the model\n", plural(len(recs), "record"), plural(countIDs(recs), "id"))
	return 0
}

// plural writes n things: "1 id", "2 ids".
func plural(n int, thing string) string {
	if n == 1 {
		return "1 " + thing
	}
	return fmt.Sprintf("%d %ss", n, thing)
}

func countIDs(recs []journal.Record) int {
	seen := make(map[uint64]bool)
	for i := range recs {
		seen[recs[i].ID] = true
	}
	return len(seen)
}

func replay(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	recs, ok := read(flag.NewFlagSet("replay", flag.ContinueOnError), args, stdin, stderr)
	if !ok {
		return 2
	}
	slices.SortStableFunc(recs, func(a, b journal.Record) int {
		switch {
		case a.Seq < b.Seq:
			return -1
		case a.Seq > b.Seq:
			return 1
		}
		return 0
	})
	states := journal.Replay(recs)
	type info struct {
		qp      id.QPType
		parent  uint64
		records int
	}
	ids := make(map[uint64]*info)
	for i := range recs {
		r := &recs[i]
		in := ids[r.ID]
		if in == nil {
			in = &info{qp: r.QPType}
			ids[r.ID] = in
		}
		if in.parent == 0 {
			in.parent = r.Parent
		}
		in.records++
	}
	handles := make([]uint64, 0, len(ids))
	for h := range ids {
		handles = append(handles, h)
	}
	slices.Sort(handles)
	fmt.Fprintf(stdout, "%-8s %-3s %-8s %-8s %s\n", "id", "qp", "parent", "records", "state")
	for _, h := range handles {
		in := ids[h]
		parent := "-"
		if in.parent != 0 {
			parent = fmt.Sprint(in.parent)
		}
		fmt.Fprintf(stdout, "%-8d %-3s %-8s %-8d %s\n", h, in.qp, parent, in.records, states[h])
	}
	if _, err := journal.ReplayCheck(recs); err != nil {
		fmt.Fprintf(stdout, "%v\n", err)
		return 1
	}
	return 0
}

func draw(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("draw", flag.ContinueOnError)
	out := fs.String("o", "", "write the SVG to this file (default: standard output)")
	collapse := fs.Int("collapse", journalsvg.DefaultMinRun, "draw runs of at least this many like ids or repeated blocks once (0: never)")
	maxRows := fs.Int("max", journalsvg.DefaultMaxRows, "rows per page")
	page := fs.Int("page", 1, "page to draw")
	title := fs.String("title", "cmrt journal", "title of the picture")
	recs, ok := read(fs, args, stdin, stderr)
	if !ok {
		return 2
	}
	if *maxRows < 1 {
		fmt.Fprintln(stderr, "cmrt draw: -max must be at least 1")
		return 2
	}
	w := stdout
	var f *os.File
	if *out != "" {
		var err error
		if f, err = os.Create(*out); err != nil {
			fmt.Fprintf(stderr, "cmrt draw: %v\n", err)
			return 2
		}
		w = f
	}
	info, err := journalsvg.Draw(w, recs, journalsvg.WithCollapse(*collapse), journalsvg.WithMaxRows(*maxRows),
		journalsvg.WithPage(*page), journalsvg.WithTitle(*title))
	if f != nil {
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			_ = os.Remove(*out)
		}
	}
	if err != nil {
		fmt.Fprintf(stderr, "cmrt draw: %v\n", err)
		return 2
	}
	if info.Pages > 1 {
		fmt.Fprintf(stderr, "cmrt draw: page %d of %d (%d rows; -page N draws another)\n", info.Page, info.Pages, info.Rows)
	}
	return 0
}
