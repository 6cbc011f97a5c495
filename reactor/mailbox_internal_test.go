package reactor

import (
	"net/netip"
	"reflect"
	"testing"
	"unsafe"

	"github.com/cmrt/cmrt/fabric"
	"github.com/cmrt/cmrt/id"
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
	claimed := item{reg: reg, at: 42, typ: 9, status: -9, arg: 99, kind: itemClaim, raw: fillRaw(t, 9)}
	setClaim(&claimed.claim, owner)
	brief := item{reg: reg, at: 43, typ: id.EventUser, status: -1, arg: 7, kind: itemBrief}
	setClaim(&brief.claim, owner)
	delivered := item{ev: &id.Event{}, reg: reg, kind: itemEvent}
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
		unsafe.Offsetof(it.typ), unsafe.Offsetof(it.status), unsafe.Offsetof(it.arg), unsafe.Offsetof(it.kind)} {
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
