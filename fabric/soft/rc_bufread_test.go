package soft

import (
	"bytes"
	"testing"

	"github.com/cmrt/cmrt/fabric"
	"github.com/cmrt/cmrt/internal/iwarp"
	"github.com/cmrt/cmrt/poll"
	"golang.org/x/sys/unix"
)

// TestRCUnsignaledBytesReadBeforeLaterCompletion checks what the fabric
// declares with CompletesInProcess (fabric.InProcessCompleter): an
// unsignaled request's bytes are read by the time a later request
// completes, so its buffer may be reused then (rsocket's data Writes rely
// on it; siw, which sends such a Write by reference, does not give it).
// A 1 MiB unsignaled Write fills the socket and waits in the queue; the
// signaled Send behind it completes only once the Write's bytes are all
// in the socket: the buffer, overwritten at that completion, leaves what
// the peer reads untouched.
func TestRCUnsignaledBytesReadBeforeLaterCompletion(t *testing.T) {
	const size = 1 << 20
	fc := newFuzzConnSized(t, false, directBase)
	defer fc.close()
	if !New().CompletesInProcess() {
		t.Fatal("the software fabric declares its completions made elsewhere")
	}
	src := pattern(size, 3)
	want := append([]byte(nil), src...)
	m, err := fc.qp.RegMR(src, fabric.AccessLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	wrs := []fabric.SendWR{
		{WRID: 1, Opcode: fabric.WRWrite, Buf: src, MR: m, RemoteAddr: 0x1000, RKey: 0x42},
		{WRID: 2, Opcode: fabric.WRSend, Buf: []byte("done"), Flags: fabric.SendSignaled | fabric.SendInline},
	}
	for k := range wrs {
		if err := fc.qp.PostSend(&wrs[k]); err != nil {
			t.Fatal(err)
		}
	}
	var got []byte
	buf := make([]byte, 64<<10)
	var wc [2]fabric.WC
	completed, atCompletion := false, 0
	for idle := 0; idle < 200 && !(completed && idle > 20); {
		if n := fc.qp.scq.Poll(wc[:]); n > 0 {
			if completed || n != 1 || wc[0].WRID != 2 || wc[0].Status != fabric.WCSuccess {
				t.Fatalf("send completions %+v", wc[:n])
			}
			completed = true
			atCompletion = len(got)
			for k := range src {
				src[k] = 0xff // reused at the completion
			}
		}
		// Read in small steps, so that the Write is still queued when
		// the socket first fills.
		n, err := unix.Read(fc.peer, buf[:4096])
		if err != nil && err != unix.EAGAIN {
			t.Fatal(err)
		}
		if n > 0 {
			got = append(got, buf[:n]...)
			idle = 0
		} else {
			idle++
		}
		fc.c.onEvents(poll.Out)
	}
	if !completed {
		t.Fatal("the Send never completed")
	}
	if atCompletion >= size {
		t.Fatalf("the peer had read %d bytes when the Send completed: nothing was left to change", atCompletion)
	}
	var payload []byte
	sends := 0
	for len(got) > 0 {
		u, n, err := iwarp.ParseFPDU(got, false)
		if err != nil {
			t.Fatalf("after %d payload bytes: %v", len(payload), err)
		}
		got = got[n:]
		var h iwarp.Header
		p, err := iwarp.ParseULPDU(u, &h)
		if err != nil {
			t.Fatal(err)
		}
		switch h.Op {
		case iwarp.OpWrite:
			if sends != 0 || h.TO != 0x1000+uint64(len(payload)) {
				t.Fatalf("Write segment at TO %#x after %d bytes and %d Sends", h.TO, len(payload), sends)
			}
			payload = append(payload, p...)
		case iwarp.OpSend:
			sends++
		default:
			t.Fatalf("unexpected %v", h.Op)
		}
	}
	if sends != 1 {
		t.Fatalf("%d Sends", sends)
	}
	if !bytes.Equal(payload, want) {
		t.Fatalf("the Write carried %d bytes, intact %v: its buffer was read after the later completion", len(payload), bytes.Equal(payload, want))
	}
}
