package journalsvg

import (
	"slices"
	"strconv"

	"github.com/cmrt/cmrt/id"
	"github.com/cmrt/cmrt/id/journal"
)

// life is one lifeline: an id, or a run of like ids drawn as one.
type life struct {
	id       uint64
	qp       id.QPType
	parent   uint64 // the listener whose CONNECT_REQUEST made the id (0: none)
	ch       uint64 // the channel of the id's first record
	first    int    // index of the id's first record
	recs     []int  // indices of the id's records
	sig      string // what the id did: calls, events, statuses and states
	bad      bool   // a record of the id breaks the model
	children []*life
	band     *band

	n      int    // ids this lifeline stands for
	lastID uint64 // the last id of the run (n > 1)
	span   [2]int64
	hidden bool // drawn as part of an earlier id's ×N lifeline
	col    int  // column on the page being drawn (-1: not on it)
}

// band is a group of lifelines: the ids whose first record was on one
// channel (with the ids their listeners' requests made), or the ids that
// each had a channel of their own (synchronous ids).
type band struct {
	ch    uint64 // 0: own channels
	lives []*life
}

// model is a journal laid out for drawing, before paging.
type model struct {
	recs      []journal.Record
	bad       map[int][]journal.Violation // by record index
	tolerated map[int][]journal.Violation
	prev      []id.State // by record index: the id's state before it
	nbad      int        // records that break the model
	byID      map[uint64]*life
	order     []*life // every lifeline, in column order
	bands     []*band
	channels  int
	rows      []row // records drawn, after collapsing
	collapsed int   // ids hidden in ×N lifelines
	blocks    int
	t0        int64
}

// row is one drawn line: a record, or the heading of a repeated block.
type row struct {
	rec   int    // index of the record (-1: a block heading)
	block *block // the block this row heads or belongs to
}

// block is a sequence of rows repeated back to back, drawn once.
type block struct {
	p, k       int   // rows per repetition, repetitions
	start, end int64 // time of its first and last record
	hidden     int   // records not drawn
}

// build lays out records (sorted by Seq) and their violations.
func build(recs []journal.Record, vs []journal.Violation, tolerate []journal.ViolationKind, minRun int) *model {
	m := &model{recs: recs, bad: map[int][]journal.Violation{}, tolerated: map[int][]journal.Violation{}, byID: map[uint64]*life{}}
	if len(recs) > 0 {
		m.t0 = recs[0].Time
	}
	m.markViolations(vs, tolerate)

	// Lifelines, in order of first appearance.
	var lives []*life
	users := map[uint64]map[uint64]bool{} // channel -> ids that reported to it
	m.prev = make([]id.State, len(recs))
	for k := range recs {
		r := &recs[k]
		l := m.byID[r.ID]
		if l != nil {
			m.prev[k] = recs[l.recs[len(l.recs)-1]].State
		} else {
			l = &life{id: r.ID, qp: r.QPType, ch: r.Channel, first: k, n: 1, col: -1}
			m.byID[r.ID] = l
			lives = append(lives, l)
		}
		if l.parent == 0 && r.Parent != 0 && r.Parent != r.ID {
			if p := m.byID[r.Parent]; p != nil && p.first < l.first {
				l.parent = r.Parent
			}
		}
		l.recs = append(l.recs, k)
		if len(m.bad[k]) > 0 {
			l.bad = true
		}
		if users[r.Channel] == nil {
			users[r.Channel] = map[uint64]bool{}
		}
		users[r.Channel][r.ID] = true
	}
	m.channels = len(users)
	for _, l := range lives {
		l.sig = signature(recs, l.recs)
		l.span = [2]int64{recs[l.recs[0]].Time, recs[l.recs[len(l.recs)-1]].Time}
		if l.parent != 0 {
			p := m.byID[l.parent]
			p.children = append(p.children, l)
		}
	}

	// Bands: by first channel; ids alone on their channel share one.
	bands := map[uint64]*band{}
	var add func(b *band, l *life)
	add = func(b *band, l *life) {
		l.band = b
		b.lives = append(b.lives, l)
		for _, c := range l.children {
			add(b, c)
		}
	}
	for _, l := range lives {
		if l.parent != 0 {
			continue // placed after its listener
		}
		key := l.ch
		if len(users[l.ch]) == 1 {
			key = 0
		}
		b := bands[key]
		if b == nil {
			b = &band{ch: key}
			bands[key] = b
			m.bands = append(m.bands, b)
		}
		add(b, l)
	}
	for _, b := range m.bands {
		m.order = append(m.order, b.lives...)
		if minRun >= 2 {
			m.collapseIDs(b, minRun)
		}
	}

	for k := range recs {
		if !m.byID[recs[k].ID].hidden {
			m.rows = append(m.rows, row{rec: k})
		}
	}
	if minRun >= 2 {
		m.collapseRows(minRun)
	}
	return m
}

func (m *model) markViolations(vs []journal.Violation, tolerate []journal.ViolationKind) {
	// A violation names its record by Seq and id; records are sorted by Seq.
	for _, v := range vs {
		k, _ := slices.BinarySearchFunc(m.recs, v.Record.Seq, func(r journal.Record, seq uint64) int {
			switch {
			case r.Seq < seq:
				return -1
			case r.Seq > seq:
				return 1
			}
			return 0
		})
		for ; k < len(m.recs) && m.recs[k].Seq == v.Record.Seq; k++ {
			if m.recs[k] == v.Record {
				break
			}
		}
		if k >= len(m.recs) || m.recs[k].Seq != v.Record.Seq {
			continue
		}
		if slices.Contains(tolerate, v.Kind) {
			m.tolerated[k] = append(m.tolerated[k], v)
			continue
		}
		m.bad[k] = append(m.bad[k], v)
	}
	m.nbad = len(m.bad)
}

// signature encodes what an id did, without times, handles and channel
// numbers, so that ids that went through the same cycle compare equal.
func signature(recs []journal.Record, idx []int) string {
	b := make([]byte, 0, 8*len(idx))
	ch := recs[idx[0]].Channel
	for _, k := range idx {
		r := &recs[k]
		moved := byte('=')
		if r.Channel != ch {
			moved = '>'
			ch = r.Channel
		}
		b = append(b, byte(r.Kind), byte(r.Call), byte(r.State), moved)
		b = strconv.AppendInt(b, int64(r.Event), 10)
		b = append(b, '/')
		b = strconv.AppendInt(b, int64(r.Status), 10)
		if r.Parent != 0 {
			b = append(b, 'p')
		}
		b = append(b, ';')
	}
	return string(b)
}

// collapseIDs hides each run of at least minRun successive like ids of a
// band behind its first: same listener, same signature, no violation and
// no children of their own.
func (m *model) collapseIDs(b *band, minRun int) {
	like := func(a, c *life) bool {
		return a.parent == c.parent && a.sig == c.sig && !a.bad && !c.bad && len(a.children) == 0 && len(c.children) == 0
	}
	for i := 0; i < len(b.lives); {
		j := i + 1
		for j < len(b.lives) && like(b.lives[i], b.lives[j]) {
			j++
		}
		if j-i >= minRun {
			head := b.lives[i]
			head.n = j - i
			head.lastID = b.lives[j-1].id
			for _, l := range b.lives[i+1 : j] {
				l.hidden = true
				head.span[0] = min(head.span[0], l.span[0])
				head.span[1] = max(head.span[1], l.span[1])
			}
			m.collapsed += j - i - 1
		}
		i = j
	}
}

// rowKey is what makes two rows the same for collapseRows.
type rowKey struct {
	id      uint64
	kind    journal.RecordKind
	call    journal.Call
	event   id.EventType
	status  int32
	state   id.State
	channel uint64
	parent  uint64
	bad     int // the record's index when it breaks the model, else -1
}

// maxPeriod is the longest block collapseRows looks for.
const maxPeriod = 8

// collapseRows draws blocks of up to maxPeriod rows repeated at least
// minRun times back to back once, under a heading row.
func (m *model) collapseRows(minRun int) {
	keys := make([]rowKey, len(m.rows))
	for k, rw := range m.rows {
		r := &m.recs[rw.rec]
		keys[k] = rowKey{id: r.ID, kind: r.Kind, call: r.Call, event: r.Event, status: r.Status, state: r.State,
			channel: r.Channel, parent: r.Parent, bad: -1}
		if len(m.bad[rw.rec]) > 0 || len(m.tolerated[rw.rec]) > 0 {
			keys[k].bad = rw.rec
		}
	}
	same := func(a, b, p int) bool { return slices.Equal(keys[a:a+p], keys[b:b+p]) }
	var out []row
	for i := 0; i < len(m.rows); {
		bestP, bestK := 0, 0
		for p := 1; p <= maxPeriod && i+2*p <= len(m.rows); p++ {
			k := 1
			for i+(k+1)*p <= len(m.rows) && same(i, i+k*p, p) {
				k++
			}
			if k >= minRun && p*k > bestP*bestK {
				bestP, bestK = p, k
			}
		}
		if bestK == 0 {
			out = append(out, m.rows[i])
			i++
			continue
		}
		end := i + bestP*bestK
		bl := &block{p: bestP, k: bestK, start: m.recs[m.rows[i].rec].Time,
			end: m.recs[m.rows[end-1].rec].Time, hidden: bestP * (bestK - 1)}
		out = append(out, row{rec: -1, block: bl})
		for _, rw := range m.rows[i : i+bestP] {
			out = append(out, row{rec: rw.rec, block: bl})
		}
		m.blocks++
		i = end
	}
	m.rows = out
}

// pages cuts the rows into pages of at most max rows, keeping a block
// with its heading; it returns each page's first row and the end.
func (m *model) pages(max int) []int {
	starts := []int{0}
	n := 0
	for i := 0; i < len(m.rows); {
		size := 1
		if rw := m.rows[i]; rw.rec < 0 {
			size = 1 + rw.block.p
		}
		if n > 0 && n+size > max {
			starts = append(starts, i)
			n = 0
		}
		n += size
		i += size
	}
	return append(starts, len(m.rows))
}
