package id

// LiveKey is a port space and a state, what CountLive counts live ids by.
type LiveKey struct {
	// PortSpace is the ids' port space.
	PortSpace PortSpace
	// State is the ids' state.
	State State
}

// CountLive returns how many ids of this process exist (created and not
// destroyed; multicast joins are not counted) in each port space and
// state. It reads each id's state under the id's lock, one id at a time,
// so the counts are a moment's picture of each id, not of all at once. It
// is meant for metrics scraped now and then: its cost grows with the
// number of ids, and nothing on the event path pays for it.
func CountLive() map[LiveKey]int {
	var ids []*ID
	eachLive(func(i *ID) { ids = append(ids, i) })
	out := make(map[LiveKey]int)
	for _, i := range ids {
		i.mu.Lock()
		st := i.state
		i.mu.Unlock()
		if st != StateDestroyed {
			out[LiveKey{PortSpace: i.ps, State: st}]++
		}
	}
	return out
}

// eachLive calls f for every id in the handle table (a lock-free walk: an
// id created or destroyed meanwhile may or may not be seen).
func eachLive(f func(*ID)) {
	handles.Range(func(_ uint64, e *entry) bool {
		if e.id != nil {
			f(e.id)
		}
		return true
	})
}
