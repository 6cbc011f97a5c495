package sidr

import (
	"bytes"
	"encoding/hex"
	"errors"
	"testing"
)

func TestGoldenREQ(t *testing.T) {
	m := Message{Type: TypeREQ, PortSpace: 0x0111, TID: 0x0102030405060708, QPN: 0xABCDEF, QKey: 0x01234567,
		PrivateData: []byte{0xAA, 0xBB}}
	b, err := Append(nil, &m)
	if err != nil {
		t.Fatal(err)
	}
	want := "0101" + "0111" + "0102030405060708" + "00" + "02" + "0000" + "00abcdef" + "01234567" + "aabb"
	if got := hex.EncodeToString(b); got != want {
		t.Fatalf("REQ\n got %s\nwant %s", got, want)
	}
	var back Message
	if err := Parse(b, &back); err != nil {
		t.Fatal(err)
	}
	if back.Type != m.Type || back.PortSpace != m.PortSpace || back.TID != m.TID || back.QPN != m.QPN ||
		back.QKey != m.QKey || !bytes.Equal(back.PrivateData, m.PrivateData) {
		t.Fatalf("round trip: %+v", back)
	}
}

func TestGoldenData(t *testing.T) {
	var b [DataHeaderLen]byte
	PutDataHeader(b[:], &DataHeader{Flags: FlagSolicited | 0x80, DstQPN: 0xFFFFFF, SrcQPN: 0x1234, QKey: 0x01234567})
	if got, want := hex.EncodeToString(b[:]), "0103010000ffffff0000123401234567"; got != want {
		t.Fatalf("data header\n got %s\nwant %s", got, want)
	}
	var h DataHeader
	p, err := ParseData(append(b[:], 'x'), &h)
	if err != nil || string(p) != "x" || h.DstQPN != 0xFFFFFF || h.SrcQPN != 0x1234 || h.Flags != FlagSolicited {
		t.Fatalf("parse: %v %q %+v", err, p, h)
	}
}

func TestLimits(t *testing.T) {
	for _, c := range []struct {
		t   Type
		max int
	}{{TypeREQ, MaxREQData}, {TypeREP, MaxREPData}} {
		m := Message{Type: c.t, PrivateData: make([]byte, c.max)}
		b, err := Append(nil, &m)
		if err != nil {
			t.Fatalf("%d at the limit: %v", c.t, err)
		}
		if err := Parse(b, &m); err != nil {
			t.Fatalf("%d parse at the limit: %v", c.t, err)
		}
		m.PrivateData = make([]byte, c.max+1)
		if _, err := Append(nil, &m); !errors.Is(err, ErrMalformed) {
			t.Fatalf("%d over the limit: %v", c.t, err)
		}
		// A datagram claiming too much private data is refused too.
		b = append(b, 0)
		b[13]++
		if err := Parse(b, &m); !errors.Is(err, ErrMalformed) {
			t.Fatalf("%d decode over the limit: %v", c.t, err)
		}
	}
}

func TestMalformed(t *testing.T) {
	good, _ := Append(nil, &Message{Type: TypeREP, Status: StatusReject, PrivateData: []byte("abc")})
	mut := func(f func(b []byte) []byte) []byte { return f(append([]byte(nil), good...)) }
	cases := map[string][]byte{
		"empty":       nil,
		"short":       good[:HeaderLen-1],
		"version":     mut(func(b []byte) []byte { b[0] = 2; return b }),
		"type data":   mut(func(b []byte) []byte { b[1] = byte(TypeData); return b }),
		"type 0":      mut(func(b []byte) []byte { b[1] = 0; return b }),
		"reserved":    mut(func(b []byte) []byte { b[15] = 1; return b }),
		"qpn":         mut(func(b []byte) []byte { b[16] = 1; return b }),
		"truncated":   good[:len(good)-1],
		"trailing":    append(append([]byte(nil), good...), 0),
		"req status":  mut(func(b []byte) []byte { b[1] = byte(TypeREQ); return b }),
		"pd too long": mut(func(b []byte) []byte { b[13] = 200; return b }),
	}
	for name, b := range cases {
		var m Message
		if err := Parse(b, &m); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: %v", name, err)
		}
	}
	var h DataHeader
	var d [DataHeaderLen]byte
	PutDataHeader(d[:], &DataHeader{})
	for name, b := range map[string][]byte{
		"short":    d[:DataHeaderLen-1],
		"sidr":     good,
		"flags":    append([]byte{Version, byte(TypeData), 2, 0}, d[4:]...),
		"reserved": append([]byte{Version, byte(TypeData), 0, 1}, d[4:]...),
		"dst qpn":  append([]byte{Version, byte(TypeData), 0, 0, 1}, d[5:]...),
		"src qpn":  append(append([]byte(nil), d[:8]...), append([]byte{1}, d[9:]...)...),
		"version":  append([]byte{0}, d[1:]...),
	} {
		if _, err := ParseData(b, &h); !errors.Is(err, ErrMalformed) {
			t.Errorf("data %s: %v", name, err)
		}
	}
	if Kind(nil) != 0 || Kind(good) != TypeREP || Kind(d[:]) != TypeData || Kind([]byte{9, 1}) != 0 {
		t.Error("Kind")
	}
}
