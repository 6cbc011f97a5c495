package netlink

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the run if any test leaves a goroutine behind (the Monitor
// has none of its own; Next's context hook must be released).
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
