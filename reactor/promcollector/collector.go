// Package promcollector exports cmrt's counters to Prometheus: a
// prometheus.Collector over the ids of the process, the journals their
// calls and events are recorded in, reactors and the software fabric.
//
// It is a package of its own so that programs that do not want Prometheus
// do not link github.com/prometheus/client_golang: no other package of
// cmrt imports it.
//
// Nothing is counted for the collector on the event path beyond what the
// runtime keeps anyway: the reactors' atomic counters and sampled handler
// latency (reactor.Reactor.Stats, HandlerLatency), the software fabric's
// striped counters (soft.Traffic), and a journal.Tally per journal (a
// lock-free table of atomic counts fed by a journal observer). A scrape
// reads snapshots of them; only counting the live ids by state
// (id.CountLive) visits every id, at scrape time.
//
// Use:
//
//	c := promcollector.New(promcollector.WithReactor("server", r))
//	defer c.Close()
//	prometheus.MustRegister(c)
//	http.Handle("/metrics", promhttp.Handler())
//
// The metrics (all names start with cmrt_; counters end in _total; times
// are in seconds):
//
//	cmrt_ids{port_space,state}                         ids that exist, by port space and state (gauge)
//	cmrt_events_total{type,status}                     events handed to the user, by type and status
//	cmrt_calls_total{call,errno}                       CM calls, by call and errno ("0": success)
//	cmrt_call_cancels_total                            synchronous calls abandoned by their context
//	cmrt_journal_records_total                         records added to the journals
//	cmrt_journal_dropped_records_total                 records overwritten in the journals' rings
//	cmrt_journal_uncounted_records_total               records of keys past a Tally's table
//	cmrt_reactor_channels{reactor}                     channels and queues registered (gauge)
//	cmrt_reactor_events_total{reactor}                 events and completions dispatched
//	cmrt_reactor_pending_events{reactor}               events taken and not yet handled: the queue depth (gauge)
//	cmrt_reactor_overloads_total{reactor}              times reading paused at MaxPending
//	cmrt_reactor_handler_panics_total{reactor}         panics recovered from handlers
//	cmrt_reactor_handler_errors_total{reactor}         errors returned by handlers
//	cmrt_reactor_handler_duration_seconds{reactor}     handler latency, one handler in reactor.LatencySampling (histogram)
//	cmrt_fabric_connections_total{fabric}              connections established
//	cmrt_fabric_sent_bytes_total{fabric}               bytes written to data sockets
//	cmrt_fabric_received_bytes_total{fabric}           bytes read from data sockets
//	cmrt_fabric_sent_writes_total{fabric}              write(2)/writev(2) calls on RC data sockets
//	cmrt_fabric_sent_messages_total{fabric}            messages and datagrams sent
//	cmrt_fabric_received_messages_total{fabric}        messages and datagrams received
//	cmrt_fabric_completions_total{fabric}              work completions produced
//
// Events and calls are counted from when the collector is made: a journal
// observer cannot see records added before. The fabric metrics are the
// software fabric's (fabric="soft"), summed over its instances in the
// process; the kernel fabric's traffic is the device's, which its own
// exporters report.
package promcollector

import (
	"fmt"
	"sort"
	"strconv"
	"sync"
	"syscall"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sys/unix"

	"github.com/cmrt/cmrt/fabric"
	"github.com/cmrt/cmrt/fabric/soft"
	"github.com/cmrt/cmrt/id"
	"github.com/cmrt/cmrt/id/journal"
	"github.com/cmrt/cmrt/reactor"
)

// Collector is a prometheus.Collector of cmrt's metrics. Make it with New,
// register it with a prometheus.Registerer, and Close it when done. It is
// safe for concurrent use.
type Collector struct {
	tallies []tally

	mu       sync.Mutex // guards reactors
	reactors map[string]*reactor.Reactor
	closed   bool
}

// tally is a journal and the counts of its records.
type tally struct {
	j *journal.Journal
	t *journal.Tally
}

type config struct {
	journals []*journal.Journal
	reactors []namedReactor
}

type namedReactor struct {
	name string
	r    *reactor.Reactor
}

// Option configures a Collector.
type Option func(*config)

// WithJournal counts the calls and events recorded in j. Given once or
// more, the collector counts these journals (summed) instead of
// journal.Default, the journal of every id not given one of its own
// (id.WithJournal).
func WithJournal(j *journal.Journal) Option {
	return func(c *config) {
		if j != nil {
			c.journals = append(c.journals, j)
		}
	}
}

// WithReactor exports r's metrics with the label reactor=name, as
// AddReactor does.
func WithReactor(name string, r *reactor.Reactor) Option {
	return func(c *config) { c.reactors = append(c.reactors, namedReactor{name, r}) }
}

// New returns a collector. It starts counting the records of its journals
// at once (journal.Default unless WithJournal is given).
func New(opts ...Option) *Collector {
	var cfg config
	for _, o := range opts {
		o(&cfg)
	}
	if len(cfg.journals) == 0 {
		cfg.journals = []*journal.Journal{journal.Default()}
	}
	c := &Collector{reactors: make(map[string]*reactor.Reactor)}
	seen := make(map[*journal.Journal]bool)
	for _, j := range cfg.journals {
		if !seen[j] {
			seen[j] = true
			c.tallies = append(c.tallies, tally{j: j, t: j.Tally()})
		}
	}
	for _, nr := range cfg.reactors {
		if nr.r != nil {
			c.reactors[nr.name] = nr.r
		}
	}
	return c
}

// AddReactor exports r's metrics with the label reactor=name. A name
// already in use is EEXIST, a nil reactor EINVAL.
func (c *Collector) AddReactor(name string, r *reactor.Reactor) error {
	if r == nil {
		return fmt.Errorf("promcollector: nil reactor: %w", syscall.EINVAL)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, dup := c.reactors[name]; dup {
		return fmt.Errorf("promcollector: reactor %q already added: %w", name, syscall.EEXIST)
	}
	c.reactors[name] = r
	return nil
}

// RemoveReactor stops exporting the reactor added under name (a closed
// reactor's metrics stay readable until then).
func (c *Collector) RemoveReactor(name string) {
	c.mu.Lock()
	delete(c.reactors, name)
	c.mu.Unlock()
}

// Close stops counting the journals' records; the counts so far stay
// exported. It is idempotent.
func (c *Collector) Close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return
	}
	c.closed = true
	for _, t := range c.tallies {
		t.t.Stop()
	}
}

var (
	idsDesc = prometheus.NewDesc("cmrt_ids",
		"Ids that exist (created and not destroyed), by port space and state.", []string{"port_space", "state"}, nil)
	eventsDesc = prometheus.NewDesc("cmrt_events_total",
		"CM events handed to the user, by type and status.", []string{"type", "status"}, nil)
	callsDesc = prometheus.NewDesc("cmrt_calls_total",
		"CM calls on ids, by call and errno (0: success).", []string{"call", "errno"}, nil)
	cancelsDesc = prometheus.NewDesc("cmrt_call_cancels_total",
		"Synchronous CM calls abandoned by their context.", nil, nil)
	recordsDesc = prometheus.NewDesc("cmrt_journal_records_total",
		"Records added to the journals (calls, events and cancels).", nil, nil)
	droppedDesc = prometheus.NewDesc("cmrt_journal_dropped_records_total",
		"Journal records overwritten in the ring before anyone read them.", nil, nil)
	uncountedDesc = prometheus.NewDesc("cmrt_journal_uncounted_records_total",
		"Journal records not counted in cmrt_events_total or cmrt_calls_total: more distinct keys than the tally holds.", nil, nil)

	reactorLabels   = []string{"reactor"}
	rChannelsDesc   = prometheus.NewDesc("cmrt_reactor_channels", "Channels and completion queues registered with the reactor.", reactorLabels, nil)
	rEventsDesc     = prometheus.NewDesc("cmrt_reactor_events_total", "Events and work completions the reactor dispatched.", reactorLabels, nil)
	rPendingDesc    = prometheus.NewDesc("cmrt_reactor_pending_events", "Events taken from channels and not yet handled: the reactor's queue depth.", reactorLabels, nil)
	rOverloadsDesc  = prometheus.NewDesc("cmrt_reactor_overloads_total", "Times the reactor paused reading because MaxPending events waited for handlers.", reactorLabels, nil)
	rPanicsDesc     = prometheus.NewDesc("cmrt_reactor_handler_panics_total", "Panics recovered from handlers.", reactorLabels, nil)
	rErrorsDesc     = prometheus.NewDesc("cmrt_reactor_handler_errors_total", "Errors returned by handlers.", reactorLabels, nil)
	rLatencyDesc    = prometheus.NewDesc("cmrt_reactor_handler_duration_seconds", fmt.Sprintf("Time handlers took, on a sample of one handler in %d.", reactor.LatencySampling), reactorLabels, nil)
	fabricLabels    = []string{"fabric"}
	fConnsDesc      = prometheus.NewDesc("cmrt_fabric_connections_total", "Connections established.", fabricLabels, nil)
	fSentBytesDesc  = prometheus.NewDesc("cmrt_fabric_sent_bytes_total", "Bytes written to data sockets (RC streams after MPA, UD datagrams).", fabricLabels, nil)
	fRecvBytesDesc  = prometheus.NewDesc("cmrt_fabric_received_bytes_total", "Bytes read from data sockets (RC streams after MPA, UD datagrams).", fabricLabels, nil)
	fSentWritesDesc = prometheus.NewDesc("cmrt_fabric_sent_writes_total", "System calls that wrote to RC data sockets: with the messages sent, how many leave per call.", fabricLabels, nil)
	fSentMsgsDesc   = prometheus.NewDesc("cmrt_fabric_sent_messages_total", "RC messages and UD datagrams sent.", fabricLabels, nil)
	fRecvMsgsDesc   = prometheus.NewDesc("cmrt_fabric_received_messages_total", "RC messages and UD datagrams received.", fabricLabels, nil)
	fCompletionDesc = prometheus.NewDesc("cmrt_fabric_completions_total", "Work completions produced, successful or not.", fabricLabels, nil)
)

var allDescs = []*prometheus.Desc{
	idsDesc, eventsDesc, callsDesc, cancelsDesc, recordsDesc, droppedDesc, uncountedDesc,
	rChannelsDesc, rEventsDesc, rPendingDesc, rOverloadsDesc, rPanicsDesc, rErrorsDesc, rLatencyDesc,
	fConnsDesc, fSentBytesDesc, fRecvBytesDesc, fSentWritesDesc, fSentMsgsDesc, fRecvMsgsDesc, fCompletionDesc,
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range allDescs {
		ch <- d
	}
}

// Collect implements prometheus.Collector: it reads a snapshot of every
// counter.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	c.collectIDs(ch)
	c.collectJournals(ch)
	c.collectReactors(ch)
	collectSoft(ch)
}

func (c *Collector) collectIDs(ch chan<- prometheus.Metric) {
	for k, n := range id.CountLive() {
		ch <- prometheus.MustNewConstMetric(idsDesc, prometheus.GaugeValue, float64(n), k.PortSpace.String(), k.State.String())
	}
}

func (c *Collector) collectJournals(ch chan<- prometheus.Metric) {
	type eventKey struct {
		t      fabric.EventType
		status int32
	}
	type callKey struct {
		c     journal.Call
		errno int32
	}
	events := make(map[eventKey]uint64)
	calls := make(map[callKey]uint64)
	var cancels, records, dropped, uncounted uint64
	for _, t := range c.tallies {
		t.t.Each(func(k journal.TallyKey, n uint64) {
			records += n
			switch k.Kind {
			case journal.KindCall:
				calls[callKey{k.Call, k.Status}] += n
			case journal.KindEvent:
				events[eventKey{k.Event, k.Status}] += n
			case journal.KindCancel:
				cancels += n
			}
		})
		u := t.t.Uncounted()
		records += u
		uncounted += u
		if l, size := t.j.Len(), uint64(t.j.Cap()); l > size {
			dropped += l - size
		}
	}
	for k, n := range events {
		ch <- prometheus.MustNewConstMetric(eventsDesc, prometheus.CounterValue, float64(n), eventName(k.t), strconv.Itoa(int(k.status)))
	}
	for k, n := range calls {
		ch <- prometheus.MustNewConstMetric(callsDesc, prometheus.CounterValue, float64(n), k.c.String(), errnoName(k.errno))
	}
	ch <- prometheus.MustNewConstMetric(cancelsDesc, prometheus.CounterValue, float64(cancels))
	ch <- prometheus.MustNewConstMetric(recordsDesc, prometheus.CounterValue, float64(records))
	ch <- prometheus.MustNewConstMetric(droppedDesc, prometheus.CounterValue, float64(dropped))
	ch <- prometheus.MustNewConstMetric(uncountedDesc, prometheus.CounterValue, float64(uncounted))
}

// eventName is rdma_event_str's name of t; user events (id.EventUser,
// which librdmacm has not) are "USER".
func eventName(t fabric.EventType) string {
	if t == fabric.EventUser {
		return "USER"
	}
	return t.String()
}

// errnoName is "0" for success, else the errno's name ("ECONNREFUSED"), or
// its number if it has none.
func errnoName(e int32) string {
	if e == 0 {
		return "0"
	}
	if s := unix.ErrnoName(syscall.Errno(e)); s != "" {
		return s
	}
	return strconv.Itoa(int(e))
}

func (c *Collector) collectReactors(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	names := make([]string, 0, len(c.reactors))
	rs := make([]*reactor.Reactor, 0, len(c.reactors))
	for name := range c.reactors {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		rs = append(rs, c.reactors[name])
	}
	c.mu.Unlock()
	for k, r := range rs {
		name := names[k]
		s := r.Stats()
		ch <- prometheus.MustNewConstMetric(rChannelsDesc, prometheus.GaugeValue, float64(s.Channels), name)
		ch <- prometheus.MustNewConstMetric(rEventsDesc, prometheus.CounterValue, float64(s.Events), name)
		ch <- prometheus.MustNewConstMetric(rPendingDesc, prometheus.GaugeValue, float64(s.Pending), name)
		ch <- prometheus.MustNewConstMetric(rOverloadsDesc, prometheus.CounterValue, float64(s.Overloads), name)
		ch <- prometheus.MustNewConstMetric(rPanicsDesc, prometheus.CounterValue, float64(s.Panics), name)
		ch <- prometheus.MustNewConstMetric(rErrorsDesc, prometheus.CounterValue, float64(s.Errors), name)
		l := r.HandlerLatency()
		buckets := make(map[float64]uint64, len(l.Bounds))
		var cum uint64
		for b, bound := range l.Bounds {
			cum += l.Counts[b]
			buckets[bound.Seconds()] = cum
		}
		ch <- prometheus.MustNewConstHistogram(rLatencyDesc, l.Count, l.Sum.Seconds(), buckets, name)
	}
}

func collectSoft(ch chan<- prometheus.Metric) {
	t := soft.Traffic()
	const name = "soft"
	ch <- prometheus.MustNewConstMetric(fConnsDesc, prometheus.CounterValue, float64(t.Connections), name)
	ch <- prometheus.MustNewConstMetric(fSentBytesDesc, prometheus.CounterValue, float64(t.SentBytes), name)
	ch <- prometheus.MustNewConstMetric(fRecvBytesDesc, prometheus.CounterValue, float64(t.ReceivedBytes), name)
	ch <- prometheus.MustNewConstMetric(fSentWritesDesc, prometheus.CounterValue, float64(t.SentWrites), name)
	ch <- prometheus.MustNewConstMetric(fSentMsgsDesc, prometheus.CounterValue, float64(t.SentMessages), name)
	ch <- prometheus.MustNewConstMetric(fRecvMsgsDesc, prometheus.CounterValue, float64(t.ReceivedMessages), name)
	ch <- prometheus.MustNewConstMetric(fCompletionDesc, prometheus.CounterValue, float64(t.Completions), name)
}
