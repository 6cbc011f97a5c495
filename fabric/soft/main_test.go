package soft_test

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks for leaked goroutines after all tests, and runs a helper
// role instead of the tests when the test binary is re-executed as a second
// process (see process_test.go).
func TestMain(m *testing.M) {
	if role := os.Getenv(helperEnv); role != "" {
		os.Exit(runHelper(role))
	}
	goleak.VerifyTestMain(m)
}
