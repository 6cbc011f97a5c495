package uverbs

import (
	"bytes"
	"errors"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// Write and RawWrite (the doorbell's system call) issue one write(2) of the
// whole message and report the kernel's errno and short writes the same
// way; neither allocates.
func TestWriteAndRawWrite(t *testing.T) {
	for _, tc := range []struct {
		name  string
		write func(int, []byte) error
	}{{"Write", Write}, {"RawWrite", RawWrite}} {
		t.Run(tc.name, func(t *testing.T) {
			var p [2]int
			if err := unix.Pipe2(p[:], unix.O_CLOEXEC|unix.O_NONBLOCK); err != nil {
				t.Fatal(err)
			}
			defer unix.Close(p[0])
			msg := (&PostSend{Handle: 7}).mustEncode(t)
			if err := tc.write(p[1], msg); err != nil {
				t.Fatal(err)
			}
			got := make([]byte, 2*len(msg))
			n, err := unix.Read(p[0], got)
			if err != nil || !bytes.Equal(got[:n], msg) {
				t.Fatalf("read %x (%v), want %x", got[:n], err, msg)
			}
			if a := testing.AllocsPerRun(100, func() {
				_ = tc.write(p[1], msg)
				_, _ = unix.Read(p[0], got)
			}); a != 0 {
				t.Fatalf("%v allocations per write", a)
			}
			// A full pipe refuses the message: its errno comes back.
			size, _ := unix.FcntlInt(uintptr(p[1]), unix.F_GETPIPE_SZ, 0)
			if _, err := unix.Write(p[1], make([]byte, size)); err != nil {
				t.Fatal(err)
			}
			if err := tc.write(p[1], msg); !errors.Is(err, syscall.EAGAIN) {
				t.Fatalf("write to a full pipe: %v, want EAGAIN", err)
			}
			unix.Close(p[1])
			if err := tc.write(p[1], msg); !errors.Is(err, syscall.EBADF) {
				t.Fatalf("write to a closed descriptor: %v, want EBADF", err)
			}
		})
	}
}

// Doorbell on a fake context goes to its writer, as Write does.
func TestFakeDoorbell(t *testing.T) {
	var got [][]byte
	c := NewFakeContext(func(m []byte) error { got = append(got, append([]byte(nil), m...)); return nil }, -1)
	if err := c.Doorbell([]byte{1, 2, 3, 4}); err != nil {
		t.Fatal(err)
	}
	if err := c.Write([]byte{5, 6, 7, 8}); err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0][0] != 1 || got[1][0] != 5 {
		t.Fatalf("writer saw %x", got)
	}
}

// Exec on a fake context fails with ErrClosed until SetFakeExec, then
// hands the encoded command to the function and returns its error.
func TestFakeExec(t *testing.T) {
	c := NewFakeContext(func([]byte) error { return nil }, -1)
	if _, err := c.Exec(&ModifyQP{Handle: 7}); !errors.Is(err, ErrClosed) {
		t.Fatalf("Exec without SetFakeExec: %v, want ErrClosed", err)
	}
	var got []byte
	var fail error = syscall.EINVAL
	c.SetFakeExec(func(m []byte) error { got = append([]byte(nil), m...); return fail })
	if _, err := c.Exec(&ModifyQP{Handle: 7, Attr: QPAttr{State: QPStateErr}}); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("Exec: %v, want the function's EINVAL", err)
	}
	h, err := DecodeHeader(got)
	if err != nil || h.Cmd != CmdModifyQP || len(got) != HeaderSize+modifyQPSize ||
		ne.Uint32(got[HeaderSize+64:]) != 7 || got[HeaderSize+96] != QPStateErr {
		t.Fatalf("command %x (%v)", got, err)
	}
	fail = nil
	if r, err := c.Exec(&ModifyQP{Handle: 7}); err != nil || len(r) != 0 {
		t.Fatalf("Exec: %x, %v", r, err)
	}
}

func (c *PostSend) mustEncode(t *testing.T) []byte {
	t.Helper()
	b := make([]byte, PostSendSize)
	if _, err := c.Encode(b, 0); err != nil {
		t.Fatal(err)
	}
	return b
}
