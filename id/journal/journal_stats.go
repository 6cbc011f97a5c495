package journal

import (
	"sync/atomic"

	"github.com/cmrt/cmrt/fabric"
)

// tallySlots is how many different (kind, call or event, status) keys a
// Tally counts; the records of further keys are counted as Uncounted.
// There are 25 calls and 18 events, most seen with one or two statuses.
const tallySlots = 512

// tallyStripes is how many copies of the counts a Tally keeps: a record is
// counted in the stripe of its id, so that ids on different goroutines
// seldom write the same cache line.
const tallyStripes = 8

// TallyKey is what a Tally counts records by.
type TallyKey struct {
	// Kind is the record's kind.
	Kind RecordKind
	// Call is the call, for KindCall records.
	Call Call
	// Event is the event type, for KindEvent records.
	Event fabric.EventType
	// Status is the event's status, or the call's errno (0: success).
	Status int32
}

func (k TallyKey) pack() uint64 {
	what := uint64(0)
	switch k.Kind {
	case KindCall:
		what = uint64(k.Call)
	case KindEvent:
		what = uint64(uint16(k.Event))
	}
	return uint64(k.Kind)<<56 | what<<32 | uint64(uint32(k.Status))
}

func unpack(p uint64) TallyKey {
	k := TallyKey{Kind: RecordKind(p >> 56), Status: int32(uint32(p))}
	what := uint16(p >> 32)
	switch k.Kind {
	case KindCall:
		k.Call = Call(what)
	case KindEvent:
		k.Event = fabric.EventType(int16(what))
	}
	return k
}

// Tally counts a journal's records by kind, call or event, and status, as
// they are added: calls by call and errno, events by type and status, and
// cancels. Counting a record takes no lock and allocates nothing: a lookup
// in a fixed open-addressing table whose keys are claimed once with a
// compare-and-swap, and an atomic add in one of several stripes. Reading
// the counts (Each) sums the stripes. Make one with Journal.Tally.
type Tally struct {
	keys      [tallySlots]atomic.Uint64 // a key packed, plus one; 0 is a free slot
	stripes   [tallyStripes]tallyStripe
	uncounted atomic.Uint64
	stop      func()
}

type tallyStripe struct {
	n [tallySlots]atomic.Uint64
}

// Tally starts counting the records added to j from now on (records added
// before are not counted) and returns the counts; Stop ends it. It
// observes the journal (Observe), so the count of a record is made by the
// goroutine that adds it, with the id's lock held. A Tally is about 36 KiB.
func (j *Journal) Tally() *Tally {
	t := new(Tally)
	t.stop = j.Observe(t.count)
	return t
}

// Stop stops counting; the counts stay readable. It is idempotent.
func (t *Tally) Stop() {
	if t.stop != nil {
		t.stop()
	}
}

// count counts one record.
func (t *Tally) count(r Record) {
	key := TallyKey{Kind: r.Kind, Call: r.Call, Event: r.Event, Status: r.Status}.pack() + 1
	h := (key * 0x9E3779B97F4A7C15) >> (64 - 9) // 9 bits: tallySlots
	for probe := uint64(0); probe < tallySlots; probe++ {
		s := (h + probe) % tallySlots
		k := t.keys[s].Load()
		if k == 0 && (t.keys[s].CompareAndSwap(0, key) || t.keys[s].Load() == key) {
			k = key
		}
		if k == key {
			t.stripes[r.ID%tallyStripes].n[s].Add(1)
			return
		}
	}
	t.uncounted.Add(1)
}

// Each calls f for every key counted so far with its count, in no
// particular order.
func (t *Tally) Each(f func(k TallyKey, n uint64)) {
	for s := range t.keys {
		k := t.keys[s].Load()
		if k == 0 {
			continue
		}
		var n uint64
		for st := range t.stripes {
			n += t.stripes[st].n[s].Load()
		}
		f(unpack(k-1), n)
	}
}

// Count returns the count of one key (of its Call for a call, of its
// Event for an event).
func (t *Tally) Count(k TallyKey) uint64 {
	k = unpack(k.pack())
	var n uint64
	t.Each(func(x TallyKey, c uint64) {
		if x == k {
			n = c
		}
	})
	return n
}

// Uncounted returns how many records found no room in the table: records
// of more different keys than a Tally holds (512).
func (t *Tally) Uncounted() uint64 { return t.uncounted.Load() }
