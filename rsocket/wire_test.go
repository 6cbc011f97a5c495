package rsocket

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"syscall"
	"testing"
)

// The connection data a little-endian rsockets peer sends: version 1,
// flags IOMAP, 384 credits, iomap size 1, target SGL at 0x7f00aa000000
// (2 entries, rkey 0x1234), first buffer at 0x7f00bb000000 (64 KiB, rkey
// 0x5678); multi-byte fields big-endian, as rs_format_conn_data writes
// them.
var cConnData = mustHex("0102018000000001" +
	"00007f00aa000000" + "00001234" + "00000002" +
	"00007f00bb000000" + "00005678" + "00010000")

func mustHex(s string) []byte {
	b, err := hex.DecodeString(s)
	if err != nil {
		panic(err)
	}
	return b
}

func TestParseConnData(t *testing.T) {
	d, err := parseConnData(cConnData)
	if err != nil {
		t.Fatal(err)
	}
	want := connData{Version: 1, Flags: connFlagIOMap, Credits: 384, IOMapSize: 1,
		TargetSGL: sge{Addr: 0x7f00aa000000, Key: 0x1234, Len: 2},
		DataBuf:   sge{Addr: 0x7f00bb000000, Key: 0x5678, Len: 64 << 10}}
	if d != want {
		t.Fatalf("parsed %+v, want %+v", d, want)
	}
	if got := want.marshal(nil); !bytes.Equal(got, cConnData) {
		t.Fatalf("marshal = %x, want %x", got, cConnData)
	}
	// Extra bytes (transport padding) are ignored.
	if _, err := parseConnData(append(bytes.Clone(cConnData), 0, 0, 0)); err != nil {
		t.Fatal(err)
	}
}

func TestParseConnDataRejects(t *testing.T) {
	set := func(off int, v ...byte) []byte {
		b := bytes.Clone(cConnData)
		copy(b[off:], v)
		return b
	}
	for name, b := range map[string][]byte{
		"empty":      nil,
		"short":      cConnData[:connDataLen-1],
		"version 0":  set(0, 0),
		"version 2":  set(0, 2),
		"no credits": set(2, 0, 0),
		"no SGL":     set(20, 0, 0, 0, 0),
		"huge SGL":   set(20, 0, 1, 0, 0),
		"no buffer":  set(36, 0, 0, 0, 0),
		"huge buf":   set(36, 0x20, 0, 0, 0),
	} {
		if _, err := parseConnData(b); !errors.Is(err, syscall.EPROTO) {
			t.Errorf("%s: %v, want EPROTO", name, err)
		}
	}
}

func TestMessageWords(t *testing.T) {
	for _, tc := range []struct {
		op, data, word uint32
	}{
		{opData, 4096, 0x00001000},
		{opData, msgDataMask, 0x1fffffff},
		{opSGL, 0x1fffe, 0x8001fffe},
		{opIOMapSGL, 3, 0xc0000003},
		{opCtrl, ctrlDisconnect, 0xe0000000},
		{opCtrl, ctrlShutdown, 0xe0000002},
		{opData, 1 << 29, 0}, // data above 29 bits is cut, never spills into the opcode
	} {
		w := msgWord(tc.op, tc.data)
		if w != tc.word {
			t.Errorf("msgWord(%d, %#x) = %#x, want %#x", tc.op, tc.data, w, tc.word)
		}
		if msgOp(w) != tc.op || msgData(w) != tc.data&msgDataMask {
			t.Errorf("split %#x = %d, %#x", w, msgOp(w), msgData(w))
		}
	}
}

func TestSGEAndIOMapLayouts(t *testing.T) {
	s := sge{Addr: 0x0102030405060708, Key: 0x0a0b0c0d, Len: 0x11121314}
	le := appendSGE(nil, binary.LittleEndian, s)
	if !bytes.Equal(le, mustHex("0807060504030201"+"0d0c0b0a"+"14131211")) {
		t.Fatalf("little-endian rs_sge = %x", le)
	}
	if got := readSGE(le, binary.LittleEndian); got != s {
		t.Fatalf("read back %+v", got)
	}
	be := appendSGE(nil, binary.BigEndian, s)
	if got := readSGE(be, peerOrder(connFlagNet)); got != s {
		t.Fatalf("big-endian read back %+v", got)
	}
	m := iomap{Offset: 4096, SGE: s}
	b := appendIOMap(nil, binary.LittleEndian, m)
	if len(b) != iomapLen || readIOMap(b, binary.LittleEndian) != m {
		t.Fatalf("rs_iomap %x", b)
	}
}

func TestIOMapScale(t *testing.T) {
	for _, tc := range []struct{ v, scaled, back int }{
		{0, 0, 0}, {1, 1, 1}, {128, 128, 128}, {129, 128, 128}, {256, 129, 256}, {1000, 131, 768}, {32767, 255, 32512},
	} {
		if s := scaleOf(tc.v); int(s) != tc.scaled || valueOf(s) != tc.back {
			t.Errorf("scale %d = %d (back %d), want %d (%d)", tc.v, s, valueOf(s), tc.scaled, tc.back)
		}
	}
}

func TestSendIDs(t *testing.T) {
	for _, tc := range []struct {
		kind, n uint64
		rel     int
	}{{kData, 2, 65536 + 100}, {kCredit, 1, 0}, {kDirect, 1, 1 << 30}} {
		k, n, rel := splitSendID(sendID(tc.kind, tc.n, tc.rel))
		if k != tc.kind || n != tc.n || rel != tc.rel {
			t.Errorf("%+v round-trips to %d %d %d", tc, k, n, rel)
		}
		if sendID(tc.kind, tc.n, tc.rel)&recvFlag != 0 {
			t.Errorf("%+v looks like a receive", tc)
		}
	}
}
