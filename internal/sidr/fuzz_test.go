package sidr

import (
	"bytes"
	"testing"
)

// FuzzParse feeds arbitrary datagrams to both decoders: they must never
// panic, and whatever they accept must encode back to the same bytes.
func FuzzParse(f *testing.F) {
	req, _ := Append(nil, &Message{Type: TypeREQ, PortSpace: 0x111, TID: 7, QPN: 33000, QKey: 0x01234567, PrivateData: []byte("hello")})
	rep, _ := Append(nil, &Message{Type: TypeREP, Status: StatusReject, PrivateData: make([]byte, MaxREPData)})
	var d [DataHeaderLen + 3]byte
	PutDataHeader(d[:], &DataHeader{DstQPN: MulticastQPN, SrcQPN: 40000, QKey: 0x01234567})
	for _, s := range [][]byte{nil, req, rep, d[:], {1}, {1, 3}} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var m Message
		if err := Parse(b, &m); err == nil {
			out, err := Append(nil, &m)
			if err != nil {
				t.Fatalf("accepted %x but cannot encode it: %v", b, err)
			}
			if !bytes.Equal(out, b) {
				t.Fatalf("round trip\n in %x\nout %x", b, out)
			}
			if len(m.PrivateData) > MaxREQData {
				t.Fatalf("private data %d", len(m.PrivateData))
			}
		}
		var h DataHeader
		if p, err := ParseData(b, &h); err == nil {
			out := make([]byte, DataHeaderLen, DataHeaderLen+len(p))
			PutDataHeader(out, &h)
			if !bytes.Equal(append(out, p...), b) {
				t.Fatalf("data round trip %x", b)
			}
		}
	})
}
