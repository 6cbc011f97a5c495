package id_test

import (
	"bytes"
	"context"
	"errors"
	"net/netip"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cmrt/cmrt/channel"
	"github.com/cmrt/cmrt/fabric"
	"github.com/cmrt/cmrt/id"
	"github.com/cmrt/cmrt/id/journal"
	"github.com/cmrt/cmrt/internal/fakefab"
)

// collect returns a journal and a function returning every record it got,
// sorted by Seq (observers may see records of different ids out of order).
func collect(t *testing.T) (*journal.Journal, func() []journal.Record) {
	t.Helper()
	j := journal.New(1 << 12)
	var mu sync.Mutex
	var all []journal.Record
	stop := j.Observe(func(r journal.Record) { mu.Lock(); all = append(all, r); mu.Unlock() })
	t.Cleanup(stop)
	return j, func() []journal.Record {
		mu.Lock()
		defer mu.Unlock()
		out := append([]journal.Record(nil), all...)
		for k := 1; k < len(out); k++ { // insertion sort: nearly sorted
			for m := k; m > 0 && out[m].Seq < out[m-1].Seq; m-- {
				out[m], out[m-1] = out[m-1], out[m]
			}
		}
		return out
	}
}

func mustCheck(t *testing.T, recs []journal.Record) {
	t.Helper()
	if err := journal.Check(recs); err != nil {
		t.Fatal(err)
	}
	if _, err := journal.ReplayCheck(recs); err != nil {
		t.Fatal(err)
	}
}

func TestJournalChannelNumbers(t *testing.T) {
	j, all := collect(t)
	f := fakefab.New("fake", true)
	ch1, ch2 := newChan(t, f), newChan(t, f)
	a := newID(t, ch1, id.PSTCP, id.WithJournal(j))
	b := newID(t, ch1, id.PSTCP, id.WithJournal(j))
	c := newID(t, ch2, id.PSTCP, id.WithJournal(j))
	s, err := id.Create(nil, nil, id.PSTCP, id.WithFabric(f), id.WithJournal(j))
	if err != nil {
		t.Fatal(err)
	}
	n1, n2 := id.ChannelNumber(ch1), id.ChannelNumber(ch2)
	if n1 == 0 || n2 == 0 || n1 == n2 || a.ChannelNumber() != n1 || b.ChannelNumber() != n1 || c.ChannelNumber() != n2 {
		t.Fatalf("channel numbers: ch1 %d ch2 %d ids %d %d %d", n1, n2, a.ChannelNumber(), b.ChannelNumber(), c.ChannelNumber())
	}
	ns := s.ChannelNumber()
	if ns == 0 || ns == n1 || ns == n2 {
		t.Fatalf("sync id's private channel number %d", ns)
	}
	// Stable: a channel keeps its number once its ids are gone.
	_ = a.Destroy()
	_ = b.Destroy()
	d := newID(t, ch1, id.PSTCP, id.WithJournal(j))
	if d.ChannelNumber() != n1 || id.ChannelNumber(ch1) != n1 {
		t.Fatalf("ch1 renumbered: %d", d.ChannelNumber())
	}
	// Migrate changes it; to nil, the new private channel's.
	if err := d.Migrate(ch2); err != nil {
		t.Fatal(err)
	}
	if d.ChannelNumber() != n2 {
		t.Fatalf("after migrate: %d, want %d", d.ChannelNumber(), n2)
	}
	if err := d.Migrate(nil); err != nil {
		t.Fatal(err)
	}
	if nd := d.ChannelNumber(); nd == n2 || nd == ns || nd == 0 {
		t.Fatalf("after migrate to nil: %d", nd)
	}
	for _, r := range j.RecordsOfChannel(n1) {
		if r.ID != a.Handle() && r.ID != b.Handle() && r.ID != d.Handle() {
			t.Fatalf("record of id %d on ch1: %s", r.ID, r.String())
		}
	}
	recsD := j.RecordsOf(d.Handle())
	if len(recsD) != 3 || recsD[0].Channel != n1 || recsD[1].Channel != n2 || recsD[1].Call != journal.CallMigrate {
		t.Fatalf("d's records: %v", recsD)
	}
	_ = c.Destroy()
	_ = d.Destroy()
	_ = s.Destroy()
	mustCheck(t, all())
	if id.ChannelNumber(nil) != 0 {
		t.Fatal("nil channel has a number")
	}
}

func TestJournalSyncListenerChildMigrates(t *testing.T) {
	j, all := collect(t)
	f := fakefab.New("fake", true)
	l, err := id.Create(nil, nil, id.PSTCP, id.WithFabric(f), id.WithJournal(j))
	if err != nil {
		t.Fatal(err)
	}
	_ = l.Listen(0)
	l.Endpoint().(*fakefab.Endpoint).InjectRequest(nil)
	child, err := l.GetRequest()
	if err != nil {
		t.Fatal(err)
	}
	recs := j.RecordsOf(child.Handle())
	if len(recs) != 2 || recs[0].Event != id.EventConnectRequest || recs[0].Parent != l.Handle() ||
		recs[0].Channel != l.ChannelNumber() || recs[1].Call != journal.CallMigrate || recs[1].Channel != child.ChannelNumber() ||
		child.ChannelNumber() == l.ChannelNumber() {
		t.Fatalf("child records %v", recs)
	}
	if err := child.Accept(nil); err != nil {
		t.Fatal(err)
	}
	_ = child.Destroy()
	_ = l.Destroy()
	mustCheck(t, all())
}

func TestJournalFiltersAndJSON(t *testing.T) {
	j, all := collect(t)
	f := fakefab.New("fake", true)
	ch := newChan(t, f)
	var mu sync.Mutex
	var mine []journal.Record
	a := newID(t, ch, id.PSTCP, id.WithJournal(j))
	stop := j.ObserveFilter(journal.ByID(a.Handle()), func(r journal.Record) { mu.Lock(); mine = append(mine, r); mu.Unlock() })
	var live bytes.Buffer
	stopJSON := j.ObserveJSON(&live)
	b := newID(t, ch, id.PSUDP, id.WithJournal(j))
	_ = a.ResolveAddr(anyAddr, dst, time.Second)
	_ = expect(t, ch, id.EventAddrResolved, a).Ack()
	_ = b.Bind(netip.MustParseAddrPort("127.0.0.1:0"))
	_ = a.Destroy()
	_ = b.Destroy()
	stop()
	stopJSON()
	if len(mine) != 3 || mine[0].Call != journal.CallResolveAddr || mine[1].Event != id.EventAddrResolved || mine[2].Call != journal.CallDestroy {
		t.Fatalf("filtered observer got %v", mine)
	}
	recs := all()
	mustCheck(t, recs)
	var buf bytes.Buffer
	if err := j.WriteJSON(&buf); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), `"ch":`) {
		t.Fatalf("no channel in JSON:\n%s", buf.String())
	}
	for _, src := range []*bytes.Buffer{&buf, &live} {
		back, err := journal.ReadJSON(src)
		if err != nil {
			t.Fatal(err)
		}
		if len(back) < len(recs)-1 { // the live stream starts after a's create
			t.Fatalf("%d records back, want %d", len(back), len(recs))
		}
		for _, r := range back {
			if r != recs[r.Seq-1] {
				t.Fatalf("JSON changed a record:\n%s\n%s", r.String(), recs[r.Seq-1].String())
			}
		}
	}
	for _, bad := range []string{`{"kind":"bogus","qp":"RC"}`, `{"kind":"call","call":"nope","qp":"RC"}`,
		`{"kind":"event","qp":"XX","state":"IDLE"}`, `{"kind":"event","qp":"RC","state":"NOPE"}`, `{`} {
		if _, err := journal.ReadJSON(strings.NewReader(bad)); err == nil {
			t.Fatalf("ReadJSON accepted %s", bad)
		}
	}
}

// hookChannel wraps a channel so that a hook runs between the fabric
// handing out an event and the id layer mapping it to its id.
type hookChannel struct {
	*channel.Channel
	hook func()
}

type hookSource struct {
	fabric.EventSource
	hook func()
}

func (h hookChannel) Source() fabric.EventSource {
	return hookSource{EventSource: h.Channel.Source(), hook: h.hook}
}

func (h hookSource) Next(ctx context.Context, block bool, ev *fabric.RawEvent) error {
	err := h.EventSource.Next(ctx, block, ev)
	if err == nil && h.hook != nil {
		h.hook()
	}
	return err
}

// TestEventOfIDDestroyedDuringDeliveryIsDropped: an event the fabric had
// already handed out when the id was destroyed used to be reported (and
// journaled after the destroy); it is dropped, as the kernel drops events
// of destroyed ids.
func TestEventOfIDDestroyedDuringDeliveryIsDropped(t *testing.T) {
	j, all := collect(t)
	f := fakefab.New("fake", false)
	ch := newChan(t, f)
	var victim *id.ID
	hc := hookChannel{Channel: ch}
	hc.hook = func() {
		if victim != nil {
			if hung, _ := blocks(func() { _ = victim.Destroy() }, 2*time.Second); hung {
				t.Error("Destroy waited for an event not yet reported")
			}
		}
	}
	victim = newID(t, hc, id.PSTCP, id.WithJournal(j))
	other := newID(t, hc, id.PSTCP, id.WithJournal(j))
	ep(victim).Inject(id.EventUser, 0, nil)
	ep(other).Inject(id.EventUser, 0, nil)
	ev, err := id.NextEvent(context.Background(), hc.Source(), false)
	victim = nil
	if err != nil || ev.ID != other {
		t.Fatalf("got %v %v, want the other id's event", ev, err)
	}
	_ = ev.Ack()
	_ = other.Destroy()
	mustCheck(t, all())
	// The same for a listener destroyed while its request is delivered.
	l := newID(t, hc, id.PSTCP, id.WithJournal(j))
	_ = l.Listen(0)
	childEP := ep(l).InjectRequest(nil)
	victim = l
	if _, err := id.NextEvent(context.Background(), hc.Source(), false); !errors.Is(err, syscall.EAGAIN) {
		t.Fatalf("request of a destroyed listener delivered: %v", err)
	}
	victim = nil
	if !childEP.Destroyed() || id.Live() != 0 {
		t.Fatalf("orphan request: endpoint destroyed %v, %d ids live", childEP.Destroyed(), id.Live())
	}
	mustCheck(t, all())
}

// TestRequestForNonListenerIsRejected: a fabric reporting a
// CONNECT_REQUEST to an id that does not listen gets its new endpoint
// rejected, as the kernel answers such a request with ECONNABORTED.
func TestRequestForNonListenerIsRejected(t *testing.T) {
	f := fakefab.New("fake", false)
	ch := newChan(t, f)
	cm := newID(t, ch, id.PSTCP)
	child := ep(cm).InjectRequest(nil)
	ch.SetNonblocking(true)
	if _, err := ch.GetEvent(); !errors.Is(err, syscall.EAGAIN) {
		t.Fatalf("request for a non-listener delivered: %v", err)
	}
	if got := child.Calls(); len(got) != 2 || got[0] != "reject" || got[1] != "destroy" {
		t.Fatalf("calls %v", got)
	}
	_ = cm.Destroy()
}

// TestEventSeqIsTheJournalSeq: every delivered event, CONNECT_REQUEST
// included, carries the sequence number of its journal record.
func TestEventSeqIsTheJournalSeq(t *testing.T) {
	j, _ := collect(t)
	f := fakefab.New("fake", false)
	ch := newChan(t, f)
	l := newID(t, ch, id.PSTCP, id.WithJournal(j))
	defer l.Destroy()
	_ = l.Listen(0)
	ep(l).InjectRequest(nil)
	ep(l).Inject(id.EventUser, 0, nil)
	for _, want := range []id.EventType{id.EventConnectRequest, id.EventUser} {
		ev := expect(t, ch, want, nil)
		recs := j.RecordsOf(ev.ID.Handle())
		last := recs[len(recs)-1]
		if ev.Seq == 0 || ev.Seq != last.Seq || last.Event != want {
			t.Errorf("%s: event seq %d, record %s", want, ev.Seq, last.String())
		}
		if want == id.EventConnectRequest {
			defer ev.ID.Destroy()
		}
		_ = ev.Ack()
	}
}

// journal.Default keeps DefaultCapacity records; a journal keeps its
// last Cap records and counts them all.
func TestJournalCapacity(t *testing.T) {
	if journal.DefaultCapacity != 65536 {
		t.Fatalf("journal.DefaultCapacity %d, documented as 65536", journal.DefaultCapacity)
	}
	if got := journal.Default().Cap(); got != journal.DefaultCapacity {
		t.Fatalf("journal.Default().Cap() = %d, want %d", got, journal.DefaultCapacity)
	}
	if got := journal.New(0).Cap(); got != 1 {
		t.Fatalf("journal.New(0).Cap() = %d, want 1", got)
	}
	j := journal.New(3)
	ch := newChan(t, fakefab.New("fake", true))
	a := newID(t, ch, id.PSTCP, id.WithJournal(j))
	for range 4 {
		_ = a.Listen(0) // the first succeeds; each is a record either way
	}
	_ = a.Destroy()
	recs := j.Records()
	if j.Len() < 5 || len(recs) != 3 || recs[2].Seq != j.Len() || recs[0].Seq != j.Len()-2 {
		t.Fatalf("Len %d, records %v: want the last 3", j.Len(), recs)
	}
}
