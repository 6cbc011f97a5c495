package soft

import "unsafe"

// sliceWithin reports whether b lies inside the memory of region (between
// its first byte and its last), so a work request cannot name memory outside
// the region it cites.
func sliceWithin(b, region []byte) bool {
	if len(b) == 0 {
		return true
	}
	if len(region) == 0 {
		return false
	}
	start := uintptr(unsafe.Pointer(unsafe.SliceData(region)))
	p := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	return p >= start && p+uintptr(len(b)) <= start+uintptr(len(region))
}
