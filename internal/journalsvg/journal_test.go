package journalsvg

import (
	"github.com/cmrt/cmrt/id"
	"github.com/cmrt/cmrt/id/journal"
)

// builder makes journals for the tests: records in order, one
// microsecond apart, each with the state the model folds to (journal.Apply)
// unless a test sets another.
type builder struct {
	recs  []journal.Record
	state map[uint64]id.State
	next  uint64 // next handle
}

// t0 is the tests' journals' first time: 2026-01-02 03:04:05 UTC.
const t0 = int64(1767323045) * 1e9

func newBuilder() *builder { return &builder{state: map[uint64]id.State{}, next: 1} }

func (b *builder) add(r journal.Record) *journal.Record {
	if r.QPType == 0 {
		r.QPType = id.RC
	}
	r.Seq = uint64(len(b.recs) + 1)
	r.Time = t0 + int64(len(b.recs))*1000
	r.State = journal.Apply(b.state[r.ID], &r)
	b.state[r.ID] = r.State
	b.recs = append(b.recs, r)
	return &b.recs[len(b.recs)-1]
}

func (b *builder) handle() uint64 { b.next++; return b.next - 1 }

func (b *builder) call(h, ch, parent uint64, c journal.Call, status int32) *journal.Record {
	return b.add(journal.Record{ID: h, Channel: ch, Parent: parent, Kind: journal.KindCall, Call: c, Status: status})
}

func (b *builder) event(h, ch, parent uint64, e id.EventType, status int32) *journal.Record {
	return b.add(journal.Record{ID: h, Channel: ch, Parent: parent, Kind: journal.KindEvent, Event: e, Status: status})
}

// listener creates a listening id on channel ch.
func (b *builder) listener(ch uint64) uint64 {
	l := b.handle()
	b.call(l, ch, 0, journal.CallCreate, 0)
	b.call(l, ch, 0, journal.CallBind, 0)
	b.call(l, ch, 0, journal.CallListen, 0)
	return l
}

// cycle is one connection from a client id on channel cch to listener l
// on channel lch, accepted (or rejected), then disconnected by the
// client, and both ids destroyed: 15 records accepted, 11 rejected.
func (b *builder) cycle(l, lch, cch uint64, reject bool) (client, child uint64) {
	c := b.handle()
	b.call(c, cch, 0, journal.CallCreate, 0)
	b.call(c, cch, 0, journal.CallResolveAddr, 0)
	b.event(c, cch, 0, id.EventAddrResolved, 0)
	b.call(c, cch, 0, journal.CallResolveRoute, 0)
	b.event(c, cch, 0, id.EventRouteResolved, 0)
	b.call(c, cch, 0, journal.CallConnect, 0)
	s := b.handle()
	b.event(s, lch, l, id.EventConnectRequest, 0)
	if reject {
		b.call(s, lch, l, journal.CallReject, 0)
		b.event(c, cch, 0, id.EventRejected, -104)
		b.call(s, lch, l, journal.CallDestroy, 0)
		b.call(c, cch, 0, journal.CallDestroy, 0)
		return c, s
	}
	b.call(s, lch, l, journal.CallAccept, 0)
	b.event(s, lch, l, id.EventEstablished, 0)
	b.event(c, cch, 0, id.EventEstablished, 0)
	b.call(c, cch, 0, journal.CallDisconnect, 0)
	b.event(c, cch, 0, id.EventDisconnected, 0)
	b.event(s, lch, l, id.EventDisconnected, 0)
	b.call(s, lch, l, journal.CallDestroy, 0)
	b.call(c, cch, 0, journal.CallDestroy, 0)
	return c, s
}

// cycles is a listener on channel 1 and n connections from clients on
// channel 2, the last one rejected, everything destroyed at the end.
func cycles(n int) []journal.Record {
	b := newBuilder()
	l := b.listener(1)
	for k := 0; k < n; k++ {
		b.cycle(l, 1, 2, k == n-1)
	}
	b.call(l, 1, 0, journal.CallDestroy, 0)
	return b.recs
}
