package kernel

import (
	"bytes"
	"encoding/json"
	"fmt"
	"syscall"
	"testing"

	"github.com/rs/zerolog"
)

// The fabric logs to the logger WithLogger gives, its entries marked
// component=kernel: a switch to the *_IP commands (the kernel answered an
// AF_IB command with ENOSYS) is logged once, at info.
func TestLoggerComponentAndFallback(t *testing.T) {
	var buf bytes.Buffer
	f := New(WithLogger(zerolog.New(&buf)), WithAFIB(true))
	f.afIB, f.afKnown = true, true
	if f.fallback(syscall.EINVAL) || buf.Len() != 0 {
		t.Fatalf("EINVAL taken for a missing command (log %q)", buf.String())
	}
	if !f.fallback(fmt.Errorf("bind: %w", syscall.ENOSYS)) || f.afib() {
		t.Fatal("ENOSYS did not switch to the *_IP commands")
	}
	if f.fallback(syscall.ENOSYS) {
		t.Fatal("switched twice")
	}
	var e map[string]any
	if err := json.Unmarshal(buf.Bytes(), &e); err != nil {
		t.Fatalf("want one log entry, got %q: %v", buf.String(), err)
	}
	if e["component"] != "kernel" || e["level"] != "info" || e["message"] != "the kernel lacks the AF_IB commands: using the *_IP ones" {
		t.Errorf("log entry %v", e)
	}
}
