package promcollector_test

import (
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/cmrt/cmrt/fabric/soft"
	"github.com/cmrt/cmrt/id/journal"
	"github.com/cmrt/cmrt/reactor"
	"github.com/cmrt/cmrt/reactor/promcollector"
)

// TestScriptedFlow scrapes the collector after the scripted flow (connect,
// reject, disconnect, overload: see flow) and checks every count.
func TestScriptedFlow(t *testing.T) {
	before := soft.Traffic() // process-wide: other runs (-count) count too
	j := journal.New(64)     // smaller than the flow: 17 records dropped
	var sampled atomic.Uint64
	stop := j.Observe(func(r journal.Record) {
		if r.Kind == journal.KindEvent && r.Seq%reactor.LatencySampling == 0 {
			sampled.Add(1)
		}
	})
	defer stop()
	c := promcollector.New(promcollector.WithJournal(j))
	defer c.Close()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	f := runFlow(t, j, func(s, cl *reactor.Reactor) {
		for name, r := range map[string]*reactor.Reactor{"server": s, "client": cl} {
			if err := c.AddReactor(name, r); err != nil {
				t.Fatal(err)
			}
		}
	})
	// 8 ids created (a listener, 7 clients); 7 more born from requests
	// (not created by a call), of which 7 destroyed by the server: 2 on
	// DISCONNECTED, 5 rejected.
	want := `
# HELP cmrt_calls_total CM calls on ids, by call and errno (0: success).
# TYPE cmrt_calls_total counter
cmrt_calls_total{call="accept",errno="0"} 2
cmrt_calls_total{call="bind",errno="0"} 1
cmrt_calls_total{call="connect",errno="0"} 7
cmrt_calls_total{call="create",errno="0"} 8
cmrt_calls_total{call="destroy",errno="0"} 7
cmrt_calls_total{call="disconnect",errno="0"} 2
cmrt_calls_total{call="listen",errno="0"} 1
cmrt_calls_total{call="reject",errno="0"} 5
cmrt_calls_total{call="resolve_addr",errno="0"} 7
cmrt_calls_total{call="resolve_route",errno="0"} 7
# HELP cmrt_events_total CM events handed to the user, by type and status.
# TYPE cmrt_events_total counter
cmrt_events_total{status="-104",type="RDMA_CM_EVENT_REJECTED"} 5
cmrt_events_total{status="0",type="RDMA_CM_EVENT_ADDR_RESOLVED"} 7
cmrt_events_total{status="0",type="RDMA_CM_EVENT_CONNECT_REQUEST"} 7
cmrt_events_total{status="0",type="RDMA_CM_EVENT_DISCONNECTED"} 4
cmrt_events_total{status="0",type="RDMA_CM_EVENT_ESTABLISHED"} 4
cmrt_events_total{status="0",type="RDMA_CM_EVENT_ROUTE_RESOLVED"} 7
# HELP cmrt_call_cancels_total Synchronous CM calls abandoned by their context.
# TYPE cmrt_call_cancels_total counter
cmrt_call_cancels_total 0
# HELP cmrt_journal_records_total Records added to the journals (calls, events and cancels).
# TYPE cmrt_journal_records_total counter
cmrt_journal_records_total 81
# HELP cmrt_journal_dropped_records_total Journal records overwritten in the ring before anyone read them.
# TYPE cmrt_journal_dropped_records_total counter
cmrt_journal_dropped_records_total 17
# HELP cmrt_journal_uncounted_records_total Journal records not counted in cmrt_events_total or cmrt_calls_total: more distinct keys than the tally holds.
# TYPE cmrt_journal_uncounted_records_total counter
cmrt_journal_uncounted_records_total 0
# HELP cmrt_ids Ids that exist (created and not destroyed), by port space and state.
# TYPE cmrt_ids gauge
cmrt_ids{port_space="RDMA_PS_TCP",state="DISCONNECTED"} 2
cmrt_ids{port_space="RDMA_PS_TCP",state="FAILED"} 5
cmrt_ids{port_space="RDMA_PS_TCP",state="LISTEN"} 1
# HELP cmrt_reactor_channels Channels and completion queues registered with the reactor.
# TYPE cmrt_reactor_channels gauge
cmrt_reactor_channels{reactor="client"} 1
cmrt_reactor_channels{reactor="server"} 1
# HELP cmrt_reactor_events_total Events and work completions the reactor dispatched.
# TYPE cmrt_reactor_events_total counter
cmrt_reactor_events_total{reactor="client"} 23
cmrt_reactor_events_total{reactor="server"} 11
# HELP cmrt_reactor_pending_events Events taken from channels and not yet handled: the reactor's queue depth.
# TYPE cmrt_reactor_pending_events gauge
cmrt_reactor_pending_events{reactor="client"} 0
cmrt_reactor_pending_events{reactor="server"} 0
# HELP cmrt_reactor_overloads_total Times the reactor paused reading because MaxPending events waited for handlers.
# TYPE cmrt_reactor_overloads_total counter
cmrt_reactor_overloads_total{reactor="client"} 0
cmrt_reactor_overloads_total{reactor="server"} 1
# HELP cmrt_reactor_handler_panics_total Panics recovered from handlers.
# TYPE cmrt_reactor_handler_panics_total counter
cmrt_reactor_handler_panics_total{reactor="client"} 0
cmrt_reactor_handler_panics_total{reactor="server"} 0
# HELP cmrt_reactor_handler_errors_total Errors returned by handlers.
# TYPE cmrt_reactor_handler_errors_total counter
cmrt_reactor_handler_errors_total{reactor="client"} 0
cmrt_reactor_handler_errors_total{reactor="server"} 0
` + fabricWant(before, soft.Counters{Connections: 4})
	names := []string{"cmrt_calls_total", "cmrt_events_total", "cmrt_call_cancels_total", "cmrt_journal_records_total",
		"cmrt_journal_dropped_records_total", "cmrt_journal_uncounted_records_total", "cmrt_ids",
		"cmrt_reactor_channels", "cmrt_reactor_events_total", "cmrt_reactor_pending_events", "cmrt_reactor_overloads_total",
		"cmrt_reactor_handler_panics_total", "cmrt_reactor_handler_errors_total",
		"cmrt_fabric_connections_total", "cmrt_fabric_completions_total"}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), names...); err != nil {
		t.Error(err)
	}
	// No QP, no data; but an initiator asking for MPA P2P mode sends its
	// peer an RTR message on the data stream (a zero-length Write), and
	// whether it does is the fabric's choice. It repeats it while its
	// peer is silent (up to 4 times, the first after 10 ms): a loaded
	// machine that keeps two connections open that long sees repeats, and
	// a repeat sent as the peer disconnects may never be read. So: at most
	// 5 RTRs on each of the two connected clients, no more received than
	// sent, and no bytes without messages.
	const maxRTRs = 2 * (1 + 4)
	sb, rb := value(t, reg, "cmrt_fabric_sent_bytes_total", "fabric", "soft"), value(t, reg, "cmrt_fabric_received_bytes_total", "fabric", "soft")
	sm, rm := value(t, reg, "cmrt_fabric_sent_messages_total", "fabric", "soft"), value(t, reg, "cmrt_fabric_received_messages_total", "fabric", "soft")
	sw := value(t, reg, "cmrt_fabric_sent_writes_total", "fabric", "soft") - float64(before.SentWrites)
	sb -= float64(before.SentBytes)
	rb -= float64(before.ReceivedBytes)
	sm -= float64(before.SentMessages)
	rm -= float64(before.ReceivedMessages)
	if rb > sb || rm > sm || sm > maxRTRs || (sm == 0) != (sb == 0) || (rm == 0) != (rb == 0) {
		t.Errorf("data path: sent %v bytes in %v messages, received %v in %v; want no more received than sent, at most %d messages (RTRs)", sb, sm, rb, rm, maxRTRs)
	}
	if sw > sm || (sw == 0) != (sb == 0) {
		t.Errorf("data path: %v bytes in %v messages sent with %v writes; want a write for some bytes, none without, and no more writes than these short messages", sb, sm, sw)
	}

	// The handler latency histograms: one per reactor, together counting
	// the events whose journal sequence number is a multiple of
	// LatencySampling (which may be none of this flow's: with 64, the
	// flow's 80-odd records hold one multiple, record 64, not always an
	// event).
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var timed uint64
	histograms := 0
	for _, mf := range mfs {
		if mf.GetName() != "cmrt_reactor_handler_duration_seconds" {
			continue
		}
		for _, m := range mf.GetMetric() {
			h := m.GetHistogram()
			histograms++
			timed += h.GetSampleCount()
			if b := h.GetBucket(); len(b) != 21 || b[len(b)-1].GetCumulativeCount() > h.GetSampleCount() {
				t.Errorf("histogram %v", h)
			}
		}
	}
	if histograms != 2 || timed != sampled.Load() {
		t.Errorf("%d histograms, %d handlers timed; want 2 (one per reactor) and %d (events with a sequence number divisible by %d)", histograms, timed, sampled.Load(), reactor.LatencySampling)
	}

	f.destroy(t)
	if n := testutil.CollectAndCount(c, "cmrt_ids"); n != 0 {
		t.Errorf("%d cmrt_ids series once every id is destroyed", n)
	}
	if got := value(t, reg, "cmrt_calls_total", "call", "destroy"); got != 15 {
		t.Errorf("%v destroy calls in all, want 15", got)
	}
}

// value gathers reg and returns the value of the counter or gauge name
// whose label has the value v.
func value(t *testing.T, reg prometheus.Gatherer, name, label, v string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == label && l.GetValue() == v {
					if m.GetCounter() != nil {
						return m.GetCounter().GetValue()
					}
					return m.GetGauge().GetValue()
				}
			}
		}
	}
	t.Fatalf("no %s{%s=%q}", name, label, v)
	return 0
}

// fabricWant is the expected text of the soft fabric's connections and
// completions: before plus delta.
func fabricWant(before, delta soft.Counters) string {
	return fmt.Sprintf(`# HELP cmrt_fabric_completions_total Work completions produced, successful or not.
# TYPE cmrt_fabric_completions_total counter
cmrt_fabric_completions_total{fabric="soft"} %d
# HELP cmrt_fabric_connections_total Connections established.
# TYPE cmrt_fabric_connections_total counter
cmrt_fabric_connections_total{fabric="soft"} %d
`, before.Completions+delta.Completions, before.Connections+delta.Connections)
}

// TestLint checks the metric names and help against Prometheus'
// conventions (promlint).
func TestLint(t *testing.T) {
	c := promcollector.New()
	defer c.Close()
	problems, err := testutil.CollectAndLint(c)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("%s: %s", p.Metric, p.Text)
	}
}

// TestAddReactor checks AddReactor's errors and RemoveReactor.
func TestAddReactor(t *testing.T) {
	c := promcollector.New(promcollector.WithJournal(journal.New(1)))
	defer c.Close()
	r, err := reactor.New()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(t.Context())
	if err := c.AddReactor("a", nil); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("nil reactor: %v", err)
	}
	if err := c.AddReactor("a", r); err != nil {
		t.Fatal(err)
	}
	if err := c.AddReactor("a", r); !errors.Is(err, syscall.EEXIST) {
		t.Errorf("same name twice: %v", err)
	}
	if n := testutil.CollectAndCount(c, "cmrt_reactor_events_total"); n != 1 {
		t.Errorf("%d reactor series, want 1", n)
	}
	c.RemoveReactor("a")
	if n := testutil.CollectAndCount(c, "cmrt_reactor_events_total"); n != 0 {
		t.Errorf("%d reactor series after RemoveReactor, want 0", n)
	}
	c.Close()
	c.Close()
}
