package id

import "github.com/cmrt/cmrt/internal/handle"

// entry is what a uid stands for: an id, or a multicast join of one. Each
// ID and multicast holds its own entry, which the handle table points to,
// so publishing a handle allocates nothing.
type entry struct {
	id *ID
	mc *multicast
}

// handles maps the uids fabrics report events with to ids and joins, as
// librdmacm's indexer: a lookup is an index and two atomic loads, with no
// lock (internal/handle). A uid encodes its slot and the slot's
// generation, so it is never 0 (the kernel drops events of uid 0), never
// issued twice, and a stale one never reaches a live id.
var handles handle.Table[entry]

func addHandle(op string, e *entry) (uint64, error) {
	uid, err := handles.Alloc(e)
	if err != nil {
		return 0, errorf(op, err, "no handle left")
	}
	return uid, nil
}

func removeHandle(uid uint64) { handles.Free(uid) }

// Live returns how many ids and multicast joins exist in this process. Tests
// use it to prove nothing leaks.
func Live() int { return handles.Live() }
