//go:build !race

package rsocket

import (
	"io"
	"testing"
	"time"
)

// TestMessageAllocs checks that a message costs no allocation in either
// mode: the Write with Immediate goes from the connection's own work
// request, as the Write and Send do. Allocations are counted process-wide,
// the engine's loop included; the race detector allocates, hence the
// build tag (run it with go test without -race).
func TestMessageAllocs(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			c1, c2, stop := pipe(t, tr.opts...)
			defer stop()
			c1.SetDeadline(time.Now().Add(20 * time.Second))
			c2.SetDeadline(time.Now().Add(20 * time.Second))
			b, got := make([]byte, 64), make([]byte, 64)
			var err error
			n := testing.AllocsPerRun(1000, func() {
				if _, err = c1.Write(b); err == nil {
					_, err = io.ReadFull(c2, got)
				}
			})
			if err != nil {
				t.Fatal(err)
			}
			// Not 0: the runtime allocates now and then; one allocation
			// per message shows as >= 1.
			if n >= 0.5 {
				t.Fatalf("%.2f allocations per message", n)
			}
		})
	}
}
