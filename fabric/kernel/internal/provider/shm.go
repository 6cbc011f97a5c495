package provider

import (
	"sync/atomic"
	"unsafe"
)

// Shared-memory access for the queues drivers map into the process. The
// kernel reads and writes the same words concurrently, so the words that
// pass ownership of a slot (indices, valid flags) are accessed atomically:
// an atomic store publishes every earlier plain store to the slot, and an
// atomic load orders every later plain load of it (Go's atomics are
// sequentially consistent, stronger than the acquire/release the drivers
// use).

// LoadU32 atomically loads the 32-bit word at b[off:off+4], which must be
// 4-byte aligned.
func LoadU32(b []byte, off int) uint32 {
	_ = b[off+3]
	return atomic.LoadUint32((*uint32)(unsafe.Pointer(&b[off])))
}

// StoreU32 atomically stores v at b[off:off+4], 4-byte aligned.
func StoreU32(b []byte, off int, v uint32) {
	_ = b[off+3]
	atomic.StoreUint32((*uint32)(unsafe.Pointer(&b[off])), v)
}

// Aligned reports whether b[off] is aligned to n bytes.
func Aligned(b []byte, off, n int) bool {
	return uintptr(unsafe.Pointer(unsafe.SliceData(b)))%uintptr(n) == 0 && off%n == 0
}
