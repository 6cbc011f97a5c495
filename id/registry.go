package id

import "sync"

// entry is what a uid stands for: an id, or a multicast join of one.
type entry struct {
	id *ID
	mc *multicast
}

// handles maps the uids fabrics report events with to ids and joins, as
// librdmacm's indexer. uid 0 is never used: the kernel drops events of
// uid 0.
var handles = struct {
	sync.Mutex
	next uint64
	m    map[uint64]entry
}{m: make(map[uint64]entry)}

func addHandle(e entry) uint64 {
	handles.Lock()
	handles.next++
	uid := handles.next
	handles.m[uid] = e
	handles.Unlock()
	return uid
}

func removeHandle(uid uint64) {
	handles.Lock()
	delete(handles.m, uid)
	handles.Unlock()
}

// Live returns how many ids and multicast joins exist in this process. Tests
// use it to prove nothing leaks.
func Live() int {
	handles.Lock()
	defer handles.Unlock()
	return len(handles.m)
}
