package ucma

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/cmrt/cmrt/fabric"
)

func pipe(t *testing.T, flags int) (r, w int) {
	t.Helper()
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC|flags); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(p[0]); unix.Close(p[1]) })
	return p[0], p[1]
}

func readN(t *testing.T, fd, n int) []byte {
	t.Helper()
	b := make([]byte, n+1)
	got, err := unix.Read(fd, b)
	if err != nil || got != n {
		t.Fatalf("read %d bytes (%v), want exactly %d", got, err, n)
	}
	return b[:n]
}

func TestWrite(t *testing.T) {
	r, w := pipe(t, 0)
	if err := Write(w, []byte("0123456789ab")); err != nil {
		t.Fatal(err)
	}
	if got := readN(t, r, 12); string(got) != "0123456789ab" {
		t.Errorf("read %q", got)
	}

	err := Write(-1, []byte{1})
	var errno syscall.Errno
	if !errors.As(err, &errno) || errno != syscall.EBADF || !errors.Is(err, syscall.EBADF) {
		t.Errorf("fd -1: err %#v, want syscall.Errno EBADF", err)
	}
	if err := Write(r, []byte{1}); !errors.Is(err, syscall.EBADF) {
		t.Errorf("read end: err %v, want EBADF", err)
	}
}

func TestWriteShort(t *testing.T) {
	_, w := pipe(t, unix.O_NONBLOCK)
	size, err := unix.FcntlInt(uintptr(w), unix.F_SETPIPE_SZ, 4096)
	if err != nil {
		t.Skipf("F_SETPIPE_SZ: %v", err)
	}
	err = Write(w, make([]byte, 2*size))
	if !errors.Is(err, ErrShortWrite) || !errors.Is(err, syscall.ENODATA) {
		t.Errorf("short write: err %v, want ErrShortWrite/ENODATA", err)
	}
}

func TestOpenMissing(t *testing.T) {
	_, err := openPath(filepath.Join(t.TempDir(), "rdma_cm"))
	if !errors.Is(err, ErrNoDevice) || !errors.Is(err, syscall.ENODEV) || !errors.Is(err, syscall.ENOENT) {
		t.Errorf("missing: err %v, want ErrNoDevice, ENODEV and ENOENT", err)
	}
	if err == nil || !strings.Contains(err.Error(), "no such device file (is the rdma_ucm module loaded?)") {
		t.Errorf("message: %v", err)
	}
	if _, statErr := os.Stat(DevicePath); errors.Is(statErr, fs.ErrNotExist) {
		if _, err := Open(); !errors.Is(err, syscall.ENODEV) || !strings.Contains(err.Error(), DevicePath) {
			t.Errorf("Open without device: %v", err)
		}
	}
}

func TestOpenNotCharDevice(t *testing.T) {
	p := filepath.Join(t.TempDir(), "plain")
	if err := os.WriteFile(p, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := openPath(p); !errors.Is(err, ErrNoDevice) || errors.Is(err, syscall.ENOENT) {
		t.Errorf("regular file: err %v, want ErrNoDevice only", err)
	}
	fd, err := openPath("/dev/null")
	if err != nil {
		t.Fatalf("/dev/null (a character device): %v", err)
	}
	flags, _ := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
	acc, _ := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0)
	unix.Close(fd)
	if flags&unix.FD_CLOEXEC == 0 || acc&unix.O_ACCMODE != unix.O_RDWR {
		t.Errorf("fd flags %#x fl %#x, want FD_CLOEXEC and O_RDWR", flags, acc)
	}
}

func TestABIVersion(t *testing.T) {
	dir := t.TempDir()
	write := func(s string) string {
		p := filepath.Join(dir, "abi_version")
		if err := os.WriteFile(p, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, tc := range []struct {
		content string
		want    int
		err     error
	}{
		{"4\n", 4, nil},
		{"3", 3, nil},
		{"5\n", 5, syscall.EPERM},
		{"2\n", 2, syscall.EPERM},
		{"x\n", 0, syscall.EPERM},
	} {
		v, err := abiVersionFrom(write(tc.content))
		if v != tc.want || !errors.Is(err, tc.err) || (tc.err != nil && !errors.Is(err, ErrABIVersion)) {
			t.Errorf("%q: %d, %v; want %d, %v", tc.content, v, err, tc.want, tc.err)
		}
	}
	if _, err := abiVersionFrom(filepath.Join(dir, "missing")); !errors.Is(err, syscall.ENOENT) {
		t.Errorf("missing: %v, want ENOENT", err)
	}
}

func TestBuffersExec(t *testing.T) {
	bufs, err := NewBuffers()
	if err != nil {
		t.Fatal(err)
	}
	defer bufs.Close()
	r, w := pipe(t, 0)

	// QUERY(ADDR): the pipe plays the kernel and receives the command.
	resp, err := bufs.Exec(w, &Query{ID: 7, Option: QueryAddr})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp) != 280 {
		t.Fatalf("response length %d, want 280", len(resp))
	}
	cmd := readN(t, r, 24)
	want := make([]byte, 24)
	hdr(want, 19, 16, 280)
	h64(want[8:], 0, uint64(uintptr(unsafe.Pointer(&resp[0])))) // response = the pinned area
	h32(want[8:], 8, 7)
	diff(t, "QUERY via Exec", cmd, want)
	for i, c := range resp {
		if (i >= 272 && i < 276 && c != 0xff) || ((i < 272 || i >= 276) && c != 0) {
			t.Fatalf("response area byte %d = %#x: want zero with ibdev_index preset to -1", i, c)
		}
	}

	// The "kernel" answers a GET_EVENT by writing into the pinned area.
	resp, err = bufs.Exec(w, &GetEvent{})
	if err != nil {
		t.Fatal(err)
	}
	readN(t, r, 16)
	copy(resp, eventConnImage())
	var ev Event
	if err := ev.Decode(resp); err != nil || ev.Conn != eventConnWant().Conn {
		t.Errorf("event through pinned memory: %v", err)
	}
	// The next command sees a zeroed response area.
	resp, err = bufs.Exec(w, &DestroyID{ID: 1})
	if err != nil {
		t.Fatal(err)
	}
	readN(t, r, 24)
	if v, _ := DecodeUint32Resp(resp); v != 0 {
		t.Errorf("stale response bytes: %#x", v)
	}

	if _, err := bufs.Exec(w, &Query{Option: QueryPath, Out: 0xffff}); !errors.Is(err, ErrShortBuffer) {
		t.Errorf("65535-byte response: %v", err)
	}
	if _, err := bufs.Exec(w, &BindIP{Addr: IBSockaddr(testIB)}); !errors.Is(err, ErrAddrFamily) {
		t.Errorf("encode error not returned: %v", err)
	}
	if _, err := bufs.Exec(-1, &GetEvent{}); !errors.Is(err, syscall.EBADF) {
		t.Errorf("bad fd: %v", err)
	}
}

func TestBuffersSetOption(t *testing.T) {
	bufs, err := NewBuffers()
	if err != nil {
		t.Fatal(err)
	}
	defer bufs.Close()
	r, w := pipe(t, 0)
	val := []byte{21}
	if err := bufs.SetOption(w, 3, fabric.OptionLevelID, fabric.OptionAckTimeout, val); err != nil {
		t.Fatal(err)
	}
	cmd := readN(t, r, 32)
	want := make([]byte, 32)
	hdr(want, 14, 24, 0)
	h64(want[8:], 0, uint64(bufs.respAddr())) // optval: staged in the mapping
	h32(want[8:], 8, 3)
	h32(want[8:], 12, 0)
	h32(want[8:], 16, 3)
	h32(want[8:], 20, 1)
	diff(t, "SET_OPTION via Buffers", cmd, want)
	if bufs.resp[0] != 21 {
		t.Errorf("staged value %d, want 21", bufs.resp[0])
	}
	if err := bufs.SetOption(w, 3, 1, 1, make([]byte, bufs.RespCap()+1)); !errors.Is(err, ErrShortBuffer) {
		t.Errorf("oversized value: %v", err)
	}
}

func TestBuffersClose(t *testing.T) {
	bufs, err := NewBuffers()
	if err != nil {
		t.Fatal(err)
	}
	if bufs.RespCap() < OutGetEvent || bufs.RespCap() < OutQueryPath {
		t.Errorf("RespCap %d too small", bufs.RespCap())
	}
	if err := bufs.Close(); err != nil {
		t.Fatal(err)
	}
	if err := bufs.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if _, err := bufs.Exec(1, &GetEvent{}); !errors.Is(err, ErrClosed) || !errors.Is(err, syscall.EBADF) {
		t.Errorf("Exec after Close: %v", err)
	}
	if err := bufs.SetOption(1, 0, 0, 0, nil); !errors.Is(err, ErrClosed) {
		t.Errorf("SetOption after Close: %v", err)
	}
}

// TestDevice runs CREATE_ID / QUERY(ADDR) / DESTROY_ID against the real
// kernel when /dev/infiniband/rdma_cm is present (no RDMA device needed).
func TestDevice(t *testing.T) {
	fd, err := Open()
	if errors.Is(err, ErrNoDevice) || errors.Is(err, syscall.EACCES) {
		t.Skipf("no usable rdma_cm: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if v, err := ABIVersion(); err != nil {
		t.Fatalf("ABIVersion: %d, %v", v, err)
	}
	bufs, err := NewBuffers()
	if err != nil {
		t.Fatal(err)
	}
	defer bufs.Close()
	resp, err := bufs.Exec(fd, &CreateID{UID: 1, PS: fabric.PSTCP})
	if err != nil {
		t.Fatalf("CREATE_ID: %v", err)
	}
	id, _ := DecodeUint32Resp(resp)
	resp, err = bufs.Exec(fd, &Query{ID: id, Option: QueryAddr})
	if err != nil {
		t.Fatalf("QUERY: %v", err)
	}
	var qa QueryAddrResp
	if err := qa.Decode(resp); err != nil {
		t.Errorf("QUERY(ADDR) response: %v", err)
	}
	resp, err = bufs.Exec(fd, &DestroyID{ID: id})
	if err != nil {
		t.Fatalf("DESTROY_ID: %v", err)
	}
	if n, _ := DecodeUint32Resp(resp); n != 0 {
		t.Errorf("events_reported %d, want 0", n)
	}
	if _, err := bufs.Exec(fd, &DestroyID{ID: id}); !errors.Is(err, syscall.ENOENT) && !errors.Is(err, syscall.EINVAL) {
		t.Errorf("second DESTROY_ID: %v, want ENOENT", err)
	}
}
