//go:build !race

package rsocket

import (
	"bytes"
	"encoding/binary"
	"io"
	"runtime"
	"testing"
	"time"
)

// TestSGLOfferDuringPost has the peer offer a used-up half again, writing
// its descriptor into this side's target SGL, before the Write that used
// the entry up has returned from postData: the peer reads the data at
// once and answers, as a C peer on the kernel fabric can while the writer
// is descheduled right after the post. The writer must not erase that
// descriptor: it clears a used-up entry before posting (rs_write_data's
// order), never after. Erased, the writer waits for an entry that never
// comes (make interop-rsocket's kernel-fabric hangs). Without the race
// detector: a peer's descriptor lands in memory the fabric writes, as in
// TestUnmarkedPeers.
func TestSGLOfferDuringPost(t *testing.T) {
	unmarked := func(c *config) { c.unmarked = true }
	// Long polls: the reader answers by itself while the writer holds its
	// lock (the reactor's poll of the writer waits for that lock).
	c1, c2, stop := pipe(t, unmarked, WithRecvBuffer(8192), WithRQSize(16), WithPollTime(30*time.Second))
	defer stop()
	c1.SetDeadline(time.Now().Add(10 * time.Second))
	c2.SetDeadline(time.Now().Add(10 * time.Second))

	offered := 0 // used-up entries the peer wrote again inside the window
	testPostedData = func(c *Conn, sge int, usedUp bool) {
		if c != c1 || !usedUp {
			return
		}
		lenAt := c.tbuf[sge*sgeLen+12 : sge*sgeLen+16]
		for t0 := time.Now(); time.Since(t0) < 2*time.Second; runtime.Gosched() {
			if binary.LittleEndian.Uint32(lenAt) != 0 {
				offered++
				return
			}
		}
	}
	defer func() { testPostedData = nil }()

	want := make([]byte, 64<<10) // 16 halves of the peer's buffer
	for k := range want {
		want[k] = byte(k*7 + k>>8)
	}
	errc := make(chan error, 1)
	go func() {
		_, err := c1.Write(want)
		errc <- err
	}()
	got := make([]byte, len(want))
	if _, err := io.ReadFull(c2, got); err != nil {
		t.Fatalf("read: %v (writer: %v)", err, <-errc)
	}
	if err := <-errc; err != nil {
		t.Fatalf("write: %v", err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("data differs")
	}
	if offered == 0 {
		t.Fatal("the peer never offered an entry while its Write was being posted: the test did not run the race")
	}
	t.Logf("%d entries offered again inside the post window", offered)
}

// TestTornEntryNotTaken: a credit message from an rsockets peer (no
// connFlagMarked) makes this side read its used-up target SGL entries; one
// may be half-written by the peer's Write still landing (this message was
// sent before it), or not written at all. Only a whole descriptor of one of
// the halves the peer announced is taken; anything else waits for a later
// message (a torn one would send the next Write to address 0 and reset the
// connection).
func TestTornEntryNotTaken(t *testing.T) {
	const base, key, half = 0x7f0000100000, 0x1234, 512 << 10
	whole := sge{Addr: base + half, Key: key, Len: half}
	tests := []struct {
		name  string
		entry sge
		take  bool
	}{
		{"whole second half", whole, true},
		{"whole first half", sge{Addr: base, Key: key, Len: half}, true},
		{"cleared", sge{}, false},
		{"length only", sge{Len: half}, false},
		{"address and key only", sge{Addr: base + half, Key: key}, false},
		{"low address bytes only", sge{Addr: (base + half) & 0xffffffff, Key: key, Len: half}, false},
		{"no key", sge{Addr: base + half, Len: half}, false},
		{"other key", sge{Addr: base + half, Key: key + 1, Len: half}, false},
		{"before the buffer", sge{Addr: base - half, Key: key, Len: half}, false},
		{"past the buffer", sge{Addr: base + 2*half, Key: key, Len: half}, false},
		{"longer than a half", sge{Addr: base, Key: key, Len: 2 * half}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newConn(nil, defaultConfig(), false)
			c.peer = connData{Flags: connFlagIOMap, Credits: 16,
				DataBuf: sge{Addr: base, Key: key, Len: half}}
			c.tbuf = make([]byte, 2*sgeLen)
			c.tsgl[0] = sge{Addr: base + 100, Key: key, Len: half - 100}
			appendSGE(c.tbuf[sgeLen:sgeLen], binary.LittleEndian, tt.entry)
			c.onMessage(msgWord(opSGL, 40))
			want := sge{}
			if tt.take {
				want = tt.entry
			}
			if c.tsgl[1] != want {
				t.Errorf("entry 1 = %+v, want %+v", c.tsgl[1], want)
			}
			if c.tsgl[0] != (sge{Addr: base + 100, Key: key, Len: half - 100}) {
				t.Errorf("entry 0 in use changed: %+v", c.tsgl[0])
			}
			if c.sseqComp != 40 {
				t.Errorf("credits %d, want 40", c.sseqComp)
			}
		})
	}
}
