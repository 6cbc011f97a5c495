package rxe

import (
	"testing"

	"github.com/cmrt/cmrt/fabric/kernel/internal/provider"
	"github.com/cmrt/cmrt/fabric/kernel/internal/uverbs"
)

// The costs of the busy-poll path over the simulated queues (no system
// call on any of them): polling an empty completion queue (what a
// busy-polling loop does almost every time), taking one completion, and
// posting a send and a receive.

func BenchmarkCQPollEmpty(b *testing.B) {
	f := newFixture(b, uverbs.QPTypeRC, 64, 64, 64)
	out := make([]provider.WC, 2)
	b.ReportAllocs()
	for b.Loop() {
		if f.cq.Poll(out) != 0 {
			b.Fatal("completion from nowhere")
		}
	}
}

func BenchmarkCQPollOne(b *testing.B) {
	f := newFixture(b, uverbs.QPTypeRC, 64, 64, 64)
	out := make([]provider.WC, 2)
	wc := uverbs.WC{WRID: 7, ByteLen: 64}
	b.ReportAllocs()
	for b.Loop() {
		f.kcq.produce(&wc)
		if f.cq.Poll(out) != 1 {
			b.Fatal("no completion")
		}
	}
}

func BenchmarkPostSendRecv(b *testing.B) {
	f := newFixture(b, uverbs.QPTypeRC, 64, 64, 64)
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
		copy(f.ksq.mem[256:260], f.ksq.mem[128:132]) // the kernel took them
		copy(f.krq.mem[256:260], f.krq.mem[128:132])
	}
}
