package evq

import (
	"fmt"
	"net/netip"
	"reflect"
	"testing"
	"unsafe"

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

// TestParamsEveryField: Copy carries every field of a raw event,
// Brief sees every parameter, each set in turn through reflection, so that
// a field added to fabric.RawEvent fails here until both Copy and Brief
// name it (a reactor's mailbox items and id.Brief use them).
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

// TestAHZeroEveryBit: ahZero, Brief's test of the address handle by
// masked words, sees every bit of every field of fabric.AHAttr, set one at
// a time through reflection, and nothing in its padding.
func TestAHZeroEveryBit(t *testing.T) {
	if !ahZero(&fabric.AHAttr{}) {
		t.Fatal("zero AH not zero")
	}
	n := 0
	var walk func(v reflect.Value, path string)
	walk = func(v reflect.Value, path string) {
		switch v.Kind() {
		case reflect.Struct:
			for k := 0; k < v.NumField(); k++ {
				walk(v.Field(k), path+"."+v.Type().Field(k).Name)
			}
		case reflect.Array:
			for k := 0; k < v.Len(); k++ {
				walk(v.Index(k), fmt.Sprintf("%s[%d]", path, k))
			}
		default:
			for bit := 0; bit < v.Type().Bits(); bit++ {
				v.SetUint(1 << bit)
				n++
				if ahZero(&probe) {
					t.Errorf("%s bit %d set: ahZero true", path, bit)
				}
				r := fabric.RawEvent{AH: probe}
				if Brief(&r) {
					t.Errorf("%s bit %d set: Brief true", path, bit)
				}
				v.SetUint(0)
			}
		}
	}
	walk(reflect.ValueOf(&probe).Elem(), "AHAttr")
	if n < 8*int(unsafe.Sizeof(fabric.AHAttr{}))-16 {
		t.Fatalf("only %d bits walked", n)
	}
	// The padding: bytes no field covers, set directly, do not count.
	covered := make([]bool, ahSize)
	ty := reflect.TypeFor[fabric.AHAttr]()
	for k := 0; k < ty.NumField(); k++ {
		f := ty.Field(k)
		for b := f.Offset; b < f.Offset+f.Type.Size(); b++ {
			covered[b] = true
		}
	}
	for b, c := range covered {
		if c {
			continue
		}
		var a fabric.AHAttr
		(*[ahSize]byte)(unsafe.Pointer(&a))[b] = 0xff
		if !ahZero(&a) {
			t.Errorf("padding byte %d counted", b)
		}
	}
}

// probe is TestAHZeroEveryBit's AH (addressable, for reflection).
var probe fabric.AHAttr

// TestMoveEveryField: the queue's pop moves every field (and the whole
// private data) out, clears the pointers the slot held and writes nothing
// else of it, each field set in turn through reflection.
func TestMoveEveryField(t *testing.T) {
	n := 0
	leaves(reflect.ValueOf(&fabric.RawEvent{}).Elem(), "RawEvent", func(_ reflect.Value, p string) {
		n++
		var src fabric.RawEvent
		src.PrivateData[len(src.PrivateData)-1] = 3 // past the length: moved too
		f := reflect.ValueOf(&src).Elem().FieldByIndex(fieldIndex(t, p))
		if !setLeaf(f, 5) {
			t.Fatalf("%s: kind %s: teach setLeaf", p, f.Kind())
		}
		slot := src
		dst := fabric.RawEvent{UID: 99, Child: testEndpoint{n: 1}, PrivateDataLen: 7} // an earlier event's
		Move(&dst, &slot)
		if dst != src {
			t.Errorf("Move with %s set: got %+v, want %+v", p, dst, src)
		}
		want := src
		want.Child, want.Group = nil, netip.Addr{}
		if slot != want {
			t.Errorf("Move with %s set left the slot %+v, want %+v (its pointers cleared, nothing else written)", p, slot, want)
		}
	})
	if n < 21 {
		t.Fatalf("only %d fields walked", n)
	}
}
