package fabric

import (
	"errors"
	"slices"
	"syscall"
	"testing"
)

// recQP records the work requests PostSend takes, refusing the one at
// index bad (counted over its calls) with EINVAL.
type recQP struct {
	QP
	bad   int
	wrids []uint64
}

func (q *recQP) PostSend(wr *SendWR) error {
	if len(q.wrids) == q.bad {
		q.bad = -1 // once
		return syscall.EINVAL
	}
	q.wrids = append(q.wrids, wr.WRID)
	return nil
}

// listQP is a recQP that posts lists itself.
type listQP struct {
	recQP
	lists int
}

func (q *listQP) PostSendList(wrs []SendWR) (int, error) {
	q.lists++
	for k := range wrs {
		if err := q.PostSend(&wrs[k]); err != nil {
			return k, err
		}
	}
	return len(wrs), nil
}

// TestPostSendList checks the helper: a QP's own PostSendList is used
// where it has one; otherwise the requests are posted one by one in
// order, stopping at the first refused, whose index comes back with its
// error while the ones before it stay posted (ibv_post_send's bad_wr).
func TestPostSendList(t *testing.T) {
	wrs := []SendWR{{WRID: 1}, {WRID: 2}, {WRID: 3}}
	for _, tc := range []struct {
		name  string
		bad   int
		wantN int
		want  []uint64
	}{
		{"all", -1, 3, []uint64{1, 2, 3}},
		{"first refused", 0, 0, nil},
		{"middle refused", 1, 1, []uint64{1}},
		{"last refused", 2, 2, []uint64{1, 2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := &recQP{bad: tc.bad}
			n, err := PostSendList(q, wrs)
			if n != tc.wantN || (tc.bad >= 0) != errors.Is(err, syscall.EINVAL) || (tc.bad < 0) != (err == nil) {
				t.Fatalf("one by one: %d posted, %v; want %d", n, err, tc.wantN)
			}
			if !slices.Equal(q.wrids, tc.want) {
				t.Fatalf("one by one posted %v, want %v", q.wrids, tc.want)
			}
			l := &listQP{recQP: recQP{bad: tc.bad}}
			n, err = PostSendList(l, wrs)
			if l.lists != 1 || n != tc.wantN || !slices.Equal(l.wrids, tc.want) || (tc.bad < 0) != (err == nil) {
				t.Fatalf("list: %d lists, %d posted (%v), %v; want 1 list, %d posted", l.lists, n, l.wrids, err, tc.wantN)
			}
		})
	}
	if n, err := PostSendList(&recQP{bad: 0}, nil); n != 0 || err != nil {
		t.Fatalf("empty list: %d, %v", n, err)
	}
}

// inProcFabric declares where its completions are made.
type inProcFabric struct {
	Fabric
	in bool
}

func (f inProcFabric) CompletesInProcess() bool { return f.in }

// TestCompletesInProcess checks that only a fabric declaring it is taken
// to make its completions in process.
func TestCompletesInProcess(t *testing.T) {
	for _, tc := range []struct {
		name string
		f    Fabric
		want bool
	}{
		{"declares true", inProcFabric{in: true}, true},
		{"declares false", inProcFabric{in: false}, false},
		{"declares nothing", struct{ Fabric }{}, false},
		{"nil", nil, false},
	} {
		if got := CompletesInProcess(tc.f); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}
