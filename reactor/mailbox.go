package reactor

import "github.com/cmrt/cmrt/id"

// item is an event waiting for its handler.
type item struct {
	ev *id.Event
	h  id.Handler
}

// mailbox holds the pending events of one id, in order. It is guarded by
// the reactor's mbMu. A scheduled mailbox is being drained by a worker or
// waits in the ready list for one.
type mailbox struct {
	key       *id.ID
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
