package evloop

import (
	"math/rand/v2"
	"testing"

	"github.com/cmrt/cmrt/poll"
)

// TestHandleTable: a report reaches the handler attached for its
// descriptor and generation, and nothing else: not a stale generation,
// not a descriptor forgotten or unregistered, not one never attached
// (below or beyond the highest attached); a descriptor attached again
// gets its new handler; Range lists the attached ones only.
func TestHandleTable(t *testing.T) {
	var got []int
	l, err := New(func(h int, _ uint32) { got = append(got, h) })
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	l.Attach(3, 7, 103)
	l.Attach(500, 9, 600)
	l.Attach(4, 8, 104)
	l.Forget(4)
	l.Attach(9, 11, 109)
	l.Attach(9, 12, 209) // the number reused: the new handler
	cases := []struct {
		fd   int
		gen  uint32
		want int // -1: dropped
	}{
		{3, 7, 103}, {3, 6, -1}, {500, 9, 600}, {500, 10, -1}, {4, 8, -1},
		{5, 1, -1}, {501, 1, -1}, {100000, 1, -1}, {9, 11, -1}, {9, 12, 209},
	}
	for _, tc := range cases {
		got = got[:0]
		l.handle([]poll.Event{{Data: pack(tc.fd, tc.gen), Events: 1}})
		switch {
		case tc.want < 0 && len(got) != 0:
			t.Errorf("fd %d gen %d: handler %v, want none", tc.fd, tc.gen, got)
		case tc.want >= 0 && (len(got) != 1 || got[0] != tc.want):
			t.Errorf("fd %d gen %d: handlers %v, want [%d]", tc.fd, tc.gen, got, tc.want)
		}
	}
	seen := map[int]int{}
	l.Range(func(fd int, _ uint32, h int) { seen[fd] = h })
	if len(seen) != 3 || seen[3] != 103 || seen[500] != 600 || seen[9] != 209 {
		t.Errorf("Range: %v", seen)
	}
}

// BenchmarkHandle: one look's reports (64) for descriptors among n
// attached, picked at random, handed to their handlers: the loop's cost
// per report of finding a descriptor's handler.
func BenchmarkHandle(b *testing.B) {
	for _, n := range []int{16, 2000, 20000} {
		b.Run("fds="+itoa(n), func(b *testing.B) {
			var sum int
			l, err := New(func(h int, _ uint32) { sum += h })
			if err != nil {
				b.Fatal(err)
			}
			defer l.Close()
			for fd := 10; fd < 10+n; fd++ {
				l.Attach(fd, uint32(fd), fd)
			}
			rng := rand.New(rand.NewPCG(1, 2))
			evs := make([]poll.Event, 64)
			for k := range evs {
				fd := 10 + rng.IntN(n)
				evs[k] = poll.Event{Data: pack(fd, uint32(fd)), Events: 1}
			}
			b.ResetTimer()
			for range b.N {
				l.handle(evs)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(evs)), "ns/report")
			if sum == 0 {
				b.Fatal("no handler ran")
			}
		})
	}
}

func itoa(n int) string {
	if n == 0 {
		return "0"
	}
	var b [20]byte
	k := len(b)
	for ; n > 0; n /= 10 {
		k--
		b[k] = byte('0' + n%10)
	}
	return string(b[k:])
}
