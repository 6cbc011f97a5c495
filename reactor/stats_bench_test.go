package reactor_test

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/cmrt/cmrt/reactor/promcollector"
)

// benchCollected is benchDispatch with a Prometheus collector registered
// (reactor/promcollector): it counts every record of the default journal,
// which the benchmark's ids record into, and is scraped once at the end.
// Against BenchmarkDispatchInline and BenchmarkDispatchPool4 of the same
// run it gives what registering the collector costs a dispatch.
func benchCollected(b *testing.B, workers int) {
	c := promcollector.New()
	defer c.Close()
	reg := prometheus.NewRegistry()
	reg.MustRegister(c)
	benchDispatch(b, workers)
	if n, err := testutil.GatherAndCount(reg, "cmrt_events_total"); err != nil || n == 0 {
		b.Fatalf("scrape: %d series, %v", n, err)
	}
}

func BenchmarkDispatchInlineCollected(b *testing.B) { benchCollected(b, 0) }
func BenchmarkDispatchPool4Collected(b *testing.B)  { benchCollected(b, 4) }
