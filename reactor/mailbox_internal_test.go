package reactor

import (
	"context"
	"net/netip"
	"reflect"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/cmrt/cmrt/fabric"
	"github.com/cmrt/cmrt/id"
	"github.com/cmrt/cmrt/internal/handle"
	"github.com/cmrt/cmrt/internal/ring"
)

// fakeEndpoint is a comparable fabric.Endpoint whose methods are never
// called.
type fakeEndpoint struct {
	fabric.Endpoint
	n byte
}

// fillRaw sets every field of a raw event to a non-zero value derived from
// seed, through reflection, so that a field added to fabric.RawEvent is
// covered without editing the test.
func fillRaw(t *testing.T, seed byte) fabric.RawEvent {
	t.Helper()
	var r fabric.RawEvent
	var fill func(v reflect.Value, path string)
	fill = func(v reflect.Value, path string) {
		switch v.Kind() {
		case reflect.Struct:
			if v.Type() == reflect.TypeFor[netip.Addr]() {
				v.Set(reflect.ValueOf(netip.AddrFrom4([4]byte{10, 0, 0, seed})))
				return
			}
			for k := 0; k < v.NumField(); k++ {
				fill(v.Field(k), path+"."+v.Type().Field(k).Name)
			}
		case reflect.Array:
			for k := 0; k < v.Len(); k++ {
				fill(v.Index(k), path)
			}
		case reflect.Bool:
			v.SetBool(true)
		case reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
			v.SetUint(uint64(seed))
		case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
			v.SetInt(int64(seed))
		case reflect.Interface:
			if v.Type() == reflect.TypeFor[fabric.Endpoint]() {
				v.Set(reflect.ValueOf(fakeEndpoint{n: seed}))
				return
			}
			t.Fatalf("%s: interface %s: teach fillRaw", path, v.Type())
		default:
			t.Fatalf("%s: kind %s: teach fillRaw", path, v.Kind())
		}
	}
	fill(reflect.ValueOf(&r).Elem(), "RawEvent")
	r.PrivateDataLen = int(seed) % (len(r.PrivateData) + 1)
	return r
}

// TestCopyRawEveryField: a mailbox item's raw event is copied field by
// field (copying whole 560-byte items was a quarter of the pool's
// dispatch): every field, and the private data up to its length, whatever
// the destination held before.
func TestCopyRawEveryField(t *testing.T) {
	for _, seed := range []byte{1, 7, 255} {
		src := fillRaw(t, seed)
		dst := fillRaw(t, seed+1) // an earlier item's bytes
		want := src
		copy(want.PrivateData[want.PrivateDataLen:], dst.PrivateData[want.PrivateDataLen:])
		copyRaw(&dst, &src)
		if !reflect.DeepEqual(dst, want) {
			t.Fatalf("seed %d: copied %+v, want %+v", seed, dst, want)
		}
	}
}

// setClaim makes c claim an event of owner (id.Claim's fields are id's).
func setClaim(c *id.Claim, owner *id.ID) {
	f := reflect.ValueOf(c).Elem().FieldByName("owner")
	reflect.NewAt(f.Type(), unsafe.Pointer(f.UnsafeAddr())).Elem().Set(reflect.ValueOf(owner))
}

// livePointers returns the paths of the non-nil pointers v holds.
func livePointers(v reflect.Value, path string) []string {
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface, reflect.Slice, reflect.Map, reflect.Chan, reflect.Func, reflect.UnsafePointer:
		if !v.IsNil() {
			return []string{path}
		}
	case reflect.String:
		if v.Len() > 0 {
			return []string{path}
		}
	case reflect.Struct:
		var out []string
		for k := 0; k < v.NumField(); k++ {
			out = append(out, livePointers(v.Field(k), path+"."+v.Type().Field(k).Name)...)
		}
		return out
	case reflect.Array:
		var out []string
		for k := 0; k < v.Len(); k++ {
			out = append(out, livePointers(v.Index(k), path)...)
		}
		return out
	}
	return nil
}

// TestMailboxItemCopyAndClear: an item survives copyItem whatever its kind
// (claimed event with its raw event or brief, delivered event, work
// completion), and clearItem leaves no pointer in it, so that a mailbox's
// ring keeps nothing reachable.
func TestMailboxItemCopyAndClear(t *testing.T) {
	reg := &registration{h: nopHandler{}, src: fakeSource{}} // not a func: reflect.DeepEqual never equates two funcs
	owner := &id.ID{}
	claimed := item{reg: reg, at: 42, typ: 9, status: -9, arg: 99, slot: 3, kind: itemClaim, raw: fillRaw(t, 9)}
	setClaim(&claimed.claim, owner)
	brief := item{reg: reg, at: 43, typ: id.EventUser, status: -1, arg: 7, slot: 4, kind: itemBrief}
	setClaim(&brief.claim, owner)
	delivered := item{ev: &id.Event{}, reg: reg, slot: 5, kind: itemEvent}
	read := item{ev: &id.Event{}, reg: reg, kind: itemEvent, raw: fillRaw(t, 3)} // as the loop's batch holds it
	wc := item{reg: &registration{}, kind: itemWC, wc: id.WC{WRID: 7, Src: netip.MustParseAddrPort("10.0.0.1:4791")}}
	// The loop's batch item a delivered event was read into: clearItem
	// leaves no pointer in it either.
	clearItem(&read)
	if live := livePointers(reflect.ValueOf(read), "item"); len(live) > 0 {
		t.Fatalf("cleared batch item still holds %v", live)
	}
	for name, it := range map[string]item{"claimed": claimed, "brief": brief, "delivered": delivered, "completion": wc} {
		dst := item{kind: itemClaim, raw: fillRaw(t, 5)} // a slot an earlier item used
		clearItem(&dst)
		stale := dst.raw
		copyItem(&dst, &it)
		switch it.kind {
		case itemClaim:
			copy(it.raw.PrivateData[it.raw.PrivateDataLen:], stale.PrivateData[it.raw.PrivateDataLen:]) // past the length: not copied
		default:
			it.raw = stale // not copied: no kind but itemClaim reads it
		}
		if !reflect.DeepEqual(dst, it) {
			t.Fatalf("%s: copied %+v, want %+v", name, dst, it)
		}
		clearItem(&dst)
		if live := livePointers(reflect.ValueOf(dst), "item"); len(live) > 0 {
			t.Fatalf("%s: cleared item still holds %v", name, live)
		}
		if dst.claimed() || dst.reg != nil || dst.ev != nil || dst.kind != itemNone {
			t.Fatalf("%s: cleared item %+v is still an item", name, dst)
		}
	}
}

// TestItemHeadOneLine: what a brief claimed event needs is the item's
// first cache line, and items are whole lines, so that in a mailbox's ring
// (whose backing arrays are 64-byte aligned: size classes past 1 KiB are
// multiples of 64) a brief event writes one line on the worker's side.
func TestItemHeadOneLine(t *testing.T) {
	var it item
	if off := unsafe.Offsetof(it.raw); off != 64 {
		t.Errorf("the raw event starts at %d, want 64 (the head is one line)", off)
	}
	if n := unsafe.Sizeof(it); n%64 != 0 {
		t.Errorf("an item is %d bytes, not whole lines", n)
	}
	for _, f := range []uintptr{unsafe.Offsetof(it.ev), unsafe.Offsetof(it.reg), unsafe.Offsetof(it.claim), unsafe.Offsetof(it.at),
		unsafe.Offsetof(it.typ), unsafe.Offsetof(it.status), unsafe.Offsetof(it.arg), unsafe.Offsetof(it.slot), unsafe.Offsetof(it.kind)} {
		if f >= 64 {
			t.Errorf("a head field at offset %d", f)
		}
	}
}

// fakeSource is a comparable fabric.EventSource whose methods are never
// called.
type fakeSource struct{ fabric.EventSource }

type nopHandler struct{}

func (nopHandler) HandleEvent(*id.Event) error { return nil }

// TestIdleMailboxesKeptThenSwept: a mailbox a worker empties stays in the
// map for its key's next item (the same mailbox), until more than
// maxIdleMailboxes are idle: then the loop sweeps them out, and the spare
// ones it keeps hold no pointer (their slots are zeroed), while every
// item is still handled once, in order per key.
func TestIdleMailboxesKeptThenSwept(t *testing.T) {
	r, err := New(WithWorkers(2))
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := r.Close(context.Background()); err != nil {
			t.Error(err)
		}
	}()
	type key struct {
		reg  *registration
		last atomic.Uint64
	}
	var handled atomic.Int64
	var outOfOrder atomic.Int64
	keys := make([]*key, 3*maxIdleMailboxes)
	for k := range keys {
		kk := &key{}
		kk.reg = &registration{ch2: CompletionFunc(func(wc *id.WC) error {
			if wc.WRID != kk.last.Load()+1 {
				outOfOrder.Add(1)
			}
			kk.last.Store(wc.WRID)
			handled.Add(1)
			return nil
		})}
		keys[k] = kk
	}
	// post hands one completion per key in keys[from:to] to the mailboxes
	// as the loop would (the test stands in for the loop: nothing is
	// registered, so the real loop never touches the batch).
	post := func(from, to int, wrid uint64) {
		for _, kk := range keys[from:to] {
			it := r.nextItem()
			it.wc, it.reg, it.kind = id.WC{WRID: wrid}, kk.reg, itemWC
		}
		r.pending.Add(int64(to - from))
		r.enqueue()
	}
	settled := func(want int64) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for {
			r.mbMu.Lock()
			idle := r.running == 0 && r.runq.Len() == 0
			r.mbMu.Unlock()
			if idle && handled.Load() == want {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("handled %d of %d", handled.Load(), want)
			}
			time.Sleep(time.Millisecond)
		}
	}
	post(0, 10, 1)
	settled(10)
	r.mbMu.Lock()
	kept := r.mboxes.byCQ[keys[0].reg]
	idle := r.idleBoxes
	r.mbMu.Unlock()
	if kept == nil || idle != 10 {
		t.Fatalf("after its item, key 0's mailbox %p, %d idle; want it kept, 10 idle", kept, idle)
	}
	post(0, 1, 2)
	settled(11)
	r.mbMu.Lock()
	again := r.mboxes.byCQ[keys[0].reg]
	r.mbMu.Unlock()
	if again != kept {
		t.Fatalf("key 0's second item went to mailbox %p, want the idle one %p", again, kept)
	}
	// More idle mailboxes than kept: the loop sweeps them.
	for k := 10; k < len(keys); k += 50 {
		post(k, min(k+50, len(keys)), 1)
		settled(int64(k + 1 + min(50, len(keys)-k)))
	}
	post(1, maxIdleMailboxes+2, 2) // more than the bound go idle at once
	settled(int64(len(keys) + 2 + maxIdleMailboxes))
	post(0, 1, 3) // its enqueue sweeps them
	settled(int64(len(keys) + 3 + maxIdleMailboxes))
	r.mbMu.Lock()
	defer r.mbMu.Unlock()
	if r.idleBoxes > maxIdleMailboxes || len(r.mboxes.byCQ) > maxIdleMailboxes {
		t.Fatalf("%d idle mailboxes, %d in the map: never swept past %d", r.idleBoxes, len(r.mboxes.byCQ), maxIdleMailboxes)
	}
	if len(r.spare) == 0 || len(r.spare) > maxSpareMailboxes {
		t.Fatalf("%d spare mailboxes, want 1..%d", len(r.spare), maxSpareMailboxes)
	}
	for _, mb := range r.spare {
		for k := mb.items.Cap(); k > 0; k-- {
			it := mb.items.PushBack()
			if live := livePointers(reflect.ValueOf(*it), "item"); len(live) > 0 {
				t.Fatalf("a swept mailbox's slot holds %v", live)
			}
		}
		for mb.items.Discard() {
		}
	}
	if n := outOfOrder.Load(); n > 0 {
		t.Fatalf("%d items out of order", n)
	}
}

// TestRecentMailboxes: the entries in front of the map by uid slot index
// give an id's mailbox only when the mailbox's key is that id: two ids
// whose uids share an entry each get their own, a join's uid finds its
// owner's, and an entry left by a mailbox that was deleted or now serves
// another id gives nothing for the first.
func TestRecentMailboxes(t *testing.T) {
	m := mailboxes{byID: make(map[*id.ID]*mailbox), byCQ: make(map[*registration]*mailbox)}
	a, b := new(id.ID), new(id.ID)
	const ua, ub, join = 7, 7 + recentMailboxes, 7 + 5 // ua and ub share an entry
	slot := func(uid uint64) uint32 { return uint32(handle.Index(uid)) }
	if mb := m.get(mboxKey{id: a}, slot(ua)); mb != nil {
		t.Fatalf("empty: get = %p", mb)
	}
	mba, mbb := &mailbox{key: mboxKey{id: a}}, &mailbox{key: mboxKey{id: b}}
	m.set(mboxKey{id: a}, slot(ua), mba)
	m.set(mboxKey{id: b}, slot(ub), mbb) // takes the shared entry
	for _, c := range []struct {
		name string
		k    *id.ID
		uid  uint64
		want *mailbox
	}{
		{"a, entry b's", a, ua, mba},
		{"b", b, ub, mbb},
		{"a again, entry a's now", a, ua, mba},
		{"b through a's entry", b, ua, mbb},
		{"a's join", a, join, mba},
		{"a's join again", a, join, mba},
	} {
		if got := m.get(mboxKey{id: c.k}, slot(c.uid)); got != c.want {
			t.Errorf("%s: get = %p, want %p", c.name, got, c.want)
		}
	}
	// a's mailbox swept, then reused for b's: a's entry must not give it.
	m.del(mba.key)
	mba.key = mboxKey{}
	delete(m.byID, b)
	mba.key = mboxKey{id: b}
	m.set(mboxKey{id: b}, slot(ub), mba)
	if got := m.get(mboxKey{id: a}, slot(ua)); got != nil {
		t.Fatalf("a after its mailbox went to b: get = %p, want nil", got)
	}
	if got := m.get(mboxKey{id: a}, slot(join)); got != nil {
		t.Fatalf("a's join after its mailbox went to b: get = %p, want nil", got)
	}
	if got := m.get(mboxKey{id: b}, slot(ub)); got != mba {
		t.Fatalf("b: get = %p, want %p", got, mba)
	}
	m.forgetRecent()
	for k, e := range m.recent {
		if e != nil {
			t.Fatalf("forgetRecent left entry %d", k)
		}
	}
}

// TestWorkerTakesSeveralMailboxes: a worker takes items from the run
// queue's mailboxes in order, up to workerBatch, moving on to the next
// mailbox only after a quick batch and while at least one per worker is
// left behind for the others; once it has run them, a mailbox with items
// left goes to the back of the run queue, still scheduled, and an emptied
// one goes idle.
func TestWorkerTakesSeveralMailboxes(t *testing.T) {
	const workers = 4
	r, err := New(WithWorkers(workers))
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := r.Close(context.Background()); err != nil {
			t.Error(err)
		}
	}()
	// box makes a scheduled mailbox with n completion items, WRIDs
	// base+1..base+n, queued on the run queue (the test stands in for the
	// loop; nothing is registered, so no worker starts).
	box := func(base, n int) *mailbox {
		mb := &mailbox{items: ring.New[item](4, 0), scheduled: true, key: mboxKey{reg: &registration{}}}
		for k := 1; k <= n; k++ {
			it := mb.items.PushBack()
			it.kind, it.reg, it.wc = itemWC, mb.key.reg, id.WC{WRID: uint64(base + k)}
		}
		r.runq.Push(mb)
		return mb
	}
	cases := []struct {
		name      string
		boxes     []int // items per mailbox, in run-queue order
		many      bool
		wantBoxes int
		wantItems int
	}{
		{"one item each, ten mailboxes: three left for the others", []int{1, 1, 1, 1, 1, 1, 1, 1, 1, 1}, true, 7, 7},
		{"the last batch slow: one mailbox", []int{1, 1, 1, 1, 1, 1, 1, 1, 1, 1}, false, 1, 1},
		{"as many mailboxes as workers: one taken", []int{1, 1, 1, 1}, true, 1, 1},
		{"one long mailbox: a batch of it", []int{20}, true, 1, workerBatch},
		{"one long mailbox, the last batch slow: a batch of it", []int{20}, false, 1, workerBatch},
		{"a long one first, then short ones", []int{10, 1, 1, 1, 1, 1}, true, 3, 12},
		{"the batch fills in the middle of a mailbox", []int{1, 1, 30, 1, 1, 1, 1, 1}, true, 3, workerBatch},
		{"empty run queue", nil, true, 0, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r.mbMu.Lock()
			defer r.mbMu.Unlock()
			for _, ok := r.runq.Pop(); ok; _, ok = r.runq.Pop() { // what a failed case left
			}
			var mbs []*mailbox
			for k, n := range c.boxes {
				mbs = append(mbs, box(100*k, n))
			}
			var buf [workerBatch]item
			var held [workerBatch]*mailbox
			h, n := r.takeLocked(&buf, &held, c.many)
			if h != c.wantBoxes || n != c.wantItems {
				t.Fatalf("took %d items of %d mailboxes, want %d of %d", n, h, c.wantItems, c.wantBoxes)
			}
			// In run-queue order, each mailbox's items in its order.
			k := 0
			for b := 0; b < h; b++ {
				if held[b] != mbs[b] {
					t.Fatalf("held[%d] is not the run queue's mailbox %d", b, b)
				}
				for j := 1; j <= c.boxes[b] && k < n; j, k = j+1, k+1 {
					if got, want := buf[k].wc.WRID, uint64(100*b+j); got != want {
						t.Fatalf("item %d: WRID %d, want %d", k, got, want)
					}
				}
			}
			idle := r.idleBoxes
			r.releaseLocked(held[:h])
			var back []*mailbox // the run queue after the release, in order
			for mb, ok := r.runq.Pop(); ok; mb, ok = r.runq.Pop() {
				back = append(back, mb)
			}
			wantBack := append([]*mailbox(nil), mbs[h:]...) // not taken: first, as they were
			wantIdle := 0
			for _, mb := range mbs[:h] {
				if mb.items.Len() > 0 {
					wantBack = append(wantBack, mb)
				} else {
					wantIdle++
					if mb.scheduled {
						t.Fatal("an emptied mailbox stays scheduled")
					}
				}
			}
			if !reflect.DeepEqual(back, wantBack) {
				t.Fatalf("run queue after the release: %d mailboxes, want %d in order", len(back), len(wantBack))
			}
			for _, mb := range back {
				if !mb.scheduled {
					t.Fatal("a mailbox with items left is not scheduled")
				}
			}
			if r.idleBoxes-idle != wantIdle {
				t.Fatalf("%d mailboxes went idle, want %d", r.idleBoxes-idle, wantIdle)
			}
			for _, mb := range held[:h] {
				if mb != nil {
					t.Fatal("releaseLocked left a held mailbox listed")
				}
			}
		})
	}
}
