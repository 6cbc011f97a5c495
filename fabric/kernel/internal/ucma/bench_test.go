package ucma

import (
	"testing"
)

func benchConnect(tb testing.TB) *Connect {
	c := &Connect{ID: 1, Param: ConnParam{QPNum: 0x1234, ResponderResources: 1, InitiatorDepth: 1,
		RetryCount: 7, RNRRetryCount: 7, Valid: 1}, ECE: ECE{VendorID: 0x15b3}}
	if err := c.Param.SetPrivateData(pattern(56, 0)); err != nil {
		tb.Fatal(err)
	}
	return c
}

func BenchmarkEncodeConnect(b *testing.B) {
	c := benchConnect(b)
	buf := make([]byte, MaxCommandSize)
	b.ReportAllocs()
	b.SetBytes(int64(c.Size()))
	for b.Loop() {
		if _, err := c.Encode(buf, 0); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkEncodeResolveAddr(b *testing.B) {
	c := &ResolveAddr{ID: 1, TimeoutMs: 2000, Src: mustIP(b, ap6ll), Dst: IBSockaddr(testIB)}
	buf := make([]byte, MaxCommandSize)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := c.Encode(buf, 0); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDecodeEvent(b *testing.B) {
	img := eventConnImage()
	var e Event
	b.ReportAllocs()
	b.SetBytes(int64(len(img)))
	for b.Loop() {
		if err := e.Decode(img); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDecodeQueryAddr(b *testing.B) {
	img := queryAddrImage()
	var r QueryAddrResp
	b.ReportAllocs()
	for b.Loop() {
		if err := r.Decode(img); err != nil {
			b.Fatal(err)
		}
	}
}

// TestNoAllocs makes the benchmarks' 0 allocs/op a test that can fail.
func TestNoAllocs(t *testing.T) {
	c := benchConnect(t)
	ra := &ResolveAddr{ID: 1, TimeoutMs: 2000, Src: mustIP(t, ap6ll), Dst: IBSockaddr(testIB)}
	buf := make([]byte, MaxCommandSize)
	img, qimg := eventConnImage(), queryAddrImage()
	var e Event
	var q QueryAddrResp
	for name, fn := range map[string]func(){
		"Connect.Encode":        func() { _, _ = c.Encode(buf, 0) },
		"ResolveAddr.Encode":    func() { _, _ = ra.Encode(buf, 0) },
		"Event.Decode":          func() { _ = e.Decode(img) },
		"QueryAddrResp.Decode":  func() { _ = q.Decode(qimg) },
		"Connect.Encode(short)": func() { _, _ = c.Encode(buf[:10], 0) },
	} {
		if n := testing.AllocsPerRun(100, fn); n != 0 {
			t.Errorf("%s: %v allocs/op, want 0", name, n)
		}
	}
}
