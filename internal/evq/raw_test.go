package evq

import (
	"context"
	"net/netip"
	"reflect"
	"testing"

	"github.com/cmrt/cmrt/fabric"
)

// testEndpoint is a comparable, non-nil fabric.Endpoint whose methods are
// never called.
type testEndpoint struct {
	fabric.Endpoint
	n byte
}

// setLeaf sets a leaf field of a raw event to a non-zero value derived
// from seed; it reports false for a kind it does not know.
func setLeaf(v reflect.Value, seed byte) bool {
	switch {
	case v.Type() == reflect.TypeFor[netip.Addr]():
		v.Set(reflect.ValueOf(netip.AddrFrom4([4]byte{239, 0, 0, seed})))
	case v.Type() == reflect.TypeFor[fabric.Endpoint]():
		v.Set(reflect.ValueOf(testEndpoint{n: seed}))
	case v.Kind() == reflect.Array:
		for k := 0; k < v.Len(); k++ {
			if !setLeaf(v.Index(k), seed) {
				return false
			}
		}
	case v.CanUint():
		v.SetUint(uint64(seed))
	case v.CanInt():
		v.SetInt(int64(seed))
	default:
		return false
	}
	return true
}

// leaves calls f for every leaf field of a raw event (structs other than
// netip.Addr are walked into), with its path.
func leaves(v reflect.Value, path string, f func(reflect.Value, string)) {
	for k := 0; k < v.NumField(); k++ {
		fv, p := v.Field(k), path+"."+v.Type().Field(k).Name
		if fv.Kind() == reflect.Struct && fv.Type() != reflect.TypeFor[netip.Addr]() {
			leaves(fv, p, f)
			continue
		}
		f(fv, p)
	}
}

// TestParamsEveryField: Copy and Move carry every field of a raw event,
// Brief sees every parameter, each set in turn through reflection, so that
// a field added to fabric.RawEvent fails here until both Copy and Brief
// name it (the queue's pop, a reactor's mailbox items and id.Brief use
// them).
func TestParamsEveryField(t *testing.T) {
	n := 0
	leaves(reflect.ValueOf(&fabric.RawEvent{}).Elem(), "RawEvent", func(_ reflect.Value, p string) {
		if p == "RawEvent.PrivateData" {
			return
		}
		n++
		var src fabric.RawEvent
		src.PrivateData[len(src.PrivateData)-1] = 1 // past the length: neither copied nor a parameter
		var dst fabric.RawEvent
		f := reflect.ValueOf(&src).Elem().FieldByIndex(fieldIndex(t, p))
		if !setLeaf(f, 5) {
			t.Fatalf("%s: kind %s: teach setLeaf", p, f.Kind())
		}
		want := src
		want.PrivateData[len(want.PrivateData)-1] = 0
		Copy(&dst, &src)
		if dst != want {
			t.Errorf("Copy with %s set: got %+v, want %+v", p, dst, want)
		}
		var moved fabric.RawEvent
		slot := src
		Move(&moved, &slot)
		if moved != want {
			t.Errorf("Move with %s set: got %+v, want %+v", p, moved, want)
		}
		carried := p == "RawEvent.UID" || p == "RawEvent.Type" || p == "RawEvent.Status" || p == "RawEvent.Arg"
		if got := Brief(&src); got != carried {
			t.Errorf("Brief with %s set = %v, want %v", p, got, carried)
		}
	})
	if n < 20 {
		t.Fatalf("only %d fields walked", n)
	}
}

// fieldIndex returns the index path of a leaf named "RawEvent.A.B".
func fieldIndex(t *testing.T, p string) []int {
	t.Helper()
	typ := reflect.TypeFor[fabric.RawEvent]()
	var idx []int
	name := p[len("RawEvent."):]
	for name != "" {
		part := name
		rest := ""
		for k := 0; k < len(name); k++ {
			if name[k] == '.' {
				part, rest = name[:k], name[k+1:]
				break
			}
		}
		f, ok := typ.FieldByName(part)
		if !ok {
			t.Fatalf("no field %s", p)
		}
		idx = append(idx, f.Index...)
		typ, name = f.Type, rest
	}
	return idx
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
	}
	return nil
}

// TestMoveClearsPointersOnly: Move leaves no pointer in the slot it moved
// from (so a queue keeps nothing reachable), copies the private data only
// up to its length (the destination keeps its own bytes past it) and
// leaves the slot's private data unwritten.
func TestMoveClearsPointersOnly(t *testing.T) {
	var slot fabric.RawEvent
	leaves(reflect.ValueOf(&slot).Elem(), "RawEvent", func(v reflect.Value, p string) {
		if !setLeaf(v, 9) {
			t.Fatalf("%s: teach setLeaf", p)
		}
	})
	slot.PrivateDataLen = 3
	before := slot
	var dst fabric.RawEvent
	for k := range dst.PrivateData {
		dst.PrivateData[k] = 0xee
	}
	Move(&dst, &slot)
	if lp := livePointers(reflect.ValueOf(slot), "slot"); len(lp) > 0 {
		t.Fatalf("Move left pointers in the slot: %v", lp)
	}
	if slot.PrivateData != before.PrivateData || slot.UID != before.UID || slot.AH != before.AH {
		t.Fatalf("Move wrote the slot's other bytes")
	}
	want := before
	copy(want.PrivateData[3:], dst.PrivateData[3:])
	if dst != want {
		t.Fatalf("moved %+v, want %+v", dst, want)
	}
	if dst.PrivateData[3] != 0xee {
		t.Fatalf("private data past the length copied: %#x", dst.PrivateData[3])
	}
}

// TestPopMovesAndReusesSlots: events pushed after earlier ones were popped
// (slots holding stale bytes) pop exactly as pushed, up to their private
// data's length, through Pop and PopN, and a closed queue hands back what
// was left whole.
func TestPopMovesAndReusesSlots(t *testing.T) {
	q, _ := New()
	defer q.Close()
	mk := func(k int) *fabric.RawEvent {
		r := &fabric.RawEvent{UID: uint64(k + 1), Type: fabric.EventType(k % 7), Status: int32(-k), Arg: uint64(k * 3)}
		if k%3 == 0 {
			r.SetPrivateData([]byte{byte(k), 1, 2, byte(k)})
		}
		if k%4 == 0 {
			r.Group = netip.AddrFrom4([4]byte{239, 1, 1, byte(k)})
			r.Child = testEndpoint{n: byte(k)}
		}
		return r
	}
	same := func(got, want *fabric.RawEvent) bool {
		g, w := *got, *want
		g.PrivateData, w.PrivateData = [fabric.MaxEventPrivateData]byte{}, [fabric.MaxEventPrivateData]byte{}
		return g == w && string(got.PrivateData[:got.PrivateDataLen]) == string(want.PrivateData[:want.PrivateDataLen])
	}
	var out fabric.RawEvent
	outs := make([]fabric.RawEvent, 3)
	for round := 0; round < 5; round++ {
		for k := 0; k < 7; k++ {
			if err := q.Push(mk(round*7 + k)); err != nil {
				t.Fatal(err)
			}
		}
		for k := 0; k < 4; k++ {
			if err := q.Pop(context.Background(), false, &out); err != nil {
				t.Fatal(err)
			}
			if want := mk(round*7 + k); !same(&out, want) {
				t.Fatalf("round %d pop %d: got %+v, want %+v", round, k, out, *want)
			}
		}
		if n := q.PopN(outs); n != 3 {
			t.Fatalf("PopN = %d", n)
		}
		for k := range outs {
			if want := mk(round*7 + 4 + k); !same(&outs[k], want) {
				t.Fatalf("round %d PopN %d: got %+v, want %+v", round, k, outs[k], *want)
			}
		}
	}
	_ = q.Push(mk(99))
	rest := q.Close()
	if len(rest) != 1 || rest[0] != *mk(99) {
		t.Fatalf("Close left %+v", rest)
	}
}

func BenchmarkCopy(b *testing.B) {
	var src, dst fabric.RawEvent
	src.UID, src.Type, src.Arg = 1, fabric.EventUser, 3
	for b.Loop() {
		Copy(&dst, &src)
	}
}

func BenchmarkBrief(b *testing.B) {
	var src fabric.RawEvent
	src.UID, src.Type, src.Arg = 1, fabric.EventUser, 3
	n := 0
	for b.Loop() {
		if Brief(&src) {
			n++
		}
	}
	if n == 0 {
		b.Fatal("not brief")
	}
}

func BenchmarkWholeCopy(b *testing.B) {
	var src, dst fabric.RawEvent
	src.UID, src.Type, src.Arg = 1, fabric.EventUser, 3
	for b.Loop() {
		dst = src
	}
	_ = dst
}
