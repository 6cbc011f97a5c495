package journal

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/rs/zerolog"

	"github.com/cmrt/cmrt/fabric"
)

// RecordKind tells calls from events in a journal.
type RecordKind uint8

// Record kinds.
const (
	// KindCall records a CM call on an id.
	KindCall RecordKind = iota
	// KindEvent records an event reported for an id.
	KindEvent
	// KindCancel records a synchronous call abandoned by its context.
	KindCancel
)

// String returns "call", "event" or "cancel".
func (k RecordKind) String() string {
	switch k {
	case KindCall:
		return "call"
	case KindEvent:
		return "event"
	case KindCancel:
		return "cancel"
	}
	return fmt.Sprintf("RecordKind(%d)", uint8(k))
}

// Record is one journal entry: a call made on an id or an event reported
// for it, with the id's state afterwards. The package documentation
// describes the schema and its JSON form.
type Record struct {
	// Seq numbers records of one journal from 1, in the order they happened.
	Seq uint64
	// Time is when it happened, in nanoseconds since the Unix epoch: the
	// wall clock when the journal was made plus the monotonic time since,
	// so the times of one journal never go backwards and do not follow a
	// later step of the wall clock. Records added with one clock reading
	// (AddAt: a reactor reads the clock once per batch of events) share
	// it.
	Time int64
	// ID is the id's handle (id.ID.Handle).
	ID uint64
	// Parent is, for the CONNECT_REQUEST that created an id, the listener's
	// handle; on later calls of that id too; otherwise 0.
	Parent uint64
	// Channel is the number of the event channel the id reports to when the
	// record is made (id.ChannelNumber; a synchronous id's private channel has
	// one too). Only a successful migrate changes it.
	Channel uint64
	// Kind says whether this is a call or an event.
	Kind RecordKind
	// QPType is the id's QP type.
	QPType fabric.QPType
	// Call is the call (KindCall).
	Call Call
	// Event is the event type (KindEvent).
	Event fabric.EventType
	// Status is the event's status, or the failed call's errno (0 on success).
	Status int32
	// State is the id's state after the record.
	State State
}

// String formats the record on one line, for test failures and logs.
func (r *Record) String() string {
	var what string
	switch r.Kind {
	case KindCall:
		what = r.Call.String()
	case KindEvent:
		what = r.Event.String()
		if r.Event == fabric.EventUser {
			what = "USER"
		}
	default:
		what = r.Kind.String()
	}
	s := fmt.Sprintf("#%d id %d ch %d %s %s %s status %d -> %s", r.Seq, r.ID, r.Channel, r.QPType, r.Kind, what, r.Status, r.State)
	if r.Parent != 0 {
		s += fmt.Sprintf(" (parent %d)", r.Parent)
	}
	return s
}

// Filter selects records: see Journal.Select and Journal.ObserveFilter.
type Filter func(*Record) bool

// ByID selects the records of the id with this handle.
func ByID(handle uint64) Filter { return func(r *Record) bool { return r.ID == handle } }

// ByChannel selects the records made while their id reported to the
// channel with this number (id.ChannelNumber, id.ID.ChannelNumber).
func ByChannel(n uint64) Filter { return func(r *Record) bool { return r.Channel == n } }

// Journal records calls and events. It keeps the most recent records in a
// ring, calls observers synchronously for each new record, and writes
// records as JSON lines. It is safe for concurrent use.
//
// Adding a record takes no lock that other ids share: the record's
// sequence number comes from an atomic counter, and the record is stored
// in its slot of the ring under that slot's own spin lock, which only a
// reader copying that slot (or a writer a full ring ahead) can hold at the
// same time. Its time is read from the monotonic clock alone (see
// Record.Time), or given by the caller (AddAt: one reading for a batch of
// records).
type Journal struct {
	seq  atomic.Uint64
	last atomic.Int64 // the latest Time given to a record: AddAt never goes below it

	observers atomic.Pointer[[]*observer]
	obsMu     sync.Mutex

	ring []slot
	mask uint64 // len(ring)-1 when len(ring) is a power of two, else 0

	base     Stamp // when the journal was made
	baseWall int64 // base in nanoseconds since the Unix epoch
}

// Stamp is a reading of the journals' clock: the monotonic time since the
// package was initialized, in nanoseconds. Now reads it; AddAt turns it into
// a record's Time. A runtime that adds the records of a batch of events
// reads it once for the batch.
type Stamp int64

// epoch is the origin of Stamp.
var epoch = time.Now()

// Now reads the journals' clock (one monotonic clock reading).
func Now() Stamp { return Stamp(time.Since(epoch)) }

// slot is one record of the ring, with the spin lock that guards it: one
// cache line.
type slot struct {
	held atomic.Uint32
	rec  Record
}

func (s *slot) lock() {
	for !s.held.CompareAndSwap(0, 1) {
		runtime.Gosched()
	}
}

func (s *slot) unlock() { s.held.Store(0) }

type observer struct{ fn func(Record) }

// New returns a journal that keeps the last capacity records (at least
// 1). Its ring is allocated now: 64 bytes per record.
func New(capacity int) *Journal {
	if capacity < 1 {
		capacity = 1
	}
	t := time.Now()
	j := &Journal{ring: make([]slot, capacity), base: Stamp(t.Sub(epoch)), baseWall: t.UnixNano()}
	if capacity&(capacity-1) == 0 {
		j.mask = uint64(capacity - 1)
	}
	return j
}

// DefaultCapacity is how many records Default keeps: 65536, a ring of
// 4 MiB (64 bytes per record) allocated when Default is first called,
// which is when the first id without a journal of its own is created.
const DefaultCapacity = 1 << 16

var defaultJournal struct {
	once sync.Once
	j    *Journal
}

// Default returns the process-wide journal ids use unless they are given
// another (id.WithJournal). It keeps the last DefaultCapacity (65536)
// records: older ones are overwritten and no longer returned by Records,
// Select, RecordsOf or WriteJSON, though Len still counts them (and
// Dropped counts the overwritten). A process that needs every record
// observes them as they are made (Observe, ObserveJSON) or gives its ids a
// journal of its own size. Its ring is allocated on the first call, not
// when the package is initialized, so a program that gives every id its
// own journal never pays for it.
func Default() *Journal {
	defaultJournal.once.Do(func() { defaultJournal.j = New(DefaultCapacity) })
	return defaultJournal.j
}

// Cap returns how many records the journal keeps.
func (j *Journal) Cap() int { return len(j.ring) }

// slotOf returns the slot of sequence number seq (from 1).
func (j *Journal) slotOf(seq uint64) *slot {
	if j.mask != 0 || len(j.ring) == 1 {
		return &j.ring[(seq-1)&j.mask]
	}
	return &j.ring[(seq-1)%uint64(len(j.ring))]
}

// Add stamps r with the next sequence number and the time, stores it,
// calls the observers and returns the sequence number. It does not
// allocate, and takes no lock shared with other records. Package id adds a
// record for every call and event of an id; others may add records of
// their own (tests building journals do).
func (j *Journal) Add(r Record) uint64 { return j.AddAt(r, Now()) }

// AddAt is Add with the time read by the caller, earlier (Now): a runtime
// that takes a batch of events reads the clock once for the batch
// (package reactor does), which on this project's machines was a tenth of
// the CPU of an inline dispatch. The record's Time is at's, raised to the
// latest Time the journal has given a record, so that an early reading
// never makes the journal's times go backwards: records of one batch share
// a time, or take a later record's.
func (j *Journal) AddAt(r Record, at Stamp) uint64 {
	r.Time = j.time(at)
	r.Seq = j.seq.Add(1)
	s := j.slotOf(r.Seq)
	s.lock()
	if s.rec.Seq < r.Seq { // else a writer a full ring ahead got here first
		s.rec = r
	}
	s.unlock()
	if obs := j.observers.Load(); obs != nil {
		for _, o := range *obs {
			o.fn(r)
		}
	}
	return r.Seq
}

// AddEventAt is AddAt for the record of an event (Kind KindEvent, no
// Parent, no Call), its fields passed one by one: id (the id's handle),
// channel, the QP type, the event's type and status and the id's state
// after it. It is how package id journals the events a runtime delivers.
// The fields go straight into the record's slot: a Record built in the
// caller's frame with a store per field and then passed by value was
// copied twice in 16-byte loads, each spanning several of those stores,
// which the CPU cannot forward (a stall of some 10 cycles each; the
// profile put a tenth of an inline reactor dispatch's samples after them:
// BENCHMARKS.md, "What is slow and why", finding 31). Observers get the
// same Record as AddAt's.
func (j *Journal) AddEventAt(id, channel uint64, qp fabric.QPType, typ fabric.EventType, status int32, state State, at Stamp) uint64 {
	t := j.time(at)
	seq := j.seq.Add(1)
	s := j.slotOf(seq)
	s.lock()
	if w := &s.rec; w.Seq < seq { // else a writer a full ring ahead got here first
		w.Seq, w.Time, w.ID, w.Parent, w.Channel = seq, t, id, 0, channel
		w.Kind, w.QPType, w.Call, w.Event, w.Status, w.State = KindEvent, qp, 0, typ, status, state
	}
	s.unlock()
	if obs := j.observers.Load(); obs != nil {
		r := Record{Seq: seq, Time: t, ID: id, Channel: channel, Kind: KindEvent, QPType: qp, Event: typ, Status: status, State: state}
		for _, o := range *obs {
			o.fn(r)
		}
	}
	return seq
}

// time turns a clock reading into a record's Time, raised to the latest
// Time the journal has given a record (and raising that).
func (j *Journal) time(at Stamp) int64 {
	t := j.baseWall + int64(at-j.base)
	for {
		l := j.last.Load()
		if t <= l {
			return l
		}
		if j.last.CompareAndSwap(l, t) {
			return t
		}
	}
}

// Dropped returns how many records were overwritten: added, but no longer
// in the ring.
func (j *Journal) Dropped() uint64 {
	n, size := j.seq.Load(), uint64(len(j.ring))
	if n <= size {
		return 0
	}
	return n - size
}

// Observe calls fn synchronously, from the goroutine that made the record,
// for every new record until the returned stop function is called. fn must
// not block and must not call methods of ids: it runs with the id's lock
// held. Records of different ids may reach fn out of sequence order (sort
// by Seq); those of one id arrive in order.
func (j *Journal) Observe(fn func(Record)) (stop func()) {
	o := &observer{fn: fn}
	j.obsMu.Lock()
	defer j.obsMu.Unlock()
	var list []*observer
	if cur := j.observers.Load(); cur != nil {
		list = append(list, *cur...)
	}
	list = append(list, o)
	j.observers.Store(&list)
	return func() {
		j.obsMu.Lock()
		defer j.obsMu.Unlock()
		cur := j.observers.Load()
		if cur == nil {
			return
		}
		var next []*observer
		for _, x := range *cur {
			if x != o {
				next = append(next, x)
			}
		}
		j.observers.Store(&next)
	}
}

// ObserveFilter is Observe for the records f selects, e.g.
// j.ObserveFilter(journal.ByID(cm.Handle()), fn).
func (j *Journal) ObserveFilter(f Filter, fn func(Record)) (stop func()) {
	return j.Observe(func(r Record) {
		if f(&r) {
			fn(r)
		}
	})
}

// ObserveJSON writes every new record as a JSON line (the WriteJSON form)
// to w, through zerolog, until stop is called. Writes are serialized; w
// should be fast (a file, a buffer), as it is written to with the id's
// lock held.
func (j *Journal) ObserveJSON(w io.Writer) (stop func()) {
	var mu sync.Mutex
	log := zerolog.New(w)
	return j.Observe(func(r Record) {
		mu.Lock()
		r.log(log.Log())
		mu.Unlock()
	})
}

// Len returns how many records were ever added.
func (j *Journal) Len() uint64 { return j.seq.Load() }

// Records returns the records still in the ring, oldest first.
func (j *Journal) Records() []Record { return j.Select(nil) }

// Select returns the records still in the ring that f selects (all of
// them for a nil f), oldest first (by Seq). Each record is copied whole
// under its slot's lock. A record whose sequence number was taken but
// which is not yet stored is waited for, so the result has no gap. Select
// does not stop writers: records overwritten while it runs are left out,
// with those older than them, so under a flood of new records it returns
// a gapless run of recent ones, possibly shorter than the ring.
func (j *Journal) Select(f Filter) []Record {
	n := j.seq.Load()
	size := uint64(len(j.ring))
	start := uint64(0)
	if n > size {
		start = n - size
	}
	out := make([]Record, 0, n-start)
	for s := start; s < n; s++ {
		sl := j.slotOf(s + 1)
		for {
			sl.lock()
			r := sl.rec
			sl.unlock()
			if r.Seq > s+1 {
				// Overwritten meanwhile, and so is everything before it:
				// drop what was taken, to keep the result gapless.
				out = out[:0]
				break
			}
			if r.Seq == s+1 {
				if f == nil || f(&r) {
					out = append(out, r)
				}
				break
			}
			runtime.Gosched() // its writer is between the counter and the slot
		}
	}
	return out
}

// RecordsOf returns the records of the id with this handle still in the
// ring (j.RecordsOf(cm.Handle())), oldest first.
func (j *Journal) RecordsOf(handle uint64) []Record { return j.Select(ByID(handle)) }

// RecordsOfChannel returns the records still in the ring that were made
// while their id reported to the channel numbered n, oldest first.
func (j *Journal) RecordsOfChannel(n uint64) []Record { return j.Select(ByChannel(n)) }

// WriteJSON writes the records still in the ring as JSON lines through
// zerolog, one object per record.
func (j *Journal) WriteJSON(w io.Writer) error { return WriteRecordsJSON(w, j.Records()) }

// WriteRecordsJSON writes records as WriteJSON does: for a selection
// (Journal.Select) or what an observer collected.
func WriteRecordsJSON(w io.Writer, records []Record) error {
	bw := bufio.NewWriter(w)
	log := zerolog.New(bw)
	for i := range records {
		records[i].log(log.Log())
	}
	return bw.Flush()
}

// log writes the record's fields to e and sends it.
func (r *Record) log(e *zerolog.Event) {
	e = e.Uint64("seq", r.Seq).Int64("time", r.Time).Uint64("id", r.ID).
		Uint64("ch", r.Channel).Str("kind", r.Kind.String()).Str("qp", r.QPType.String())
	if r.Parent != 0 {
		e = e.Uint64("parent", r.Parent)
	}
	switch r.Kind {
	case KindCall:
		e = e.Str("call", r.Call.String())
	case KindEvent:
		e = e.Str("event", r.Event.String()).Int32("type", int32(r.Event))
	}
	e.Int32("status", r.Status).Str("state", r.State.String()).Send()
}

// jsonRecord is the JSON shape of a record, for ReadJSON.
type jsonRecord struct {
	Seq     uint64 `json:"seq"`
	Time    int64  `json:"time"`
	ID      uint64 `json:"id"`
	Channel uint64 `json:"ch"`
	Parent  uint64 `json:"parent"`
	Kind    string `json:"kind"`
	QP      string `json:"qp"`
	Call    string `json:"call"`
	Type    int32  `json:"type"`
	Status  int32  `json:"status"`
	State   string `json:"state"`
}

// ReadJSON reads records written by WriteJSON or ObserveJSON.
func ReadJSON(r io.Reader) ([]Record, error) {
	dec := json.NewDecoder(r)
	var out []Record
	for {
		var jr jsonRecord
		if err := dec.Decode(&jr); err == io.EOF {
			return out, nil
		} else if err != nil {
			return out, fmt.Errorf("cmrt: journal record %d: %w", len(out)+1, err)
		}
		rec := Record{Seq: jr.Seq, Time: jr.Time, ID: jr.ID, Parent: jr.Parent, Channel: jr.Channel, Status: jr.Status}
		switch jr.Kind {
		case "call":
			rec.Kind = KindCall
			c, ok := parseName(callNames[:], jr.Call)
			if !ok {
				return out, fmt.Errorf("cmrt: journal record %d: unknown call %q", len(out)+1, jr.Call)
			}
			rec.Call = Call(c)
		case "event":
			rec.Kind = KindEvent
			rec.Event = fabric.EventType(jr.Type)
		case "cancel":
			rec.Kind = KindCancel
		default:
			return out, fmt.Errorf("cmrt: journal record %d: unknown kind %q", len(out)+1, jr.Kind)
		}
		switch jr.QP {
		case fabric.RC.String():
			rec.QPType = fabric.RC
		case fabric.UD.String():
			rec.QPType = fabric.UD
		default:
			return out, fmt.Errorf("cmrt: journal record %d: unknown QP type %q", len(out)+1, jr.QP)
		}
		st, ok := parseName(stateNames[:], jr.State)
		if !ok {
			return out, fmt.Errorf("cmrt: journal record %d: unknown state %q", len(out)+1, jr.State)
		}
		rec.State = State(st)
		out = append(out, rec)
	}
}

func parseName(names []string, s string) (int, bool) {
	for i, n := range names {
		if n == s {
			return i, true
		}
	}
	return 0, false
}

// Replay folds records (in sequence order) into the state of each id, keyed
// by handle, starting every id from StateIdle. For a journal that holds an
// id's whole history the result equals the state the id reached.
func Replay(records []Record) map[uint64]State {
	states := make(map[uint64]State)
	for i := range records {
		r := &records[i]
		states[r.ID] = Apply(states[r.ID], r)
	}
	return states
}

// DivergenceError is ReplayCheck's report of the first record whose stored
// State differs from the fold of the records of its id before it.
type DivergenceError struct {
	// Record is the first diverging record.
	Record Record
	// Before is the fold of the id's records before it.
	Before State
	// Want is Apply(Before, &Record): the state the record should hold.
	Want State
}

// Error implements the error interface.
func (e *DivergenceError) Error() string {
	return fmt.Sprintf("cmrt: journal diverges at %s: from %s the fold gives %s", e.Record.String(), e.Before, e.Want)
}

// ReplayCheck is Replay in check mode: it also verifies that every
// record's stored State equals the fold, and returns the states reached
// before the first divergence with a *DivergenceError for it. Records must
// hold every id's whole history (see Check for partial journals and
// the other rules of the model).
func ReplayCheck(records []Record) (map[uint64]State, error) {
	states := make(map[uint64]State)
	for i := range records {
		r := &records[i]
		before := states[r.ID]
		want := Apply(before, r)
		if want != r.State {
			return states, &DivergenceError{Record: *r, Before: before, Want: want}
		}
		states[r.ID] = want
	}
	return states, nil
}

// ViolationKind classifies what Check finds.
type ViolationKind uint8

// What Check checks.
const (
	// IllegalEvent: an event the model (EventAllowed) does not allow in the
	// id's state, a CONNECT_REQUEST for a listener that is not listening, a
	// multicast event of an id that never joined, or a second TIMEWAIT_EXIT.
	IllegalEvent ViolationKind = iota + 1
	// IllegalCall: a call succeeded although CallAllowed says it is not
	// allowed in the id's state.
	IllegalCall
	// StateDiverged: a record's State differs from the fold of the id's
	// records before it (Apply).
	StateDiverged
	// AfterDestroy: an event, a successful call, or a call failing with
	// another errno than EINVAL, after the id's destroy.
	AfterDestroy
	// BadHistory: an id's first record is neither its create nor the
	// CONNECT_REQUEST that made it, an id is created twice, or two records
	// share a sequence number.
	BadHistory
	// ChannelChanged: an id's channel number changed without a successful
	// migrate.
	ChannelChanged
)

var violationNames = [...]string{"", "illegal event", "illegal call", "state diverged", "after destroy", "bad history", "channel changed"}

// String names the kind.
func (k ViolationKind) String() string {
	if int(k) < len(violationNames) && k != 0 {
		return violationNames[k]
	}
	return fmt.Sprintf("ViolationKind(%d)", uint8(k))
}

// Violation is one way a journal breaks the model.
type Violation struct {
	Kind ViolationKind
	// Record is the offending record.
	Record Record
	// Before is the fold of the id's records before it.
	Before State
	// Msg says what is wrong, in words.
	Msg string
}

// String formats the violation on one line.
func (v *Violation) String() string {
	return fmt.Sprintf("%s: %s (in %s): %s", v.Kind, v.Record.String(), v.Before, v.Msg)
}

// Error is Check's report: every violation, in sequence order.
type Error struct {
	Violations []Violation
}

// Error implements the error interface: the first violations and a count.
func (e *Error) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "cmrt: journal breaks the model in %d places", len(e.Violations))
	for k := range e.Violations {
		if k == 8 {
			b.WriteString("\n\t...")
			break
		}
		b.WriteString("\n\t")
		b.WriteString(e.Violations[k].String())
	}
	return b.String()
}

// Without returns the violations of the other kinds than these, as a
// *Error, or nil if none is left. Fuzzers that inject illegal events
// on purpose use e.Without(IllegalEvent).
func (e *Error) Without(kinds ...ViolationKind) error {
	var left []Violation
	for _, v := range e.Violations {
		if !slices.Contains(kinds, v.Kind) {
			left = append(left, v)
		}
	}
	if len(left) == 0 {
		return nil
	}
	return &Error{Violations: left}
}

// Check checks records (of one journal, in any order: they are sorted by
// Seq) against the model and returns an *Error listing every violation, or
// nil. Per id it folds the records (Apply) and flags:
//
//   - an event the model does not allow in the id's state (EventAllowed),
//     a CONNECT_REQUEST whose listener is not listening, a multicast event
//     before any successful join, a second TIMEWAIT_EXIT;
//   - a call that succeeded although CallAllowed says no;
//   - a record whose stored State differs from the fold;
//   - anything but a call failing with EINVAL after the id's destroy;
//   - a first record that is neither the id's create nor the
//     CONNECT_REQUEST that made it, a second create, a repeated Seq;
//   - a channel number that changes without a successful migrate.
//
// A journal whose ring dropped its oldest records (the first Seq is above
// 1) may begin in the middle of an id's history: such an id is then taken
// to be in the State its first record holds.
func Check(records []Record) error {
	if !slices.IsSortedFunc(records, cmpSeq) {
		records = slices.Clone(records)
		slices.SortStableFunc(records, cmpSeq)
	}
	truncated := len(records) > 0 && records[0].Seq > 1
	type idState struct {
		state    State
		channel  uint64
		joined   bool
		timewait bool
	}
	ids := make(map[uint64]*idState)
	var vs []Violation
	flag := func(k ViolationKind, r *Record, before State, format string, args ...any) {
		vs = append(vs, Violation{Kind: k, Record: *r, Before: before, Msg: fmt.Sprintf(format, args...)})
	}
	for i := range records {
		r := &records[i]
		if i > 0 && r.Seq == records[i-1].Seq {
			flag(BadHistory, r, StateIdle, "sequence number %d repeated", r.Seq)
		}
		st := ids[r.ID]
		born := (r.Kind == KindCall && r.Call == CallCreate && r.Status == 0) ||
			(r.Kind == KindEvent && r.Event == fabric.EventConnectRequest && r.Parent != 0)
		if st == nil {
			st = &idState{channel: r.Channel}
			ids[r.ID] = st
			if born {
				if r.Kind == KindEvent {
					if l := ids[r.Parent]; l != nil && l.state != StateListen {
						flag(IllegalEvent, r, l.state, "CONNECT_REQUEST for listener %d in state %s", r.Parent, l.state)
					}
				}
				st.state = Apply(StateIdle, r)
				if st.state != r.State {
					flag(StateDiverged, r, StateIdle, "stored %s, fold %s", r.State, st.state)
				}
				continue
			}
			if truncated {
				st.state = r.State // the id's history began before the ring's
				continue
			}
			flag(BadHistory, r, StateIdle, "first record of id %d is neither its create nor its CONNECT_REQUEST", r.ID)
		} else if born {
			flag(BadHistory, r, st.state, "id %d created twice", r.ID)
		}
		before := st.state
		switch r.Kind {
		case KindCall:
			switch {
			case before == StateDestroyed:
				if r.Status != int32(syscall.EINVAL) {
					flag(AfterDestroy, r, before, "call %s after destroy (status %d)", r.Call, r.Status)
				}
			case r.Status != 0 || born:
			case r.Call == CallGetRequest:
				if before != StateListen {
					flag(IllegalCall, r, before, "%s succeeded in state %s", r.Call, before)
				}
			default:
				if _, ok := CallAllowed(before, r.Call, r.QPType); !ok {
					flag(IllegalCall, r, before, "%s succeeded in state %s", r.Call, before)
				}
				if r.Call == CallJoin {
					st.joined = true
				}
			}
		case KindEvent:
			switch {
			case before == StateDestroyed:
				flag(AfterDestroy, r, before, "%s after destroy", r.Event)
			case !EventAllowed(before, r.Event, r.QPType):
				flag(IllegalEvent, r, before, "%s not allowed for a %s id in state %s", r.Event, r.QPType, before)
			case (r.Event == fabric.EventMulticastJoin || r.Event == fabric.EventMulticastError) && !st.joined:
				flag(IllegalEvent, r, before, "%s for an id that never joined a group", r.Event)
			case r.Event == fabric.EventTimewaitExit && st.timewait:
				flag(IllegalEvent, r, before, "second TIMEWAIT_EXIT")
			}
			if r.Event == fabric.EventTimewaitExit {
				st.timewait = true
			}
		case KindCancel:
			if before == StateDestroyed {
				flag(AfterDestroy, r, before, "cancel after destroy")
			}
		}
		if r.Channel != st.channel && !(r.Kind == KindCall && r.Call == CallMigrate && r.Status == 0) {
			flag(ChannelChanged, r, before, "channel %d, was %d, without a migrate", r.Channel, st.channel)
		}
		st.channel = r.Channel
		st.state = Apply(before, r)
		if st.state != r.State {
			flag(StateDiverged, r, before, "stored %s, fold %s", r.State, st.state)
			st.state = r.State // check what follows against what the id did
		}
	}
	if len(vs) == 0 {
		return nil
	}
	return &Error{Violations: vs}
}

func cmpSeq(a, b Record) int {
	switch {
	case a.Seq < b.Seq:
		return -1
	case a.Seq > b.Seq:
		return 1
	}
	return 0
}
