//go:build !race

package rsocket

import (
	"net"
	"testing"

	"golang.org/x/net/nettest"
)

// TestUnmarkedPeers runs the conformance suite between ends that speak
// exactly as rsockets does (no connFlagMarked): each reads its target SGL
// entries at every credit message, as a C peer has them read. Those reads
// may overlap the peer's next write of an entry, which the race detector
// reports (rightly: it is rsockets' protocol), so this runs without it;
// the VM's interop tests run the same path against C.
func TestUnmarkedPeers(t *testing.T) {
	unmarked := func(c *config) { c.unmarked = true }
	nettest.TestConn(t, func() (c1, c2 net.Conn, stop func(), err error) {
		a, b, s := pipe(t, unmarked, WithRecvBuffer(8192), WithRQSize(16))
		if a.peer.Flags&connFlagMarked != 0 || b.peer.Flags&connFlagMarked != 0 {
			t.Fatal("a peer announced marked credits")
		}
		return a, b, s, nil
	})
}
