package journalsvg

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"

	"golang.org/x/sys/unix"

	"github.com/cmrt/cmrt/id"
	"github.com/cmrt/cmrt/id/journal"
)

// Geometry, in pixels. The font is monospace, so a text's width is its
// length times charW (in tenths of a pixel, to stay in integers).
const (
	charW10   = 66 // 11px monospace: 6.6px a character
	rowH      = 18
	colW      = 132
	gutter    = 96 // the time axis, left of the lifelines
	left      = gutter + 14
	headH     = 44
	lineH     = 15
	maxVLines = 8 // violations listed at the top
)

// style is the picture's stylesheet: classes keep a large picture small.
const style = `text{white-space:pre}.t{fill:#222}.b{font-weight:bold}.h{font-size:13px;font-weight:bold}` +
	`.tm{fill:#777;font-size:10px;text-anchor:end}.st{fill:#777}.er{fill:#b34700}` +
	`.bg{fill:#fff;fill-opacity:.85}.ll{stroke:#999}.ld{stroke:#bbb;stroke-dasharray:2 3}` +
	`.ca{fill:#333}.ev{fill:#fff;stroke:#1f77b4;stroke-width:1.8}.cn{fill:#fff;stroke:#555;stroke-width:1.5}` +
	`.x{stroke:#333;stroke-width:2}.ar{stroke:#1f77b4;stroke-dasharray:4 3;fill:none}.ah{fill:#1f77b4}` +
	`.bad{fill:#d00000}.badm{stroke:#d00000;fill:#fff;stroke-width:2}.badx{stroke:#d00000;stroke-width:2}` +
	`.br{fill:#fde2e2}.tl{fill:#b36b00}.tr{fill:#fff1d0}` +
	`.hd{fill:#fff;stroke:#555}.bn{fill:#f0f0f0;stroke:#ccc}` +
	`.kh{fill:#e3edf9}.kr{fill:#f5f9fe}.kb{stroke:#4a7ab0;stroke-width:2;fill:none}.kt{fill:#24507f}`

// painter draws one page of a model.
type painter struct {
	m        *model
	c        *config
	info     Info
	from, to int // the page's rows

	buf    bytes.Buffer // the whole picture
	body   bytes.Buffer // everything after the root element
	width  int
	cols   []*life // lifelines on the page, by column
	rowsY  int     // top of the first row
	bottom int
}

// span is a piece of a label with its class.
type span struct{ text, class string }

func textW(s string) int { return (utf8.RuneCountInString(s)*charW10 + 9) / 10 }

func (p *painter) grow(x int) { p.width = max(p.width, x) }

// esc writes s escaped for XML text and attribute values.
func esc(b *bytes.Buffer, s string) { _ = xml.EscapeText(b, []byte(s)) }

func (p *painter) printf(format string, args ...any) { fmt.Fprintf(&p.body, format, args...) }

// text writes a text element at x, y (baseline) of one class.
func (p *painter) text(x, y int, class, s string) {
	p.printf(`<text x="%d" y="%d" class="%s">`, x, y, class)
	esc(&p.body, s)
	p.body.WriteString("</text>\n")
	p.grow(x + textW(s))
}

// spans writes a text element made of pieces of different classes.
func (p *painter) spans(x, y int, parts []span) {
	p.printf(`<text x="%d" y="%d">`, x, y)
	n := 0
	for _, s := range parts {
		p.printf(`<tspan class="%s">`, s.class)
		esc(&p.body, s.text)
		p.body.WriteString("</tspan>")
		n += utf8.RuneCountInString(s.text)
	}
	p.body.WriteString("</text>\n")
	p.grow(x + (n*charW10+9)/10)
}

func (p *painter) paint() {
	m := p.m
	p.width = left + 400
	// Lifelines on the page: those with a row on it, and the listeners
	// whose requests made one.
	on := map[*life]bool{}
	for _, rw := range m.rows[p.from:p.to] {
		if rw.rec < 0 {
			continue
		}
		r := &m.recs[rw.rec]
		on[m.byID[r.ID]] = true
		if l := m.byID[r.ID]; l.parent != 0 && r.Kind == journal.KindEvent && r.Event == id.EventConnectRequest {
			on[m.byID[l.parent]] = true
		}
	}
	for _, l := range m.order {
		if on[l] {
			l.col = len(p.cols)
			p.cols = append(p.cols, l)
		}
	}

	y := p.header()
	y = p.heads(y)
	p.rowsY = y
	p.bottom = y + (p.to-p.from)*rowH + 8
	for k := p.from; k < p.to; k++ {
		p.background(k, p.rowsY+(k-p.from)*rowH)
	}
	p.lifelines()
	for k := p.from; k < p.to; k++ {
		p.row(k, p.rowsY+(k-p.from)*rowH)
	}
	p.grow(left + len(p.cols)*colW + 8)
	height := p.bottom + 12

	fmt.Fprintf(&p.buf, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" `+
		`font-family="DejaVu Sans Mono,Menlo,Consolas,monospace" font-size="11" xml:space="preserve">`+"\n", p.width+12, height, p.width+12, height)
	fmt.Fprintf(&p.buf, "<style>%s</style>\n", style)
	fmt.Fprintf(&p.buf, `<rect width="%d" height="%d" fill="#fff"/>`+"\n", p.width+12, height)
	p.buf.Write(p.body.Bytes())
	p.buf.WriteString("</svg>\n")
}

// header writes the title, the summary, the legend and the violations,
// and returns where the bands begin.
func (p *painter) header() int {
	m, info := p.m, p.info
	y := 18
	p.text(8, y, "h", p.c.title)
	y += lineH + 2
	sum := plural(info.Records, "record") + ", " + plural(info.IDs, "id") + ", " + plural(m.channels, "channel") + "; "
	switch info.Violations {
	case 0:
		sum += "no violation of the model"
	case 1:
		sum += "1 record breaks the model (red)"
	default:
		sum += fmt.Sprintf("%d records break the model (red)", info.Violations)
	}
	if len(m.recs) > 0 {
		sum += "; first record at " + time.Unix(0, m.t0).UTC().Format("2006-01-02 15:04:05.000000 UTC")
	}
	p.text(8, y, "t", sum)
	y += lineH
	drawn := fmt.Sprintf("rows %d-%d of %d, page %d of %d", p.from+1, p.to, info.Rows, info.Page, info.Pages)
	if info.Pages == 0 || p.to == p.from {
		drawn = "nothing to draw"
	}
	if info.CollapsedIDs > 0 {
		drawn += fmt.Sprintf("; %d ids drawn in ×N lifelines", info.CollapsedIDs)
	}
	if info.Blocks > 0 {
		drawn += fmt.Sprintf("; %d repeated blocks drawn once", info.Blocks)
	}
	p.text(8, y, "st", drawn)
	y += lineH + 4

	// Legend.
	x := 14
	p.printf(`<rect x="%d" y="%d" width="8" height="8" class="ca"/>`+"\n", x-4, y-8)
	p.text(x+8, y, "t", "call")
	x += 56
	p.printf(`<circle cx="%d" cy="%d" r="4.5" class="ev"/>`+"\n", x, y-4)
	p.text(x+8, y, "t", "event")
	x += 62
	p.printf(`<path d="M%d %dl5 5l-5 5l-5-5z" class="cn"/>`+"\n", x, y-9)
	p.text(x+8, y, "t", "cancel")
	x += 68
	p.printf(`<path d="M%d %dl10 10m0-10l-10 10" class="x"/>`+"\n", x-5, y-9)
	p.text(x+8, y, "t", "destroyed")
	x += 96
	p.spans(x, y, []span{{"-104 ECONNRESET", "er"}, {": status, errno; ", "t"}, {"→ STATE", "st"},
		{": state after; ", "t"}, {"red", "bad"}, {": breaks the model", "t"}})
	y += lineH + 2

	// Violations in words.
	n := 0
	for k := range m.recs {
		for _, v := range m.bad[k] {
			if n < maxVLines {
				p.text(8, y, "bad", fmt.Sprintf("✗ seq %d, id %d: %s: %s", v.Record.Seq, v.Record.ID, v.Kind, v.Msg))
				y += lineH
			}
			n++
		}
	}
	if n > maxVLines {
		p.text(8, y, "bad", fmt.Sprintf("… and %d more", n-maxVLines))
		y += lineH
	}
	return y + 6
}

// colX is the x of a column's lifeline.
func colX(col int) int { return left + col*colW + colW/2 }

// fit cuts s to n characters, ending it with … when cut.
func fit(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}

// heads writes the bands and the lifelines' heads; it returns where the
// rows begin.
func (p *painter) heads(y int) int {
	// Bands: runs of columns of one band.
	for c := 0; c < len(p.cols); {
		b := p.cols[c].band
		e := c
		for e+1 < len(p.cols) && p.cols[e+1].band == b {
			e++
		}
		x0, x1 := colX(c)-colW/2+3, colX(e)+colW/2-3
		p.printf(`<rect x="%d" y="%d" width="%d" height="18" rx="3" class="bn"/>`+"\n", x0, y, x1-x0)
		label := "own channels"
		if b.ch != 0 {
			label = "channel " + strconv.FormatUint(b.ch, 10)
		}
		p.text(x0+5, y+13, "t", fit(label, (x1-x0-8)*10/charW10))
		c = e + 1
	}
	y += 24
	p.text(gutter-4, y+headH-18, "tm", "time since")
	p.text(gutter-4, y+headH-6, "tm", "first record")
	for _, l := range p.cols {
		x := colX(l.col)
		w := colW - 10
		p.printf(`<rect x="%d" y="%d" width="%d" height="%d" rx="4" class="hd"/>`+"\n", x-w/2, y, w, headH)
		chars := (w - 8) * 10 / charW10
		first := "id " + strconv.FormatUint(l.id, 10)
		if l.n > 1 {
			first += " ×" + strconv.Itoa(l.n)
		}
		p.text(x-w/2+5, y+14, "t b", fit(first, chars))
		second := l.qp.String()
		switch {
		case l.parent != 0:
			second += ", child of " + strconv.FormatUint(l.parent, 10)
		case len(l.children) > 0 || listened(p.m, l):
			second += ", listener"
		}
		p.text(x-w/2+5, y+27, "t", fit(second, chars))
		if l.n > 1 {
			p.text(x-w/2+5, y+40, "st", fit("to id "+strconv.FormatUint(l.lastID, 10), chars))
		}
	}
	return y + headH + 10
}

// listened reports whether the id listened.
func listened(m *model, l *life) bool {
	for _, k := range l.recs {
		if r := &m.recs[k]; r.Kind == journal.KindCall && r.Call == journal.CallListen && r.Status == 0 {
			return true
		}
	}
	return false
}

// lifelines draws each column's line: dotted from its head to its first
// row, solid to its last (to the page's edges where it goes on).
func (p *painter) lifelines() {
	first := map[*life]int{}
	last := map[*life]int{}
	for k, rw := range p.m.rows {
		if rw.rec < 0 {
			continue
		}
		l := p.m.byID[p.m.recs[rw.rec].ID]
		if _, ok := first[l]; !ok {
			first[l] = k
		}
		last[l] = k
	}
	rowMid := func(k int) int { return p.rowsY + (k-p.from)*rowH + rowH/2 }
	for _, l := range p.cols {
		x := colX(l.col)
		f, okf := first[l]
		e, oke := last[l]
		top, bot := p.rowsY-10, p.bottom
		if okf && f >= p.from {
			top = rowMid(f)
			p.printf(`<path d="M%d %dV%d" class="ld"/>`+"\n", x, p.rowsY-10, top)
		}
		if oke && e < p.to {
			bot = rowMid(e)
		}
		if !okf { // a listener drawn for its request's arrow only
			continue
		}
		p.printf(`<path d="M%d %dV%d" class="ll"/>`+"\n", x, top, bot)
	}
}

// background draws the band under row k (at y, its top), if it has one:
// red for a violation, orange for a tolerated one, blue for a block.
func (p *painter) background(k, y int) {
	m := p.m
	rw := m.rows[k]
	switch {
	case rw.rec < 0:
		p.printf(`<rect x="%d" y="%d" width="100%%" height="%d" class="kh"/>`+"\n", gutter+2, y+1, rowH-2)
	case len(m.bad[rw.rec]) > 0:
		p.printf(`<rect y="%d" width="100%%" height="%d" class="br"/>`+"\n", y, rowH)
	case len(m.tolerated[rw.rec]) > 0:
		p.printf(`<rect x="%d" y="%d" width="100%%" height="%d" class="tr"/>`+"\n", gutter+2, y, rowH)
	case rw.block != nil:
		p.printf(`<rect x="%d" y="%d" width="100%%" height="%d" class="kr"/>`+"\n", gutter+20, y, rowH)
	}
}

// row draws row k at y (its top).
func (p *painter) row(k, y int) {
	m := p.m
	rw := m.rows[k]
	mid := y + rowH/2
	if rw.rec < 0 {
		bl := rw.block
		what := "row"
		if bl.p > 1 {
			what = fmt.Sprintf("%d rows", bl.p)
		}
		p.text(left, mid+4, "kt b", fmt.Sprintf("×%d  the next %s, repeated %d times from %s to %s (%d records not drawn)",
			bl.k, what, bl.k, p.rel(bl.start), p.rel(bl.end), bl.hidden))
		h := bl.p * rowH
		p.printf(`<path d="M%d %dh-5v%dh5" class="kb"/>`+"\n", gutter+12, y+rowH+2, h-4)
		return
	}
	r := &m.recs[rw.rec]
	l := m.byID[r.ID]
	x := colX(l.col)
	bad, tol := m.bad[rw.rec], m.tolerated[rw.rec]
	p.printf("<g><title>")
	esc(&p.body, r.String())
	for _, v := range append(append([]journal.Violation(nil), bad...), tol...) {
		esc(&p.body, "\n"+v.Kind.String()+": "+v.Msg)
	}
	p.printf("</title>\n")
	p.text(gutter-4, mid+4, "tm", p.rel(r.Time))

	// The request's arrow from the listener.
	if r.Kind == journal.KindEvent && r.Event == id.EventConnectRequest && l.parent != 0 {
		if pl := m.byID[l.parent]; pl.col >= 0 {
			px := colX(pl.col)
			dir := 1
			if px > x {
				dir = -1
			}
			tip := x - dir*7
			p.printf(`<path d="M%d %dH%d" class="ar"/><path d="M%d %dl%d -4v8z" class="ah"/>`+"\n",
				px, mid, tip-dir*6, tip, mid, -dir*7)
		}
	}

	// The marker.
	red := len(bad) > 0
	switch {
	case r.Kind == journal.KindCall && r.Call == journal.CallDestroy && r.Status == 0:
		cls := "x"
		if red {
			cls = "badx"
		}
		p.printf(`<path d="M%d %dl10 10m0-10l-10 10" class="%s"/>`+"\n", x-5, mid-5, cls)
	case r.Kind == journal.KindCall:
		cls := "ca"
		if red {
			cls = "bad"
		}
		p.printf(`<rect x="%d" y="%d" width="8" height="8" class="%s"/>`+"\n", x-4, mid-4, cls)
	case r.Kind == journal.KindEvent:
		cls := "ev"
		if red {
			cls = "badm"
		}
		p.printf(`<circle cx="%d" cy="%d" r="4.5" class="%s"/>`+"\n", x, mid, cls)
	default:
		cls := "cn"
		if red {
			cls = "badm"
		}
		p.printf(`<path d="M%d %dl5 5l-5 5l-5-5z" class="%s"/>`+"\n", x, mid-5, cls)
	}

	// The label, on a light background over the other lifelines.
	parts := p.label(rw.rec)
	switch {
	case red:
		for i := range parts {
			parts[i].class = "bad"
		}
		var words []string
		for _, v := range bad {
			words = append(words, v.Kind.String()+": "+v.Msg)
		}
		parts = append(parts, span{"  ✗ " + strings.Join(words, "; "), "bad b"})
	case len(tol) > 0:
		var words []string
		for _, v := range tol {
			words = append(words, v.Kind.String())
		}
		parts = append(parts, span{"  (" + strings.Join(words, ", ") + ", tolerated)", "tl"})
	}
	n := 0
	for _, s := range parts {
		n += utf8.RuneCountInString(s.text)
	}
	p.printf(`<rect x="%d" y="%d" width="%d" height="14" class="bg"/>`+"\n", x+7, mid-7, (n*charW10+9)/10+4)
	p.spans(x+9, mid+4, parts)
	p.body.WriteString("</g>\n")
}

// label says what record k did: the call or event, its status and the
// state it led to when the name does not say it.
func (p *painter) label(k int) []span {
	m := p.m
	r := &m.recs[k]
	prev := m.prev[k]
	var name, status string
	switch r.Kind {
	case journal.KindCall:
		name = r.Call.String()
		if r.Status != 0 {
			status = errnoName(r.Status)
		}
		if r.Call == journal.CallMigrate && r.Status == 0 {
			name += " → ch " + strconv.FormatUint(r.Channel, 10)
		}
	case journal.KindEvent:
		name = eventName(r.Event)
		if r.Status < 0 {
			status = strconv.Itoa(int(r.Status)) + " " + errnoName(-r.Status)
		} else if r.Status > 0 {
			status = "status " + strconv.Itoa(int(r.Status))
		}
	default:
		name = r.Kind.String()
	}
	parts := []span{{name, "t"}}
	if status != "" {
		parts = append(parts, span{" " + status, "er"})
	}
	if r.State != prev && r.State.String() != name && !(r.Kind == journal.KindCall && r.Call == journal.CallDestroy) {
		parts = append(parts, span{" → " + r.State.String(), "st"})
	}
	return parts
}

// plural writes n things: "1 id", "2 ids".
func plural(n int, thing string) string {
	if n == 1 {
		return "1 " + thing
	}
	return strconv.Itoa(n) + " " + thing + "s"
}

// eventName is the event's name without RDMA_CM_EVENT_, or its number.
func eventName(t id.EventType) string {
	if t == id.EventUser {
		return "USER"
	}
	s := t.String()
	if n, ok := strings.CutPrefix(s, "RDMA_CM_EVENT_"); ok {
		return n
	}
	return "event " + strconv.Itoa(int(t))
}

// errnoName names an errno ("ECONNRESET"), or gives its number.
func errnoName(e int32) string {
	if e > 0 {
		if n := unix.ErrnoName(syscall.Errno(e)); n != "" {
			return n
		}
	}
	return "errno " + strconv.Itoa(int(e))
}

// rel formats a time as the offset from the journal's first record.
func (p *painter) rel(t int64) string {
	d := t - p.m.t0
	sign := ""
	if d < 0 {
		sign, d = "-", -d
	}
	switch {
	case d < int64(time.Second):
		return fmt.Sprintf("%s%d.%03d ms", sign, d/1e6, d/1e3%1e3)
	case d < int64(1000*time.Second):
		return fmt.Sprintf("%s%d.%03d s", sign, d/1e9, d/1e6%1e3)
	}
	return fmt.Sprintf("%s%d s", sign, d/1e9)
}
