package main

import (
	"bytes"
	"context"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/cmrt/cmrt/fabric/soft"
)

// TestScrape starts the server, makes three connections (one rejected),
// and scrapes /metrics over HTTP.
func TestScrape(t *testing.T) {
	conns := soft.Traffic().Connections // process-wide: other tests and runs count too
	a, err := start("127.0.0.1:0", netip.MustParseAddr("127.0.0.1"))
	if err != nil {
		t.Fatal(err)
	}
	defer a.close()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if err := a.connect(ctx, 3); err != nil {
		t.Fatal(err)
	}
	want := `
# HELP cmrt_calls_total CM calls on ids, by call and errno (0: success).
# TYPE cmrt_calls_total counter
cmrt_calls_total{call="accept",errno="0"} 2
cmrt_calls_total{call="bind",errno="0"} 1
cmrt_calls_total{call="connect",errno="0"} 3
cmrt_calls_total{call="create",errno="0"} 4
cmrt_calls_total{call="destroy",errno="0"} 6
cmrt_calls_total{call="disconnect",errno="0"} 2
cmrt_calls_total{call="listen",errno="0"} 1
cmrt_calls_total{call="reject",errno="0"} 1
cmrt_calls_total{call="resolve_addr",errno="0"} 3
cmrt_calls_total{call="resolve_route",errno="0"} 3
# HELP cmrt_events_total CM events handed to the user, by type and status.
# TYPE cmrt_events_total counter
cmrt_events_total{status="-104",type="RDMA_CM_EVENT_REJECTED"} 1
cmrt_events_total{status="0",type="RDMA_CM_EVENT_ADDR_RESOLVED"} 3
cmrt_events_total{status="0",type="RDMA_CM_EVENT_CONNECT_REQUEST"} 3
cmrt_events_total{status="0",type="RDMA_CM_EVENT_DISCONNECTED"} 4
cmrt_events_total{status="0",type="RDMA_CM_EVENT_ESTABLISHED"} 4
cmrt_events_total{status="0",type="RDMA_CM_EVENT_ROUTE_RESOLVED"} 3
# HELP cmrt_ids Ids that exist (created and not destroyed), by port space and state.
# TYPE cmrt_ids gauge
cmrt_ids{port_space="RDMA_PS_TCP",state="LISTEN"} 1
# HELP cmrt_reactor_events_total Events and work completions the reactor dispatched.
# TYPE cmrt_reactor_events_total counter
cmrt_reactor_events_total{reactor="server"} 7
# HELP cmrt_fabric_connections_total Connections established.
# TYPE cmrt_fabric_connections_total counter
cmrt_fabric_connections_total{fabric="soft"} ` + strconv.FormatUint(conns+4, 10) + `
`
	url := "http://" + a.ln.Addr().String() + "/metrics"
	if err := testutil.ScrapeAndCompare(url, strings.NewReader(want),
		"cmrt_calls_total", "cmrt_events_total", "cmrt_ids", "cmrt_reactor_events_total", "cmrt_fabric_connections_total"); err != nil {
		t.Error(err)
	}
}

// TestOnce runs the command with -once: it prints the metrics, the Go
// runtime's among them.
func TestOnce(t *testing.T) {
	var out, errs bytes.Buffer
	if rc := run([]string{"-once", "-listen", "127.0.0.1:0", "-n", "2"}, &out, &errs); rc != 0 {
		t.Fatalf("exit %d, stderr %s", rc, errs.String())
	}
	for _, want := range []string{`cmrt_events_total{status="-104",type="RDMA_CM_EVENT_REJECTED"} 1`, "go_goroutines ", "cmrt_reactor_handler_duration_seconds_bucket"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}
