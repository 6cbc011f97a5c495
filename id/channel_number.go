package id

import (
	"reflect"
	"sync"
	"weak"

	"github.com/cmrt/cmrt/fabric"
)

// Channel numbers: every event source an id reports to (a channel's, or a
// synchronous id's private one) gets a process-unique number the first time
// an id uses it, kept for the source's lifetime. Sources are held weakly,
// so the table does not keep closed channels alive; dead entries are swept
// as the table grows.
var channelNumbers = struct {
	sync.Mutex
	weak   map[weak.Pointer[byte]]uint64
	strong map[fabric.EventSource]uint64 // sources that are not pointers
	next   uint64
	sweep  int
}{weak: make(map[weak.Pointer[byte]]uint64), strong: make(map[fabric.EventSource]uint64), sweep: 64}

// ChannelNumber returns the number journal records carry for an event
// channel (Record.Channel): stable for the channel's lifetime, unique in
// the process, never 0. It returns 0 for a nil or closed channel.
func ChannelNumber(ch Channel) uint64 {
	if ch == nil {
		return 0
	}
	src := ch.Source()
	if src == nil {
		return 0
	}
	return sourceNumber(src)
}

// ChannelNumber returns the number of the channel the id reports to (its
// private channel's, for a synchronous id), as its journal records carry
// it. It is kept after Destroy.
func (i *ID) ChannelNumber() uint64 {
	i.mu.Lock()
	defer i.mu.Unlock()
	return i.chNum
}

// privateSourceNumber returns a new channel number for the private source
// a synchronous id is created with. Nothing else reports to that source,
// nor can look it up (Channel returns nil for the id), so it needs no
// entry in the table: a weak pointer per synchronous id was an allocation
// per connection (finding 25 in BENCHMARKS.md).
func privateSourceNumber() uint64 {
	t := &channelNumbers
	t.Lock()
	defer t.Unlock()
	t.next++
	return t.next
}

// sourceNumber returns src's channel number, assigning one on first use.
func sourceNumber(src fabric.EventSource) uint64 {
	if src == nil {
		return 0
	}
	t := &channelNumbers
	v := reflect.ValueOf(src)
	t.Lock()
	defer t.Unlock()
	if v.Kind() != reflect.Pointer || v.IsNil() {
		if !v.Comparable() {
			return 0
		}
		n, ok := t.strong[src]
		if !ok {
			t.next++
			n = t.next
			t.strong[src] = n
		}
		return n
	}
	key := weak.Make((*byte)(v.UnsafePointer()))
	if n, ok := t.weak[key]; ok {
		return n
	}
	if len(t.weak) >= t.sweep {
		for k := range t.weak {
			if k.Value() == nil {
				delete(t.weak, k)
			}
		}
		t.sweep = max(64, 2*len(t.weak))
	}
	t.next++
	t.weak[key] = t.next
	return t.next
}
