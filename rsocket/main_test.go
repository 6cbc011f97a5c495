package rsocket

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/cmrt/cmrt/fabric/soft"
	"github.com/cmrt/cmrt/id"
)

// TestMain checks, after the tests, that no goroutine, engine or id
// outlived them once the software fabric wound down.
func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		err := waitEngines(ctx)
		if err == nil {
			err = soft.Default().QuiesceContext(ctx)
		}
		cancel()
		if err == nil {
			err = goleak.Find()
		}
		if err == nil && id.Live() != 0 {
			err = fmt.Errorf("%d ids still exist", id.Live())
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "leak check:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// waitEngines waits until every engine has stopped.
func waitEngines(ctx context.Context) error {
	for {
		engines.Lock()
		n := len(engines.m)
		engines.Unlock()
		if n == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%d engines still run", n)
		case <-time.After(5 * time.Millisecond):
		}
	}
}
