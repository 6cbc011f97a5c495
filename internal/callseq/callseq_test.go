package callseq

import (
	"slices"
	"strings"
	"testing"

	"github.com/cmrt/cmrt/id"
	"github.com/cmrt/cmrt/id/journal"
)

// TestTextRoundTrip: every generated sequence reads back as itself.
func TestTextRoundTrip(t *testing.T) {
	for _, mode := range []Mode{ModeIWARP, ModeIB} {
		for k := 0; k < 300; k++ {
			seq := Generate(NewRand(11, uint64(k)), Config{Mode: mode})
			back, err := Parse(seq.String())
			if err != nil {
				t.Fatalf("mode %d seq %d: %v\n%s", mode, k, err, seq)
			}
			if !slices.Equal(back, seq) {
				t.Fatalf("mode %d seq %d: read back\n%s\nwant\n%s", mode, k, back, seq)
			}
		}
	}
}

func TestParse(t *testing.T) {
	seq, err := Parse("# a listener\ns0 create tcp ch1; s0 bind local:1\n\ns0 listen 0\ns1 create udp sync peer\n" +
		"s1 resolve_addr unreachable:2 src\ns1 connect pd=56\ns2 accept pd=0\ns2 set_option ib_path\n" +
		"s1 migrate sync\ns1 join g1 sendonly\ns1 leave g0\ns2 destroy\ns0 probe resolve_route")
	if err != nil {
		t.Fatal(err)
	}
	want := Seq{
		{Call: journal.CallCreate, Slot: 0, PS: id.PSTCP, Chan: 1},
		{Call: journal.CallBind, Slot: 0, Addr: Local, Port: 1},
		{Call: journal.CallListen, Slot: 0},
		{Call: journal.CallCreate, Slot: 1, PS: id.PSUDP, Chan: ChanSync, Peer: true},
		{Call: journal.CallResolveAddr, Slot: 1, Addr: Unreachable, Port: 2, Src: true},
		{Call: journal.CallConnect, Slot: 1, PD: 56},
		{Call: journal.CallAccept, Slot: 2},
		{Call: journal.CallSetOption, Slot: 2, Opt: OptIBPath},
		{Call: journal.CallMigrate, Slot: 1, Chan: ChanSync},
		{Call: journal.CallJoin, Slot: 1, Group: 1, SendOnly: true},
		{Call: journal.CallLeave, Slot: 1},
		{Call: journal.CallDestroy, Slot: 2},
		{Call: journal.CallResolveRoute, Probe: true},
	}
	if !slices.Equal(seq, want) {
		t.Fatalf("got\n%s\nwant\n%s", seq, want)
	}
	for _, bad := range []string{"create tcp", "s0 frobnicate", "s0 bind local", "s0 bind local:9", "sx listen 0",
		"s0 create tcp ch3", "s0 connect 5", "s0 probe", "s0 join g7", "s0 set_option nagle", "s0 create sctp ch0",
		"s0 create ps0x ch0", "s0 create ps0x10000 ch0", "s0 create ps0xzz ch0"} {
		if _, err := Parse(bad); err == nil {
			t.Errorf("Parse(%q) succeeded", bad)
		}
	}
}

// TestPortSpaceText: every port space, named or not, is written as Parse
// reads it back.
func TestPortSpaceText(t *testing.T) {
	for _, ps := range []id.PortSpace{id.PSTCP, id.PSUDP, id.PSIB, id.PSIPoIB, 0, 0x0105, 0xffff} {
		op := Op{Call: journal.CallCreate, Slot: 3, PS: ps, Chan: 1}
		back, err := Parse(op.String())
		if err != nil || len(back) != 1 || back[0] != op {
			t.Errorf("%#x: %q read back as %v, %v", uint16(ps), op.String(), back, err)
		}
	}
	if got := (Op{Call: journal.CallCreate, PS: id.PSIB}).String(); !strings.Contains(got, " ib ") {
		t.Errorf("PSIB written %q", got)
	}
}

// TestGenerateDeterministic: a seed draws the same sequence, another seed
// another one.
func TestGenerateDeterministic(t *testing.T) {
	a := Generate(NewRand(5, 9), Config{Mode: ModeIB})
	b := Generate(NewRand(5, 9), Config{Mode: ModeIB})
	c := Generate(NewRand(5, 10), Config{Mode: ModeIB})
	if !slices.Equal(a, b) {
		t.Fatalf("same seed, different sequences:\n%s\n%s", a, b)
	}
	if slices.Equal(a, c) {
		t.Fatalf("different seeds, same sequence:\n%s", a)
	}
}

// TestGenerateCoverage: generated sequences do what the drivers need to
// compare, often enough: connections to listeners, accepts, rejects,
// disconnects, destroys, calls the model refuses, synchronous ids, and
// per mode peers (iWARP) or UD ids and joins (IB).
func TestGenerateCoverage(t *testing.T) {
	const n = 400
	for _, mode := range []Mode{ModeIWARP, ModeIB} {
		count := map[string]int{}
		for k := 0; k < n; k++ {
			c := NewRand(3, uint64(k))
			g := &gen{c: c, cfg: Config{Mode: mode, MaxOps: 16, MaxSlots: 6}}
			for tries := 0; len(g.seq) < 16 && tries < 320; tries++ {
				g.step()
			}
			seen := map[string]bool{}
			creates := 0
			for _, op := range g.seq {
				seen[op.Call.String()] = true
				if op.Call == journal.CallCreate {
					creates++
					if op.Peer {
						seen["peer"] = true
					}
					if op.PS == id.PSUDP {
						seen["udp"] = true
					}
					if op.Chan == ChanSync {
						seen["sync"] = true
					}
				}
			}
			if len(g.slots) > creates {
				seen["request"] = true
			}
			for s := range seen {
				count[s]++
			}
			if len(g.seq) != 16 {
				t.Fatalf("mode %d: %d operations, want 16", mode, len(g.seq))
			}
		}
		want := map[string]int{"request": n / 4, "accept": n / 8, "reject": n / 20, "disconnect": n / 10,
			"destroy": n / 2, "set_option": n / 5, "migrate": n / 10, "sync": n / 4, "listen": n / 2}
		if mode == ModeIWARP {
			want["peer"] = n / 2
			if count["udp"] > 0 || count["join"] > 0 {
				t.Errorf("iWARP mode: %d sequences with UD ids, %d with joins", count["udp"], count["join"])
			}
		} else {
			want["udp"], want["join"] = n/4, n/10
			if count["peer"] > 0 {
				t.Errorf("IB mode: %d sequences with peers", count["peer"])
			}
		}
		for what, min := range want {
			if count[what] < min {
				t.Errorf("mode %d: %s in %d of %d sequences, want at least %d", mode, what, count[what], n, min)
			}
		}
		t.Logf("mode %d: sequences with each: %v", mode, count)
	}
}

func TestWithoutSlot(t *testing.T) {
	seq, _ := Parse("s0 create tcp ch0; s1 create tcp ch0; s0 listen 0; s1 resolve_addr local:1; s2 accept pd=0; s3 create tcp sync; s3 destroy")
	got := WithoutSlot(seq, 1)
	want, _ := Parse("s0 create tcp ch0; s0 listen 0; s1 accept pd=0; s2 create tcp sync; s2 destroy")
	if !slices.Equal(got, want) {
		t.Errorf("without s1:\n%swant\n%s", got, want)
	}
	// s2 is born from a request: only its operations go.
	got = WithoutSlot(seq, 2)
	want, _ = Parse("s0 create tcp ch0; s1 create tcp ch0; s0 listen 0; s1 resolve_addr local:1; s3 create tcp sync; s3 destroy")
	if !slices.Equal(got, want) {
		t.Errorf("without s2:\n%swant\n%s", got, want)
	}
}

// TestShrink: a failure that needs two operations of two ids shrinks to
// them and their creates, within the budget.
func TestShrink(t *testing.T) {
	seq := Generate(NewRand(1, 1), Config{Mode: ModeIB, MaxOps: 30})
	seq = append(seq, Op{Call: journal.CallCreate, Slot: 9, PS: id.PSTCP}, Op{Call: journal.CallListen, Slot: 9, Backlog: 7})
	seq = append(seq, Generate(NewRand(1, 2), Config{Mode: ModeIB, MaxOps: 10})...)
	fails := func(s Seq) bool {
		// Fails while some id is created and then listens with backlog 7.
		created := map[int]bool{}
		for _, op := range s {
			if op.Call == journal.CallCreate {
				created[op.Slot] = true
			}
			if op.Call == journal.CallListen && op.Backlog == 7 && created[op.Slot] {
				return true
			}
		}
		return false
	}
	if !fails(seq) {
		t.Fatal("the test sequence does not fail")
	}
	runs := 0
	got := Shrink(seq, func(s Seq) bool { runs++; return fails(s) }, 200)
	if !fails(got) || len(got) != 2 || runs > 200 {
		t.Fatalf("shrunk to %d operations in %d runs:\n%s", len(got), runs, got)
	}
	if !strings.HasSuffix(got[1].String(), "listen 7") || got[0].Call != journal.CallCreate || got[0].Slot != got[1].Slot {
		t.Errorf("shrunk to\n%s", got)
	}
	// A small budget is kept to.
	runs = 0
	Shrink(seq, func(s Seq) bool { runs++; return fails(s) }, 5)
	if runs > 5 {
		t.Errorf("%d runs with a budget of 5", runs)
	}
}

// TestBlocks: a synchronous id's call waits where an event answers it; a
// disconnect only where the id's DISCONNECTED does: an RC id whose
// connection is up or coming up, never a UD id (the kernel's rdma_disconnect
// of an IB UD id returns 0 and reports nothing; diff-kernel on rxe0).
func TestBlocks(t *testing.T) {
	for _, c := range []struct {
		call journal.Call
		st   id.State
		qp   id.QPType
		want bool
	}{
		{journal.CallDisconnect, id.StateEstablished, id.RC, true},
		{journal.CallDisconnect, id.StateAccept, id.RC, true},
		{journal.CallDisconnect, id.StateConnectResponse, id.RC, true},
		{journal.CallDisconnect, id.StateDisconnected, id.RC, false},
		{journal.CallDisconnect, id.StateConnectRequest, id.RC, false},
		{journal.CallDisconnect, id.StateFailed, id.RC, false},
		{journal.CallDisconnect, id.StateEstablished, id.UD, false},
		{journal.CallDisconnect, id.StateConnectRequest, id.UD, false},
		{journal.CallAccept, id.StateConnectRequest, id.RC, true},
		{journal.CallAccept, id.StateConnectRequest, id.UD, false},
		{journal.CallConnect, id.StateRouteResolved, id.UD, true},
		{journal.CallGetRequest, id.StateListen, id.RC, true},
		{journal.CallBind, id.StateIdle, id.RC, false},
	} {
		if got := Blocks(c.call, c.st, c.qp); got != c.want {
			t.Errorf("Blocks(%s, %s, %s) = %v, want %v", c.call, c.st, c.qp, got, c.want)
		}
	}
}
