package id

import (
	"reflect"
	"slices"
	"testing"
)

// TestEventFreeClearsEveryField: free clears the fields of a recycled event
// one by one (st is set); a field added to
// Event must be added there too, or a recycled event would carry a previous
// event's value.
func TestEventFreeClearsEveryField(t *testing.T) {
	cleared := []string{"ID", "ListenID", "Type", "Status", "Conn", "UD", "Arg", "JoinContext",
		"Group", "Seq", "owner", "mc", "src", "pooled", "kept", "syncOwned", "inHandler", "counted", "st"}
	typ := reflect.TypeFor[Event]()
	for k := range typ.NumField() {
		if name := typ.Field(k).Name; !slices.Contains(cleared, name) {
			t.Errorf("Event.%s is not cleared by free", name)
		}
	}
	ev := &Event{ID: &ID{}, ListenID: &ID{}, Type: EventUser, Status: -1, Arg: 7, JoinContext: 1, Seq: 9,
		owner: &ID{}, mc: &multicast{}, pooled: true, syncOwned: true, inHandler: true, counted: true}
	ev.Conn.PrivateData = []byte{1}
	ev.UD.QPNum = 5
	ev.free() // no test of this package runs in parallel: nobody takes it from the pool meanwhile
	got := ev
	if got.ID != nil || got.ListenID != nil || got.Type != 0 || got.Status != 0 || got.Arg != 0 ||
		got.JoinContext != nil || got.Seq != 0 || got.owner != nil || got.mc != nil || got.pooled ||
		got.syncOwned || got.inHandler || got.counted || got.Conn.PrivateData != nil || got.UD.QPNum != 0 {
		t.Fatalf("free left %+v", got)
	}
	if got.st.Load() != evAcked|evCounted {
		t.Fatalf("free left st %#x", got.st.Load())
	}
}
