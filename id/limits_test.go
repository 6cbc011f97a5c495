package id

import (
	"testing"

	"github.com/cmrt/cmrt/id/journal"
)

// The private-data limit of each call and QP type, as rdma_connect(3) and
// rdma_accept(3) give them.
func TestPrivateDataLimitTable(t *testing.T) {
	for _, c := range []struct {
		call journal.Call
		qp   QPType
		want int
	}{
		{journal.CallConnect, RC, 56}, {journal.CallAccept, RC, 196}, {journal.CallReject, RC, 148},
		{journal.CallConnect, UD, 180}, {journal.CallAccept, UD, 136}, {journal.CallReject, UD, 136},
	} {
		if got := maxPrivateData(c.call, c.qp); got != c.want {
			t.Errorf("maxPrivateData(%s, %s) = %d, want %d", c.call, c.qp, got, c.want)
		}
	}
}
