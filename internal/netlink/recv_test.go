package netlink

import (
	"errors"
	"net/netip"
	"syscall"
	"testing"
)

// countRecvfrom counts the recvfrom calls on fd until the test ends.
func countRecvfrom(t *testing.T, fd int) *int {
	t.Helper()
	n := new(int)
	old := sysRecvfrom
	sysRecvfrom = func(f int, p []byte, flags int) (int, uint32, error) {
		if f == fd {
			*n++
		}
		return old(f, p, flags)
	}
	t.Cleanup(func() { sysRecvfrom = old })
	return n
}

// TestSmallAnswerOneRecv checks that the answer to a route or neighbour
// lookup is read with one recvfrom(2), not a peek and a read: the software
// fabric makes two route lookups per connection.
func TestSmallAnswerOneRecv(t *testing.T) {
	c, err := Dial()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	lo := netip.MustParseAddr("127.0.0.1")
	for _, tc := range []struct {
		name string
		call func() error
	}{
		{"route", func() error { _, err := c.RouteLookup(lo, netip.Addr{}); return err }},
		{"route, oif", func() error { _, err := c.RouteLookupOIF(lo, lo, 1); return err }},
		{"neighbour absent", func() error {
			_, err := c.NeighGet(1, netip.MustParseAddr("127.0.0.77"))
			if errors.Is(err, syscall.ENOENT) {
				return nil // the kernel's answer: one NLMSG_ERROR
			}
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := countRecvfrom(t, c.s.fd)
			for k := 0; k < 3; k++ {
				if err := tc.call(); err != nil {
					t.Fatal(err)
				}
			}
			if *n != 3 {
				t.Fatalf("3 lookups made %d recvfrom calls, want 3", *n)
			}
		})
	}
}
