package ring

import (
	"slices"
	"testing"

	"pgregory.net/rapid"
)

func TestRingTable(t *testing.T) {
	for _, tc := range []struct {
		name      string
		size, max int
		push      int
		wantFull  bool
		wantCap   int
	}{
		{"zero value grows", 0, 0, 9, false, 16},
		{"presized", 8, 0, 8, false, 8},
		{"bounded stops at max", 0, 5, 7, true, 5},
		{"size capped by max", 10, 3, 3, true, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := New[int](tc.size, tc.max)
			pushed := 0
			for k := 0; k < tc.push; k++ {
				if r.Push(k) {
					pushed++
				}
			}
			if r.Full() != tc.wantFull || r.Cap() != tc.wantCap {
				t.Fatalf("full %v cap %d, want %v %d", r.Full(), r.Cap(), tc.wantFull, tc.wantCap)
			}
			if tc.max > 0 && r.PushBack() != nil {
				t.Fatal("PushBack on a full ring returned a slot")
			}
			for k := 0; k < pushed; k++ {
				if v, ok := r.Pop(); !ok || v != k {
					t.Fatalf("pop %d = %d %v", k, v, ok)
				}
			}
			if _, ok := r.Pop(); ok || r.Front() != nil || r.PopFront() {
				t.Fatal("empty ring popped")
			}
		})
	}
}

// TestPopClearsSlots: a popped or filtered-out entry does not keep what it
// points to reachable from the buffer.
func TestPopClearsSlots(t *testing.T) {
	var r Ring[*int]
	for k := 0; k < 4; k++ {
		v := k
		r.Push(&v)
	}
	r.Pop()
	r.Filter(func(p **int) bool { return **p != 2 }, nil)
	live := 0
	for _, p := range r.buf {
		if p != nil {
			live++
		}
	}
	if live != r.Len() || r.Len() != 2 {
		t.Fatalf("%d pointers in the buffer for %d entries", live, r.Len())
	}
}

// TestRingModel drives a ring with random operations and checks it against
// a slice.
func TestRingModel(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		max := rapid.SampledFrom([]int{0, 1, 3, 7}).Draw(t, "max")
		r := New[int](rapid.IntRange(0, 9).Draw(t, "size"), max)
		var model []int
		next := 0
		t.Repeat(map[string]func(*rapid.T){
			"push": func(t *rapid.T) {
				ok := r.Push(next)
				if want := max == 0 || len(model) < max; ok != want {
					t.Fatalf("push = %v with %d of max %d", ok, len(model), max)
				}
				if ok {
					model = append(model, next)
				}
				next++
			},
			"pop": func(t *rapid.T) {
				v, ok := r.Pop()
				if ok != (len(model) > 0) {
					t.Fatalf("pop ok = %v with %d entries", ok, len(model))
				}
				if ok {
					if v != model[0] {
						t.Fatalf("pop = %d, want %d", v, model[0])
					}
					model = model[1:]
				}
			},
			"filter": func(t *rapid.T) {
				m := rapid.IntRange(2, 4).Draw(t, "mod")
				var gone []int
				n := r.Filter(func(v *int) bool { return *v%m != 0 }, func(v *int) { gone = append(gone, *v) })
				var want []int
				model = slices.DeleteFunc(model, func(v int) bool {
					if v%m == 0 {
						want = append(want, v)
						return true
					}
					return false
				})
				if n != len(want) || !slices.Equal(gone, want) {
					t.Fatalf("filter removed %v, want %v", gone, want)
				}
			},
			"clear": func(t *rapid.T) {
				if rapid.IntRange(0, 9).Draw(t, "rare") == 0 {
					r.Clear()
					model = model[:0]
				}
			},
			"": func(t *rapid.T) {
				if r.Len() != len(model) {
					t.Fatalf("len %d, model %d", r.Len(), len(model))
				}
				for k := range model {
					if *r.At(k) != model[k] {
						t.Fatalf("at %d = %d, model %d", k, *r.At(k), model[k])
					}
				}
				if max > 0 && r.Cap() > max {
					t.Fatalf("cap %d beyond max %d", r.Cap(), max)
				}
			},
		})
	})
}

type big struct {
	a    [47]uint64
	uid  uint64
	next *big
}

func BenchmarkRingPushPop(b *testing.B) {
	var r Ring[big]
	var out big
	b.ReportAllocs()
	for k := 0; k < b.N; k++ {
		p := r.PushBack()
		p.uid = uint64(k)
		if k%8 == 7 {
			for r.PopInto(&out) {
			}
		}
	}
}

// TestDiscard: Discard removes the oldest entry, leaves its slot as it was
// (the caller cleared it), keeps the order of the rest, and reports false
// on an empty ring.
func TestDiscard(t *testing.T) {
	r := New[int](2, 0)
	if r.Discard() {
		t.Fatal("Discard of an empty ring reported true")
	}
	for v := 1; v <= 3; v++ { // wraps and grows
		r.Push(v)
	}
	if !r.Discard() || r.Len() != 2 || *r.Front() != 2 {
		t.Fatalf("after Discard: len %d, front %v", r.Len(), r.Front())
	}
	r.Push(4)
	var got []int
	for v, ok := r.Pop(); ok; v, ok = r.Pop() {
		got = append(got, v)
	}
	if len(got) != 3 || got[0] != 2 || got[1] != 3 || got[2] != 4 {
		t.Fatalf("order after Discard: %v", got)
	}
	r.Push(5)
	if !r.Discard() || r.Discard() || r.Len() != 0 {
		t.Fatalf("len %d after discarding the only entry", r.Len())
	}
}
