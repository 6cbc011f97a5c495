package id

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
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
// for it, with the id's state afterwards.
type Record struct {
	// Seq numbers records of one journal from 1, in the order they happened.
	Seq uint64
	// Time is when it happened, in nanoseconds since the Unix epoch.
	Time int64
	// ID is the id's handle (ID.Handle).
	ID uint64
	// Parent is, for the CONNECT_REQUEST that created an id, the listener's
	// handle; otherwise 0.
	Parent uint64
	// Kind says whether this is a call or an event.
	Kind RecordKind
	// QPType is the id's QP type.
	QPType QPType
	// Call is the call (KindCall).
	Call Call
	// Event is the event type (KindEvent).
	Event EventType
	// Status is the event's status, or the failed call's errno (0 on success).
	Status int32
	// State is the id's state after the record.
	State State
}

// Journal records calls and events. It keeps the most recent records in a
// ring, calls observers synchronously for each new record, and writes
// records as JSON lines. It is safe for concurrent use.
type Journal struct {
	seq       atomic.Uint64
	observers atomic.Pointer[[]*observer]
	obsMu     sync.Mutex

	mu   sync.Mutex
	ring []Record
}

type observer struct{ fn func(Record) }

// NewJournal returns a journal that keeps the last capacity records
// (at least 1).
func NewJournal(capacity int) *Journal {
	if capacity < 1 {
		capacity = 1
	}
	return &Journal{ring: make([]Record, capacity)}
}

var defaultJournal = NewJournal(1 << 16)

// DefaultJournal returns the process-wide journal ids use unless they are
// given another.
func DefaultJournal() *Journal { return defaultJournal }

// add stamps r with a sequence number and time, stores it, calls the
// observers and returns the sequence number. It does not allocate.
func (j *Journal) add(r Record) uint64 {
	r.Time = time.Now().UnixNano()
	j.mu.Lock()
	r.Seq = j.seq.Add(1)
	j.ring[(r.Seq-1)%uint64(len(j.ring))] = r
	j.mu.Unlock()
	if obs := j.observers.Load(); obs != nil {
		for _, o := range *obs {
			o.fn(r)
		}
	}
	return r.Seq
}

// Observe calls fn synchronously, from the goroutine that made the record,
// for every new record until the returned stop function is called. fn must
// not block.
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

// Len returns how many records were ever added.
func (j *Journal) Len() uint64 { return j.seq.Load() }

// Records returns the records still in the ring, oldest first.
func (j *Journal) Records() []Record {
	j.mu.Lock()
	defer j.mu.Unlock()
	n := j.seq.Load()
	size := uint64(len(j.ring))
	start := uint64(0)
	if n > size {
		start = n - size
	}
	out := make([]Record, 0, n-start)
	for s := start; s < n; s++ {
		out = append(out, j.ring[s%size])
	}
	return out
}

// WriteJSON writes the records still in the ring as JSON lines through
// zerolog, one object per record.
func (j *Journal) WriteJSON(w io.Writer) error {
	bw := bufio.NewWriter(w)
	log := zerolog.New(bw)
	for _, r := range j.Records() {
		r.log(log.Log())
	}
	return bw.Flush()
}

// log writes the record's fields to e and sends it.
func (r *Record) log(e *zerolog.Event) {
	e = e.Uint64("seq", r.Seq).Int64("time", r.Time).Uint64("id", r.ID).
		Str("kind", r.Kind.String()).Str("qp", r.QPType.String())
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
	Seq    uint64 `json:"seq"`
	Time   int64  `json:"time"`
	ID     uint64 `json:"id"`
	Parent uint64 `json:"parent"`
	Kind   string `json:"kind"`
	QP     string `json:"qp"`
	Call   string `json:"call"`
	Type   int32  `json:"type"`
	Status int32  `json:"status"`
	State  string `json:"state"`
}

// ReadJSON reads records written by WriteJSON.
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
		rec := Record{Seq: jr.Seq, Time: jr.Time, ID: jr.ID, Parent: jr.Parent, Event: EventType(jr.Type), Status: jr.Status}
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
		case "cancel":
			rec.Kind = KindCancel
		default:
			return out, fmt.Errorf("cmrt: journal record %d: unknown kind %q", len(out)+1, jr.Kind)
		}
		rec.QPType = RC
		if jr.QP == "UD" {
			rec.QPType = UD
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
