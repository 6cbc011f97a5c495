package siw

import (
	"testing"

	"github.com/cmrt/cmrt/fabric/kernel/internal/provider"
)

// The costs of the busy-poll path over the simulated queues (no system
// call on any of them): polling an empty completion queue (what a
// busy-polling loop does almost every time), taking one completion, and
// posting a send and a receive.

func BenchmarkCQPollEmpty(b *testing.B) {
	f := newFixture(b, 64, 64, 64, false)
	out := make([]provider.WC, 2)
	b.ReportAllocs()
	for b.Loop() {
		if f.cq.Poll(out) != 0 {
			b.Fatal("completion from nowhere")
		}
	}
}

func BenchmarkCQPollOne(b *testing.B) {
	f := newFixture(b, 64, 64, 64, false)
	out := make([]provider.WC, 2)
	b.ReportAllocs()
	for b.Loop() {
		f.k.complete(7, 0, 0, 64, false)
		if f.cq.Poll(out) != 1 {
			b.Fatal("no completion")
		}
	}
}

func BenchmarkPostSendRecv(b *testing.B) {
	f := newFixture(b, 64, 64, 64, false)
	wr := provider.SendWR{Opcode: provider.OpSend, Flags: provider.SendSignaled, NumSGE: 1, SGE: provider.SGE{Addr: 0x1000, Length: 64, LKey: 3}}
	rwr := provider.RecvWR{NumSGE: 1, SGE: provider.SGE{Addr: 0x2000, Length: 64, LKey: 3}}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := f.qp.PostSend(&wr); err != nil {
			b.Fatal(err)
		}
		if err := f.qp.PostRecv(&rwr); err != nil {
			b.Fatal(err)
		}
		st(f.k.sqe(f.k.sqGet), 8, 0) // the kernel took them
		f.k.sqGet++
		st(f.k.rqe(f.k.rqGet), 8, 0)
		f.k.rqGet++
	}
}
