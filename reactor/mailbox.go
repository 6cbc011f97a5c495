package reactor

import "github.com/cmrt/cmrt/id"

// item is an event waiting for its handler, or a work completion waiting
// for its completion handler (reg set).
type item struct {
	ev  *id.Event
	h   id.Handler
	wc  id.WC
	reg *registration
}

// mailbox holds the pending items of one id (or one completion queue), in
// order. It is guarded by the reactor's mbMu. A scheduled mailbox is being
// drained by a worker or waits in the run queue for one.
type mailbox struct {
	key       any    // *id.ID, or the *registration of a completion queue
	items     []item // ring
	head, n   int
	scheduled bool
}

func (m *mailbox) push(it item) {
	if m.n == len(m.items) {
		grown := make([]item, max(2*len(m.items), 4))
		for k := 0; k < m.n; k++ {
			grown[k] = m.items[(m.head+k)%len(m.items)]
		}
		m.items, m.head = grown, 0
	}
	m.items[(m.head+m.n)%len(m.items)] = it
	m.n++
}

func (m *mailbox) pop() (item, bool) {
	if m.n == 0 {
		return item{}, false
	}
	it := m.items[m.head]
	m.items[m.head] = item{}
	m.head = (m.head + 1) % len(m.items)
	m.n--
	return it, true
}
