package diffkernel

import (
	"github.com/cmrt/cmrt/id/journal"
	"github.com/cmrt/cmrt/internal/callseq"
)

// ProbeState is a sequence that leaves one id in a state: the probe table
// (test/diffkernel -probes) probes every call the model refuses there.
type ProbeState struct {
	// Name says which id and how it got there.
	Name string
	// Seq takes the id there; Slot is the id.
	Seq  callseq.Seq
	Slot int
	// Mode is the device mode it needs, or -1 for both.
	Mode int
}

func mustSeq(s string) callseq.Seq {
	seq, err := callseq.Parse(s)
	if err != nil {
		panic(err)
	}
	return seq
}

// ProbeStates are the states the probe table visits: each a sequence of
// the usual calls, on RC and UD ids.
func ProbeStates() []ProbeState {
	const both, iwarp, ib = -1, int(callseq.ModeIWARP), int(callseq.ModeIB)
	var out []ProbeState
	add := func(name string, mode int, slot int, seq string) {
		out = append(out, ProbeState{Name: name, Mode: mode, Slot: slot, Seq: mustSeq(seq)})
	}
	for _, ps := range []string{"tcp", "udp"} {
		mode := both
		if ps == "udp" {
			mode = ib
		}
		c := "s0 create " + ps + " ch0; "
		add(ps+" IDLE", mode, 0, c)
		add(ps+" ADDR_BOUND", mode, 0, c+"s0 bind local:1")
		add(ps+" ADDR_BOUND (wildcard)", mode, 0, c+"s0 bind wildcard:1")
		add(ps+" ADDR_RESOLVED", mode, 0, c+"s0 resolve_addr local:1")
		add(ps+" ROUTE_RESOLVED", mode, 0, c+"s0 resolve_addr local:1; s0 resolve_route")
		add(ps+" LISTEN", mode, 0, c+"s0 bind local:1; s0 listen 0")
		add(ps+" LISTEN (wildcard)", mode, 0, c+"s0 listen 0")
		lis := c + "s0 bind local:1; s0 listen 0; "
		if ps == "tcp" {
			add("tcp CONNECT (no answer)", ib, 0, c+"s0 resolve_addr unreachable:1; s0 resolve_route; s0 connect pd=0")
			add("tcp FAILED (no listener)", ib, 0, c+"s0 resolve_addr local:3; s0 resolve_route; s0 connect pd=0")
			// The client is the kernel's on IB, a peer (which has QPs) on
			// iWARP; the listener's new id is slot 2.
			for _, x := range []struct {
				mode   int
				client string
			}{{ib, "s1 create tcp ch0; "}, {iwarp, "s1 create tcp ch0 peer; "}} {
				req := lis + x.client + "s1 resolve_addr local:1; s1 resolve_route; s1 connect pd=0"
				add("tcp CONNECT_REQUEST", x.mode, 2, req)
				add("tcp FAILED (request rejected)", x.mode, 2, req+"; s2 reject pd=0")
				add("tcp CONNECT_REQUEST (peer gone)", x.mode, 2, req+"; s1 destroy")
			}
			req := lis + "s1 create tcp ch0; s1 resolve_addr local:1; s1 resolve_route; s1 connect pd=0"
			add("tcp CONNECT (request waiting)", ib, 1, req)
			add("tcp FAILED (rejected)", ib, 1, req+"; s2 reject pd=0")
			add("tcp ESTABLISHED (active)", ib, 1, req+"; s2 accept pd=0")
			add("tcp ESTABLISHED (passive)", ib, 2, req+"; s2 accept pd=0")
			add("tcp DISCONNECTED (active)", ib, 1, req+"; s2 accept pd=0; s2 disconnect; s1 disconnect")
			add("tcp DISCONNECTED (passive)", ib, 2, req+"; s2 accept pd=0; s1 disconnect; s2 disconnect")
			add("tcp DISCONNECTED (peer disconnected)", ib, 1, req+"; s2 accept pd=0; s2 disconnect")
		} else {
			req := lis + "s1 create udp ch0; s1 resolve_addr local:1; s1 resolve_route; s1 connect pd=0"
			add("udp CONNECT_REQUEST", ib, 2, req)
			add("udp ESTABLISHED (active)", ib, 1, req+"; s2 accept pd=0")
			add("udp ESTABLISHED (passive)", ib, 2, req+"; s2 accept pd=0")
			add("udp FAILED (rejected)", ib, 1, req+"; s2 reject pd=0")
			add("udp FAILED (request rejected)", ib, 2, req+"; s2 reject pd=0")
		}
	}
	return out
}

// ProbeSeqs returns, for state ps, a sequence probing each call in
// callseq.ProbeCalls (those the model allows are not made: the probe
// notes nothing).
func ProbeSeqs(ps ProbeState) []callseq.Seq {
	var out []callseq.Seq
	for _, c := range callseq.ProbeCalls {
		op := callseq.Op{Call: c, Slot: ps.Slot, Probe: true}
		switch c {
		case journal.CallBind:
			op.Addr = callseq.Local
		case journal.CallResolveAddr:
			op.Addr, op.Port = callseq.Local, 1
		}
		seq := append(append(callseq.Seq(nil), ps.Seq...), op)
		out = append(out, seq)
	}
	return out
}
