package main

import (
	"errors"
	"syscall"
)

var (
	errEINVAL = syscall.EINVAL
	errENOMEM = syscall.ENOMEM
)

// errnoOf finds the errno inside err.
func errnoOf(err error) (int, bool) {
	var e syscall.Errno
	if errors.As(err, &e) {
		return int(e), true
	}
	return 0, false
}
