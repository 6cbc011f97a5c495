package journalsvg

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"slices"

	"github.com/cmrt/cmrt/id/journal"
)

// Defaults of the options.
const (
	// DefaultMaxRows is the most rows a page holds unless WithMaxRows says
	// otherwise: about 7 000 pixels of diagram.
	DefaultMaxRows = 400
	// DefaultMinRun is the shortest run of like ids, or of repetitions of
	// a block of rows, drawn once with a ×N mark.
	DefaultMinRun = 3
)

// ErrNoPage is returned (wrapped) for a page the journal does not fill.
var ErrNoPage = errors.New("journalsvg: no such page")

// Option configures Draw.
type Option func(*config)

type config struct {
	minRun   int
	maxRows  int
	page     int
	title    string
	tolerate []journal.ViolationKind
}

// WithCollapse sets the shortest run of like ids, or of repetitions of a
// block of rows, that is drawn once with a ×N mark (DefaultMinRun); below
// 2, everything is drawn.
func WithCollapse(minRun int) Option { return func(c *config) { c.minRun = minRun } }

// WithMaxRows sets the most rows of a page (DefaultMaxRows; at least 1).
func WithMaxRows(n int) Option { return func(c *config) { c.maxRows = max(1, n) } }

// WithPage selects the page to draw, from 1 (the default).
func WithPage(n int) Option { return func(c *config) { c.page = n } }

// WithTitle sets the first line of the picture (default "cmrt journal").
func WithTitle(s string) Option { return func(c *config) { c.title = s } }

// WithTolerate draws violations of these kinds in orange, as expected,
// rather than in red (a fuzzer that injects illegal events on purpose
// tolerates journal.IllegalEvent); they are not counted in Info.Violations.
func WithTolerate(kinds ...journal.ViolationKind) Option {
	return func(c *config) { c.tolerate = append(c.tolerate, kinds...) }
}

// Info says what Draw drew.
type Info struct {
	// Records and IDs count the journal's records and ids.
	Records, IDs int
	// Violations counts the records that break the model (in red).
	Violations int
	// Rows counts the rows left after collapsing, over all pages.
	Rows int
	// Page is the page drawn, of Pages.
	Page, Pages int
	// CollapsedIDs counts the ids drawn as part of another's ×N lifeline;
	// Blocks, the repeated blocks of rows drawn once.
	CollapsedIDs, Blocks int
}

// Draw writes records (of one journal, in any order) as an SVG sequence
// diagram to w and says what it drew. Only a write error or a page out of
// range (ErrNoPage) makes it fail; any journal, even one that breaks the
// model, can be drawn.
func Draw(w io.Writer, records []journal.Record, opts ...Option) (Info, error) {
	c := config{minRun: DefaultMinRun, maxRows: DefaultMaxRows, page: 1, title: "cmrt journal"}
	for _, o := range opts {
		o(&c)
	}
	recs := slices.Clone(records)
	slices.SortStableFunc(recs, func(a, b journal.Record) int { return cmp.Compare(a.Seq, b.Seq) })
	var vs []journal.Violation
	var je *journal.Error
	if err := journal.Check(recs); errors.As(err, &je) {
		vs = je.Violations
	}
	m := build(recs, vs, c.tolerate, c.minRun)
	starts := m.pages(c.maxRows)
	info := Info{Records: len(recs), IDs: len(m.byID), Violations: m.nbad, Rows: len(m.rows),
		Page: c.page, Pages: len(starts) - 1, CollapsedIDs: m.collapsed, Blocks: m.blocks}
	if c.page < 1 || c.page > info.Pages {
		return info, fmt.Errorf("%w: page %d of %d", ErrNoPage, c.page, info.Pages)
	}
	p := &painter{m: m, c: &c, info: info, from: starts[c.page-1], to: starts[c.page]}
	p.paint()
	_, err := w.Write(p.buf.Bytes())
	return info, err
}
