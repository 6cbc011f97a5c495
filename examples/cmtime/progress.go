package main

import (
	"fmt"
	"io"
	"time"
)

// progress shows how far a long step is, on stderr, so that stdout keeps
// rdma-core's output. Nothing is shown for a step that ends within after.
// On a terminal it is one line rewritten in place ("\r") and erased when
// the step ends; otherwise a line is written each time another tenth of
// the step is done.
type progress struct {
	w     io.Writer
	tty   bool
	after time.Duration

	what    string
	total   int
	start   time.Time
	shown   bool
	lastPct int
}

// tick is how often waits look at their progress.
const progressTick = 100 * time.Millisecond

func (p *progress) begin(what string, total int) {
	p.what, p.total, p.start, p.shown, p.lastPct = what, total, time.Now(), false, 0
}

func (p *progress) update(done int) {
	if p.w == nil || p.total <= 0 || time.Since(p.start) < p.after {
		return
	}
	pct := done * 100 / p.total
	if p.tty {
		fmt.Fprintf(p.w, "\r%s: %d/%d (%d%%)", p.what, done, p.total, pct)
		p.shown = true
		return
	}
	if pct/10 > p.lastPct/10 || !p.shown {
		fmt.Fprintf(p.w, "cmtime: %s: %d/%d (%d%%)\n", p.what, done, p.total, pct)
		p.shown, p.lastPct = true, pct
	}
}

func (p *progress) end() {
	if p.tty && p.shown {
		fmt.Fprint(p.w, "\r\033[K")
	}
	p.shown = false
}
