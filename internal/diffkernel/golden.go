package diffkernel

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"syscall"

	"github.com/cmrt/cmrt/id"
	"github.com/cmrt/cmrt/id/journal"
	"github.com/cmrt/cmrt/internal/callseq"
)

// Trace is a recorded run of a sequence on one side: each operation with
// the epoch it brought about. Its text form, one "op => epoch" a line, is
// what a report prints and what regression tests replay the software
// fabric against (the kernel's trace of a sequence that once diverged).
type Trace struct {
	Seq    callseq.Seq
	Epochs []Epoch
}

// String writes the trace, one "op => epoch" a line.
func (t Trace) String() string {
	var b strings.Builder
	for k, op := range t.Seq {
		e := Epoch{}
		if k < len(t.Epochs) {
			e = t.Epochs[k]
		}
		fmt.Fprintf(&b, "%s => %s\n", op, e.Text())
	}
	return b.String()
}

// ParseTrace reads a trace in the form Trace.String writes.
func ParseTrace(text string) (Trace, error) {
	var t Trace
	for n, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		opText, epText, ok := strings.Cut(line, "=>")
		if !ok {
			return t, fmt.Errorf("diffkernel: trace line %d: no \"=>\"", n+1)
		}
		seq, err := callseq.Parse(opText)
		if err != nil || len(seq) != 1 {
			return t, fmt.Errorf("diffkernel: trace line %d: %v", n+1, err)
		}
		e, err := ParseEpoch(epText)
		if err != nil {
			return t, fmt.Errorf("diffkernel: trace line %d: %w", n+1, err)
		}
		t.Seq = append(t.Seq, seq[0])
		t.Epochs = append(t.Epochs, e)
	}
	return t, nil
}

// Text formats an epoch for a trace: "s0[bind:ok>ADDR_BOUND]
// s2/UD[CONNECT_REQUEST:0>CONNECT_REQUEST]", "!busy" when skipped, "-"
// when nothing happened.
func (e Epoch) Text() string {
	keys := make([]int, 0, len(e.Slots))
	for k := range e.Slots {
		keys = append(keys, k)
	}
	sort.Ints(keys)
	var parts []string
	for _, k := range keys {
		is := e.Slots[k]
		var b strings.Builder
		fmt.Fprintf(&b, "s%d", k)
		if len(is) > 0 && is[0].QP == id.UD {
			b.WriteString("/UD")
		}
		b.WriteByte('[')
		for n, it := range is {
			if n > 0 {
				b.WriteByte(' ')
			}
			b.WriteString(it.text())
		}
		b.WriteByte(']')
		parts = append(parts, b.String())
	}
	if e.Probe != "" {
		parts = append(parts, "?probe "+strings.ReplaceAll(e.Probe, " ", "_"))
	}
	switch e.Skip {
	case skipBusy:
		parts = append(parts, "!busy")
	case skipNoID:
		parts = append(parts, "!noid")
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, " ")
}

// text formats an item for a trace: "connect:ok>CONNECT",
// "bind:EADDRINUSE>IDLE", "establish(auto):ok>ESTABLISHED",
// "REJECTED:28>FAILED", "cancel>CANCELED".
func (a Item) text() string {
	switch a.Kind {
	case journal.KindCall:
		s := a.Call.String()
		if a.Auto {
			s += "(auto)"
		}
		st := "ok"
		if a.Status != 0 {
			st = errnoName(a.Status)
		}
		return s + ":" + st + ">" + a.State.String()
	case journal.KindEvent:
		return fmt.Sprintf("%s:%d>%s", strings.TrimPrefix(a.Event.String(), "RDMA_CM_EVENT_"), a.Status, a.State)
	}
	return "cancel>" + a.State.String()
}

// ParseEpoch reads an epoch in the form Epoch.Text writes.
func ParseEpoch(s string) (Epoch, error) {
	e := Epoch{Slots: map[int]Items{}}
	s = strings.TrimSpace(s)
	if s == "-" {
		return e, nil
	}
	for s != "" {
		switch {
		case strings.HasPrefix(s, "?probe "):
			p, rest, _ := strings.Cut(s[len("?probe "):], " ")
			e.Probe, s = strings.ReplaceAll(p, "_", " "), strings.TrimSpace(rest)
			continue
		case strings.HasPrefix(s, "!busy"):
			e.Skip, s = skipBusy, strings.TrimSpace(s[len("!busy"):])
			continue
		case strings.HasPrefix(s, "!noid"):
			e.Skip, s = skipNoID, strings.TrimSpace(s[len("!noid"):])
			continue
		}
		open := strings.IndexByte(s, '[')
		end := strings.IndexByte(s, ']')
		if open < 0 || end < open || !strings.HasPrefix(s, "s") {
			return e, fmt.Errorf("bad slot in %q", s)
		}
		head := s[1:open]
		qp := id.RC
		if h, ok := strings.CutSuffix(head, "/UD"); ok {
			head, qp = h, id.UD
		}
		k, err := strconv.Atoi(head)
		if err != nil {
			return e, fmt.Errorf("bad slot %q", s[:open])
		}
		var is Items
		for _, f := range strings.Fields(s[open+1 : end]) {
			it, err := parseItem(f, qp)
			if err != nil {
				return e, err
			}
			is = append(is, it)
		}
		e.Slots[k] = is
		s = strings.TrimSpace(s[end+1:])
	}
	return e, nil
}

func parseItem(f string, qp id.QPType) (Item, error) {
	it := Item{QP: qp, Parent: -1}
	what, stName, ok := strings.Cut(f, ">")
	if !ok {
		return it, fmt.Errorf("bad item %q: no state", f)
	}
	st, ok := stateByName(stName)
	if !ok {
		return it, fmt.Errorf("bad item %q: state %q", f, stName)
	}
	it.State = st
	if what == "cancel" {
		it.Kind = journal.KindCancel
		return it, nil
	}
	name, status, ok := strings.Cut(what, ":")
	if !ok {
		return it, fmt.Errorf("bad item %q: no status", f)
	}
	if t, ok := eventByName(name); ok {
		it.Kind, it.Event = journal.KindEvent, t
		v, err := strconv.Atoi(status)
		if err != nil {
			return it, fmt.Errorf("bad item %q: status", f)
		}
		it.Status = int32(v)
		return it, nil
	}
	if n, ok := strings.CutSuffix(name, "(auto)"); ok {
		name, it.Auto = n, true
	}
	c, ok := callseq.CallByName(name)
	if !ok {
		return it, fmt.Errorf("bad item %q: no call or event %q", f, name)
	}
	it.Kind, it.Call = journal.KindCall, c
	if status != "ok" {
		e, ok := errnoByName(status)
		if !ok {
			return it, fmt.Errorf("bad item %q: errno %q", f, status)
		}
		it.Status = int32(e)
	}
	return it, nil
}

func stateByName(s string) (id.State, bool) {
	for st := id.StateIdle; st <= id.StateDestroyed; st++ {
		if st.String() == s {
			return st, true
		}
	}
	return 0, false
}

func eventByName(s string) (id.EventType, bool) {
	for t := id.EventAddrResolved; t <= id.EventAddrInfoError; t++ {
		if strings.TrimPrefix(t.String(), "RDMA_CM_EVENT_") == s {
			return t, true
		}
	}
	return 0, false
}

func errnoByName(s string) (syscall.Errno, bool) {
	for e, n := range errnoNames {
		if n == s {
			return e, true
		}
	}
	if v, ok := strings.CutPrefix(s, "errno"); ok {
		if n, err := strconv.Atoi(v); err == nil {
			return syscall.Errno(n), true
		}
	}
	return 0, false
}
