// Package goid tells which goroutine is running. It is slow (microseconds:
// it formats the goroutine's stack header), so the runtime uses it only
// where identity decides between waiting and deadlocking: once per
// long-lived handler goroutine, and when Destroy finds a handler running.
package goid

import "runtime"

// ID returns the running goroutine's id.
func ID() uint64 {
	var buf [64]byte
	n := runtime.Stack(buf[:], false)
	const prefix = "goroutine "
	if n <= len(prefix) {
		return 0
	}
	var g uint64
	for _, c := range buf[len(prefix):n] {
		if c < '0' || c > '9' {
			break
		}
		g = g*10 + uint64(c-'0')
	}
	return g
}
