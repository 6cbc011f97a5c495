package journal_test

import (
	"bytes"
	"errors"
	"syscall"
	"testing"

	"github.com/cmrt/cmrt/fabric"
	"github.com/cmrt/cmrt/id/journal"
)

// mustCheck fails t unless recs pass Check and ReplayCheck.
func mustCheck(t *testing.T, recs []journal.Record) {
	t.Helper()
	if err := journal.Check(recs); err != nil {
		t.Fatal(err)
	}
	if _, err := journal.ReplayCheck(recs); err != nil {
		t.Fatal(err)
	}
}

// rec builds a synthetic record.
func rec(seq, handle uint64, kind journal.RecordKind, what int, status int32, state journal.State) journal.Record {
	r := journal.Record{Seq: seq, ID: handle, Kind: kind, QPType: fabric.RC, Status: status, State: state, Channel: 1}
	if kind == journal.KindCall {
		r.Call = journal.Call(what)
	} else {
		r.Event = fabric.EventType(what)
	}
	return r
}

func TestCheckFlagsEachViolation(t *testing.T) {
	call, event := journal.KindCall, journal.KindEvent
	create := rec(1, 7, call, int(journal.CallCreate), 0, journal.StateIdle)
	good := []journal.Record{
		create,
		rec(2, 7, call, int(journal.CallResolveAddr), 0, journal.StateAddrQuery),
		rec(3, 7, event, int(fabric.EventAddrResolved), 0, journal.StateAddrResolved),
		rec(4, 7, call, int(journal.CallListen), int32(syscall.EINVAL), journal.StateAddrResolved),
		rec(5, 7, call, int(journal.CallDestroy), 0, journal.StateDestroyed),
		rec(6, 7, call, int(journal.CallBind), int32(syscall.EINVAL), journal.StateDestroyed),
	}
	mustCheck(t, good)
	for _, tc := range []struct {
		name string
		recs []journal.Record
		want journal.ViolationKind
	}{
		{"illegal event", []journal.Record{create, rec(2, 7, event, int(fabric.EventEstablished), 0, journal.StateIdle)}, journal.IllegalEvent},
		{"illegal call", []journal.Record{create, rec(2, 7, call, int(journal.CallConnect), 0, journal.StateIdle)}, journal.IllegalCall},
		{"diverged", []journal.Record{create, rec(2, 7, call, int(journal.CallBind), 0, journal.StateListen)}, journal.StateDiverged},
		{"event after destroy", []journal.Record{create, rec(2, 7, call, int(journal.CallDestroy), 0, journal.StateDestroyed),
			rec(3, 7, event, int(fabric.EventUser), 0, journal.StateDestroyed)}, journal.AfterDestroy},
		{"call after destroy", []journal.Record{create, rec(2, 7, call, int(journal.CallDestroy), 0, journal.StateDestroyed),
			rec(3, 7, call, int(journal.CallBind), 0, journal.StateDestroyed)}, journal.AfterDestroy},
		{"no create", []journal.Record{rec(1, 7, call, int(journal.CallBind), 0, journal.StateAddrBound)}, journal.BadHistory},
		{"created twice", []journal.Record{create, rec(2, 7, call, int(journal.CallCreate), 0, journal.StateIdle)}, journal.BadHistory},
		{"multicast without join", []journal.Record{create, rec(2, 7, call, int(journal.CallBind), 0, journal.StateAddrBound),
			rec(3, 7, event, int(fabric.EventMulticastJoin), 0, journal.StateAddrBound)}, journal.IllegalEvent},
		{"request for a non-listener", []journal.Record{create,
			{Seq: 2, ID: 8, Parent: 7, Kind: event, Event: fabric.EventConnectRequest, QPType: fabric.RC, State: journal.StateConnectRequest, Channel: 1}}, journal.IllegalEvent},
		{"channel changed", []journal.Record{create, {Seq: 2, ID: 7, Kind: call, Call: journal.CallBind, QPType: fabric.RC, State: journal.StateAddrBound, Channel: 2}}, journal.ChannelChanged},
	} {
		err := journal.Check(tc.recs)
		var je *journal.Error
		if !errors.As(err, &je) || je.Violations[0].Kind != tc.want {
			t.Errorf("%s: got %v, want %s", tc.name, err, tc.want)
			continue
		}
		if je.Without(tc.want) != nil && tc.name != "no create" {
			t.Errorf("%s: more than one kind: %v", tc.name, err)
		}
	}
	// A truncated journal may start in the middle of an id's history.
	if err := journal.Check(good[2:]); err != nil {
		t.Fatalf("truncated journal: %v", err)
	}
	// ReplayCheck reports the first divergence.
	bad := append([]journal.Record(nil), good...)
	bad[2].State = journal.StateRouteResolved
	_, err := journal.ReplayCheck(bad)
	var de *journal.DivergenceError
	if !errors.As(err, &de) || de.Record.Seq != 3 || de.Want != journal.StateAddrResolved || de.Before != journal.StateAddrQuery {
		t.Fatalf("ReplayCheck: %v", err)
	}
}

func TestJournalRecordString(t *testing.T) {
	r := journal.Record{Seq: 3, ID: 9, Parent: 2, Channel: 4, Kind: journal.KindEvent, QPType: fabric.UD, Event: fabric.EventEstablished, State: journal.StateEstablished}
	if got := r.String(); got != "#3 id 9 ch 4 UD event RDMA_CM_EVENT_ESTABLISHED status 0 -> ESTABLISHED (parent 2)" {
		t.Fatalf("String: %q", got)
	}
}

// FuzzJournalJSON: ReadJSON never panics, and what it accepts survives a
// write/read round trip unchanged.
func FuzzJournalJSON(f *testing.F) {
	f.Add([]byte(`{"seq":1,"time":5,"id":3,"ch":2,"kind":"call","qp":"RC","call":"create","status":0,"state":"IDLE"}`))
	f.Add([]byte(`{"seq":2,"id":3,"ch":2,"parent":1,"kind":"event","qp":"UD","event":"x","type":9,"status":-110,"state":"FAILED"}`))
	f.Add([]byte(`{"seq":3,"id":3,"kind":"cancel","qp":"RC","state":"CANCELED"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		recs, err := journal.ReadJSON(bytes.NewReader(b))
		if err != nil || len(recs) == 0 {
			return
		}
		var buf bytes.Buffer
		if err := journal.WriteRecordsJSON(&buf, recs); err != nil {
			t.Fatal(err)
		}
		back, err := journal.ReadJSON(&buf)
		if err != nil {
			t.Fatalf("re-read: %v\n%s", err, buf.String())
		}
		if len(back) != len(recs) {
			t.Fatalf("%d records, then %d", len(recs), len(back))
		}
		for k := range recs {
			if back[k] != recs[k] {
				t.Fatalf("record %d changed:\n%+v\n%+v", k, recs[k], back[k])
			}
		}
		_ = journal.Check(recs) // must not panic on any input
		_, _ = journal.ReplayCheck(recs)
	})
}
