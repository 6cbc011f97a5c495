// Package portrange reads and writes the kernel's ephemeral port range,
// net.ipv4.ip_local_port_range, which the software fabric allocates from
// (as the kernel's rdma_cm does) and which tests and drivers split.
package portrange

import (
	"errors"
	"fmt"
	"os"
)

// File is where the range lives.
const File = "/proc/sys/net/ipv4/ip_local_port_range"

// Default is the kernel's default range, low and high inclusive.
var Default = [2]int{32768, 60999}

// ErrMalformed reports a range that is not two ports, low ≤ high.
var ErrMalformed = errors.New("portrange: malformed range")

// Read returns the range, low and high inclusive.
func Read() (low, high int, err error) {
	b, err := os.ReadFile(File)
	if err != nil {
		return 0, 0, err
	}
	return Parse(b)
}

// Parse parses the file's text: two ports, low ≤ high.
func Parse(b []byte) (low, high int, err error) {
	if _, err := fmt.Sscan(string(b), &low, &high); err != nil {
		return 0, 0, fmt.Errorf("%w: %q: %v", ErrMalformed, b, err)
	}
	if low <= 0 || low > high || high >= 1<<16 {
		return 0, 0, fmt.Errorf("%w: %q", ErrMalformed, b)
	}
	return low, high, nil
}

// ReadOrDefault returns the range, or Default when it cannot be read.
func ReadOrDefault() (low, high int) {
	if low, high, err := Read(); err == nil {
		return low, high
	}
	return Default[0], Default[1]
}

// Write sets the range (root only).
func Write(low, high int) error {
	return os.WriteFile(File, fmt.Appendf(nil, "%d %d\n", low, high), 0)
}
