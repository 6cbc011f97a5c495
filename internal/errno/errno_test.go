package errno

import (
	"errors"
	"io"
	"syscall"
	"testing"
)

func TestSentinelMatchesItsErrno(t *testing.T) {
	s := New("x: closed", syscall.EBADF)
	tests := []struct {
		name   string
		err    error
		target error
		want   bool
	}{
		{"itself", s, s, true},
		{"its errno", s, syscall.EBADF, true},
		{"another errno", s, syscall.EINVAL, false},
		{"wrapped with %w", errors.Join(io.EOF, s), syscall.EBADF, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := errors.Is(tt.err, tt.target); got != tt.want {
				t.Fatalf("errors.Is(%v, %v) = %v, want %v", tt.err, tt.target, got, tt.want)
			}
		})
	}
	if s.Error() != "x: closed" || s.Errno() != syscall.EBADF {
		t.Fatalf("got %q %v", s.Error(), s.Errno())
	}
}

func TestWrapMatchesEveryCauseAndKeepsItsMessage(t *testing.T) {
	s := New("x: short write", syscall.ENODATA)
	err := Wrap("x: write 12 of 40 bytes", s, nil, syscall.EAGAIN)
	if err.Error() != "x: write 12 of 40 bytes" {
		t.Fatalf("message %q", err.Error())
	}
	for _, target := range []error{s, syscall.ENODATA, syscall.EAGAIN} {
		if !errors.Is(err, target) {
			t.Errorf("errors.Is(err, %v) = false", target)
		}
	}
	if errors.Is(err, syscall.EINVAL) {
		t.Error("matches EINVAL, which is none of its causes")
	}
	var se *Error
	if !errors.As(err, &se) || se != s {
		t.Fatalf("errors.As found %v, want the sentinel", se)
	}
}
