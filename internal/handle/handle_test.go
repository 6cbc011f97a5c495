package handle

import (
	"errors"
	"sync"
	"syscall"
	"testing"

	"pgregory.net/rapid"
)

type obj struct{ n int }

func TestAllocLoadFree(t *testing.T) {
	var tb Table[obj]
	a, b := &obj{1}, &obj{2}
	ua, err := tb.Alloc(a)
	if err != nil || ua == 0 {
		t.Fatalf("Alloc = %d, %v", ua, err)
	}
	ub, _ := tb.Alloc(b)
	if tb.Load(ua) != a || tb.Load(ub) != b || tb.Live() != 2 {
		t.Fatal("Load after Alloc")
	}
	if Index(ua) == Index(ub) {
		t.Fatal("two live uids share a slot")
	}
	if !tb.Free(ua) || tb.Free(ua) || tb.Load(ua) != nil || tb.Live() != 1 {
		t.Fatal("Free")
	}
	// The slot is reused under a new generation: the stale uid stays dead.
	c := &obj{3}
	uc, _ := tb.Alloc(c)
	if Index(uc) != Index(ua) || uc == ua {
		t.Fatalf("reuse: uid %#x after %#x", uc, ua)
	}
	if tb.Load(ua) != nil || tb.Load(uc) != c {
		t.Fatal("a stale uid reached the slot's new object")
	}
	if tb.Load(0) != nil || tb.Load(1<<60|12345) != nil || tb.Free(0) {
		t.Fatal("unknown uids")
	}
	seen := map[uint64]*obj{}
	tb.Range(func(uid uint64, p *obj) bool { seen[uid] = p; return true })
	if len(seen) != 2 || seen[ub] != b || seen[uc] != c {
		t.Fatalf("Range saw %v", seen)
	}
}

// TestRetiredSlotNeverRepeatsAUid: a slot whose generation is exhausted is
// not reused.
func TestRetiredSlotNeverRepeatsAUid(t *testing.T) {
	var tb Table[obj]
	u, _ := tb.Alloc(&obj{})
	tb.at(uint32(Index(u))).gen.Store(maxGen)
	tb.Free(u)
	u2, _ := tb.Alloc(&obj{})
	if Index(u2) == Index(u) {
		t.Fatal("retired slot reused")
	}
	u3, _ := tb.Alloc(&obj{})
	if Index(u3) == Index(u) {
		t.Fatal("retired slot reused")
	}
}

func TestFull(t *testing.T) {
	var tb Table[obj]
	tb.top.Store(maxSlots - 1)
	u, err := tb.Alloc(&obj{})
	if err != nil || Index(u) != maxSlots-1 {
		t.Fatalf("last slot: %#x %v", u, err)
	}
	if _, err := tb.Alloc(&obj{}); !errors.Is(err, syscall.ENOMEM) {
		t.Fatalf("Alloc of a full table = %v", err)
	}
	tb.Free(u)
	if u2, err := tb.Alloc(&obj{}); err != nil || Index(u2) != maxSlots-1 {
		t.Fatalf("after a free: %#x %v", u2, err)
	}
}

// TestConcurrent: goroutines allocate, look up and free at once; a uid
// always resolves to its own object while live and never afterwards, and
// no uid is issued twice.
func TestConcurrent(t *testing.T) {
	var tb Table[obj]
	var mu sync.Mutex
	issued := map[uint64]bool{}
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine []uint64
			var objs []*obj
			for k := 0; k < 2000; k++ {
				o := &obj{k}
				u, err := tb.Alloc(o)
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				dup := issued[u]
				issued[u] = true
				mu.Unlock()
				if dup {
					t.Errorf("uid %#x issued twice", u)
				}
				mine, objs = append(mine, u), append(objs, o)
				if k%3 == 2 {
					for j, u := range mine {
						if tb.Load(u) != objs[j] {
							t.Errorf("uid %#x resolved elsewhere", u)
						}
						tb.Free(u)
						if tb.Load(u) != nil {
							t.Errorf("freed uid %#x resolves", u)
						}
					}
					mine, objs = mine[:0], objs[:0]
				}
			}
			for _, u := range mine {
				tb.Free(u)
			}
		}()
	}
	wg.Wait()
	if tb.Live() != 0 {
		t.Fatalf("%d live after everything was freed", tb.Live())
	}
}

// TestModel checks the table against a map, stale uids included.
func TestModel(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		var tb Table[obj]
		live := map[uint64]*obj{}
		var dead []uint64
		t.Repeat(map[string]func(*rapid.T){
			"alloc": func(t *rapid.T) {
				o := &obj{}
				u, err := tb.Alloc(o)
				if err != nil || live[u] != nil {
					t.Fatalf("alloc %#x %v", u, err)
				}
				for _, d := range dead {
					if d == u {
						t.Fatalf("uid %#x reissued", u)
					}
				}
				live[u] = o
			},
			"free": func(t *rapid.T) {
				if len(live) == 0 {
					return
				}
				var us []uint64
				for u := range live {
					us = append(us, u)
				}
				u := rapid.SampledFrom(us).Draw(t, "uid")
				if !tb.Free(u) {
					t.Fatalf("free of live %#x failed", u)
				}
				delete(live, u)
				dead = append(dead, u)
			},
			"": func(t *rapid.T) {
				if tb.Live() != len(live) {
					t.Fatalf("live %d, model %d", tb.Live(), len(live))
				}
				for u, o := range live {
					if tb.Load(u) != o {
						t.Fatalf("load %#x", u)
					}
				}
				for _, u := range dead {
					if tb.Load(u) != nil || tb.Free(u) {
						t.Fatalf("dead uid %#x alive", u)
					}
				}
			},
		})
	})
}

// BenchmarkLoad turns uids back into objects from every P at once: the
// table, against the mutex-guarded map that id used before it (impl=map).
func BenchmarkLoad(b *testing.B) {
	b.Run("impl=table", func(b *testing.B) {
		var tb Table[obj]
		uids := make([]uint64, 1024)
		for k := range uids {
			uids[k], _ = tb.Alloc(&obj{k})
		}
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			k := 0
			for pb.Next() {
				if tb.Load(uids[k&1023]) == nil {
					b.Fatal("miss")
				}
				k++
			}
		})
	})
	b.Run("impl=map", func(b *testing.B) {
		var mu sync.Mutex
		m := make(map[uint64]*obj)
		for k := 1; k <= 1024; k++ {
			m[uint64(k)] = &obj{k}
		}
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			k := 0
			for pb.Next() {
				mu.Lock()
				p := m[uint64(k&1023+1)]
				mu.Unlock()
				if p == nil {
					b.Fatal("miss")
				}
				k++
			}
		})
	})
}

// TestLoadOfIndexZero: a uid whose index part is 0 (uid 0, or any
// generation of it) is never issued, and Load of it is nil. Load wraps
// its slot number to the last chunk's last slot (numbered maxSlots), which
// Alloc never hands out: this test allocates that chunk and fills the
// slot below, where a wrong wrap would land.
func TestLoadOfIndexZero(t *testing.T) {
	var tb Table[obj]
	below := tb.at(maxSlots - 1)
	o := &obj{7}
	for _, gen := range []uint64{0, 1, 2, 1<<(64-IndexBits) - 1} {
		uid := gen<<IndexBits | maxSlots // slot maxSlots-1's uid of that generation
		below.uid.Store(uid)
		below.p.Store(o)
		if got := tb.Load(uid); got != o {
			t.Fatalf("Load(%#x) = %v, want the object of slot %d", uid, got, maxSlots-1)
		}
		if got := tb.Load(gen << IndexBits); got != nil {
			t.Fatalf("Load(%#x) (index part 0) = %v, want nil", gen<<IndexBits, got)
		}
	}
	if last := tb.lookup(maxSlots - 1); last != below {
		t.Fatal("lookup disagrees with at")
	}
}
