package rsocket

import (
	"bytes"
	"errors"
	"io"
	"syscall"
	"testing"
)

// TestIOMap maps a buffer on one side and writes into it directly from the
// other, as riomap and riowrite do; a message after the direct write
// orders it before the check (the receiver is not told of direct writes).
func TestIOMap(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) { testIOMap(t, tr.opts) })
	}
}

func testIOMap(t *testing.T, opts []Option) {
	c1, c2, stop := pipe(t, with(opts, WithIOMapSize(2))...)
	defer stop()
	buf := make([]byte, 100<<10)
	if off, err := c2.IOMap(buf, 4096); err != nil || off != 4096 {
		t.Fatalf("IOMap = %d, %v", off, err)
	}
	// The descriptor goes out before this message: once c1 reads it, c1
	// knows the mapping.
	if _, err := c2.Write([]byte("m")); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(c1, make([]byte, 1)); err != nil {
		t.Fatal(err)
	}
	want := make([]byte, len(buf))
	for k := range want {
		want[k] = byte(k * 13)
	}
	if n, err := c1.IOWrite(want[:10], 4096); err != nil || n != 10 {
		t.Fatalf("small IOWrite = %d, %v", n, err)
	}
	if n, err := c1.IOWrite(want[10:], 4096+10); err != nil || n != len(want)-10 {
		t.Fatalf("IOWrite = %d, %v", n, err)
	}
	if n, err := c1.IOWrite(want[:1], 0); !errors.Is(err, syscall.EINVAL) || n != 0 {
		t.Fatalf("IOWrite outside the mapping = %d, %v", n, err)
	}
	if n, err := c1.IOWrite(want[:100], 4096+int64(len(buf))-10); err != nil || n != 10 {
		t.Fatalf("IOWrite across the end = %d, %v", n, err)
	}
	if _, err := c1.Write([]byte("d")); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(c2, make([]byte, 1)); err != nil {
		t.Fatal(err)
	}
	want = append(want[:len(want)-10], want[:10]...)
	if !bytes.Equal(buf, want) {
		t.Fatal("mapped buffer differs")
	}
	if err := c2.IOUnmap(buf); err != nil {
		t.Fatal(err)
	}
	if err := c2.IOUnmap(buf); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("second IOUnmap: %v", err)
	}
}

// TestIOMapNotAccepted: a peer that accepts no mappings gives ENOMEM, as
// riomap does.
func TestIOMapNotAccepted(t *testing.T) {
	c1, _, stop := pipe(t)
	defer stop()
	if _, err := c1.IOMap(make([]byte, 10), 0); !errors.Is(err, syscall.ENOMEM) {
		t.Fatalf("IOMap: %v", err)
	}
}
