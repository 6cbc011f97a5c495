package rsocket

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/cmrt/cmrt/id"
)

// FuzzConnData: any private data either parses into connection data that
// marshals back to its first 40 bytes (reserved bytes aside), or fails;
// it never panics.
func FuzzConnData(f *testing.F) {
	f.Add(cConnData)
	f.Add(cConnData[:10])
	f.Add(append(bytes.Clone(cConnData), 1, 2, 3))
	f.Add(make([]byte, connDataLen))
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := parseConnData(b)
		if err != nil {
			return
		}
		if d.Version != connVersion || d.Credits == 0 || d.DataBuf.Len == 0 || d.TargetSGL.Len == 0 {
			t.Fatalf("accepted %+v", d)
		}
		out := d.marshal(nil)
		want := bytes.Clone(b[:connDataLen])
		want[4], want[5], want[6] = 0, 0, 0 // reserved: not kept
		if !bytes.Equal(out, want) {
			t.Fatalf("marshal %x, want %x", out, want)
		}
	})
}

// FuzzMessageWord feeds a connection's message handling every 32-bit word
// a peer could send, in both byte orders, and checks its invariants: no
// panic, pending data never beyond the receive buffer, the message ring
// within bounds.
func FuzzMessageWord(f *testing.F) {
	for _, w := range []uint32{msgWord(opData, 100), msgWord(opSGL, 500), msgWord(opSGL, 5|msgSGEMark),
		msgWord(opIOMapSGL, 0), msgWord(opIOMapSGL, 0xffff), msgWord(opCtrl, ctrlShutdown),
		msgWord(opCtrl, ctrlDisconnect), msgWord(opCtrl, 99), msgWord(opData, msgDataMask), 1<<29 | 5, 3<<29 | 1, 5<<29 | 7} {
		f.Add(w, w, false)
	}
	f.Fuzz(func(t *testing.T, w1, w2 uint32, marked bool) {
		c := &Conn{rbuf: make([]byte, 4096), tbuf: make([]byte, 2*sgeLen+2*iomapLen), rmsg: make([]uint32, 5),
			iomaps: make([]iomap, 2), rwake: make(chan struct{}, 1), wwake: make(chan struct{}, 1),
			cwake: make(chan struct{}, 1), phase: phOpen, connected: true, readable: true, writable: true}
		if marked {
			c.peer.Flags = connFlagMarked
		}
		binary.LittleEndian.PutUint64(c.tbuf[sgeLen:], 0x1000) // an SGL entry the peer wrote
		binary.LittleEndian.PutUint32(c.tbuf[sgeLen+12:], 2048)
		for _, w := range []uint32{w1, w2, w1, w2, w1, w2} {
			c.onMessage(w)
			if c.rPending > len(c.rbuf) || c.rPending < 0 || c.rmN > len(c.rmsg) {
				t.Fatalf("after %#x: %d pending, %d messages", w, c.rPending, c.rmN)
			}
			sum := 0
			for k := 0; k < c.rmN; k++ {
				sum += int(c.rmsg[(c.rmHead+k)%len(c.rmsg)])
			}
			if sum != c.rPending {
				t.Fatalf("after %#x: ring holds %d bytes, %d pending", w, sum, c.rPending)
			}
			if c.nextSGE < 0 || c.nextSGE >= len(c.tsgl) {
				t.Fatalf("next SGE %d", c.nextSGE)
			}
		}
		// Whatever came, reading it back stays within the buffer.
		b := make([]byte, 8192)
		if n := c.copyOut(b); n > len(c.rbuf) || c.rPending != 0 && c.rmN == 0 {
			t.Fatalf("copied %d, %d pending", n, c.rPending)
		}
	})
}

// FuzzWCMessage feeds wcMessage any receive completion: it never panics,
// takes the immediate data whenever the completion has one, takes a slot's
// word only from a 4-byte Send, and names only slots of mbuf.
func FuzzWCMessage(f *testing.F) {
	f.Add(uint64(recvFlag|1), uint32(4), false, uint32(0), false, 3)
	f.Add(uint64(recvFlag), uint32(2048), true, uint32(0xdeadbeef), true, 2)
	f.Add(uint64(recvFlag|7), uint32(16), false, uint32(0), false, 2)
	f.Add(uint64(5), uint32(4), true, uint32(1), true, 1)
	f.Fuzz(func(t *testing.T, wrid uint64, byteLen uint32, withImm bool, imm uint32, big bool, nslots int) {
		nslots = nslots & 7
		mbuf := make([]byte, nslots*msgSize)
		for k := range mbuf {
			mbuf[k] = byte(k*37 + 11)
		}
		var flags uint8
		if big {
			flags = connFlagNet
		}
		o := peerOrder(flags)
		wc := id.WC{WRID: wrid, ByteLen: byteLen, WithImm: withImm, ImmData: imm}
		m, slot, err := wcMessage(&wc, mbuf, o)
		if err != nil {
			return
		}
		if wrid&recvFlag == 0 || slot < 0 || slot >= nslots || uint64(slot) != wrid&^recvFlag {
			t.Fatalf("completion %#x accepted as slot %d of %d", wrid, slot, nslots)
		}
		switch {
		case withImm && m != imm:
			t.Fatalf("immediate %#x read as %#x", imm, m)
		case !withImm && byteLen != msgSize:
			t.Fatalf("a Send of %d bytes accepted", byteLen)
		case !withImm && m != o.Uint32(mbuf[slot*msgSize:]):
			t.Fatalf("slot %d read as %#x", slot, m)
		}
	})
}
