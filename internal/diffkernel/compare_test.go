package diffkernel

import (
	"strings"
	"testing"

	"github.com/cmrt/cmrt/id"
	"github.com/cmrt/cmrt/internal/callseq"
)

func epoch(t *testing.T, s string) Epoch {
	t.Helper()
	e, err := ParseEpoch(s)
	if err != nil {
		t.Fatalf("ParseEpoch(%q): %v", s, err)
	}
	return e
}

func op(t *testing.T, s string) callseq.Op {
	t.Helper()
	seq, err := callseq.Parse(s)
	if err != nil || len(seq) != 1 {
		t.Fatalf("Parse(%q): %v", s, err)
	}
	return seq[0]
}

// TestTraceText: a trace reads back as itself.
func TestTraceText(t *testing.T) {
	text := "s0 create udp ch0 => s0/UD[create:ok>IDLE]\n" +
		"s0 resolve_addr unroutable:1 src => s0/UD[resolve_addr:ENETUNREACH>IDLE]\n" +
		"s1 connect pd=0 => s1[connect:ok>CONNECT CONNECT_RESPONSE:0>CONNECT_RESPONSE establish(auto):ok>ESTABLISHED] s2[CONNECT_REQUEST:0>CONNECT_REQUEST]\n" +
		"s2 reject pd=148 => s1[REJECTED:28>FAILED] s2[reject:ok>FAILED]\n" +
		"s3 accept pd=0 => !busy\n" +
		"s4 destroy => -\n" +
		"s5 disconnect => s5[disconnect:errno200>ESTABLISHED cancel>CANCELED] !noid\n" +
		"s1 probe connect pd=0 => ?probe connect_in_ADDR_RESOLVED_(RC):_EINVAL\n"
	tr, err := ParseTrace(text)
	if err != nil {
		t.Fatal(err)
	}
	if got := tr.String(); got != text {
		t.Fatalf("read back:\n%swant\n%s", got, text)
	}
	for _, bad := range []string{"s0 create tcp ch0 s0[create:ok>IDLE]", "s0 create tcp ch0 => s0[create:ok]",
		"s0 create tcp ch0 => s0[create:maybe>IDLE]", "s0 create tcp ch0 => s0[frob:ok>IDLE]", "s0 create tcp ch0 => s0[create:ok>SLEEPY]",
		"s0 create tcp ch0 => x0[create:ok>IDLE]"} {
		if _, err := ParseTrace(bad); err == nil {
			t.Errorf("ParseTrace(%q) succeeded", bad)
		}
	}
}

// TestCompare: the comparison of one epoch, with the equivalences of the
// kernel's flavour, the orders the model allows, IB's deferred
// DISCONNECTED, and what must be told apart.
func TestCompare(t *testing.T) {
	for _, c := range []struct {
		name       string
		fl         Flavour
		op         string
		soft, kern string
		div        string // what differs ("" for nothing)
		used       string // an equivalence that must have applied
		listener   bool   // s0 listens on both sides before op
	}{
		{name: "same", fl: IWARP, op: "s0 bind local:1",
			soft: "s0[bind:ok>ADDR_BOUND]", kern: "s0[bind:ok>ADDR_BOUND]"},
		{name: "errno", fl: IWARP, op: "s0 bind local:1",
			soft: "s0[bind:ok>ADDR_BOUND]", kern: "s0[bind:EADDRINUSE>IDLE]", div: "items"},
		{name: "missing event", fl: IWARP, op: "s0 resolve_addr local:1",
			soft: "s0[resolve_addr:ok>ADDR_QUERY ADDR_RESOLVED:0>ADDR_RESOLVED]", kern: "s0[resolve_addr:ok>ADDR_QUERY]", div: "items"},
		{name: "status", fl: IWARP, op: "s0 connect pd=0",
			soft: "s0[connect:ok>CONNECT REJECTED:-111>FAILED]", kern: "s0[connect:ok>CONNECT REJECTED:-104>FAILED]", div: "items"},
		{name: "event on another id", fl: IWARP, op: "s1 connect pd=0",
			soft: "s1[connect:ok>CONNECT] s2[CONNECT_REQUEST:0>CONNECT_REQUEST]", kern: "s1[connect:ok>CONNECT]", div: "items"},
		{name: "skip", fl: IWARP, op: "s0 listen 0",
			soft: "s0[listen:ok>LISTEN]", kern: "!busy", div: "skip"},
		{name: "IB reject reason", fl: IB, op: "s2 reject pd=0",
			soft: "s1[REJECTED:-104>FAILED] s2[reject:ok>FAILED]", kern: "s1[REJECTED:28>FAILED] s2[reject:ok>FAILED]",
			used: eqRejectReason.Name},
		{name: "IB no listener", fl: IB, op: "s1 connect pd=0",
			soft: "s1[connect:ok>CONNECT REJECTED:-111>FAILED]", kern: "s1[connect:ok>CONNECT REJECTED:8>FAILED]",
			used: eqNoListener.Name},
		{name: "IB reject reason on iWARP", fl: IWARP, op: "s2 reject pd=0",
			soft: "s1[REJECTED:-104>FAILED] s2[reject:ok>FAILED]", kern: "s1[REJECTED:28>FAILED] s2[reject:ok>FAILED]", div: "items"},
		{name: "IB connect response", fl: IB, op: "s2 accept pd=0",
			soft: "s1[ESTABLISHED:0>ESTABLISHED] s2[accept:ok>ACCEPT ESTABLISHED:0>ESTABLISHED]",
			kern: "s1[CONNECT_RESPONSE:0>CONNECT_RESPONSE establish(auto):ok>ESTABLISHED] s2[accept:ok>ACCEPT ESTABLISHED:0>ESTABLISHED]",
			used: eqConnectResponse.Name},
		{name: "IB connect response not yet established", fl: IB, op: "s2 accept pd=0",
			soft: "s1[ESTABLISHED:0>ESTABLISHED] s2[accept:ok>ACCEPT ESTABLISHED:0>ESTABLISHED]",
			kern: "s1[CONNECT_RESPONSE:0>CONNECT_RESPONSE] s2[accept:ok>ACCEPT]", div: "items"},
		{name: "IB abandoned request", fl: IB, op: "s2 accept pd=0",
			soft: "s2[accept:ECONNRESET>CONNECT_REQUEST]", kern: "s2[accept:EINVAL>CONNECT_REQUEST]", used: eqAbandoned.Name},
		{name: "IB EINVAL for other reasons", fl: IB, op: "s2 accept pd=0",
			soft: "s2[accept:ok>ACCEPT]", kern: "s2[accept:EINVAL>CONNECT_REQUEST]", div: "items"},
		{name: "IB notify", fl: IB, op: "s1 notify",
			soft: "s1[notify:ok>ESTABLISHED]", kern: "s1[notify:EISCONN>ESTABLISHED]", used: eqNotify.Name},
		{name: "iWARP notify", fl: IWARP, op: "s1 notify",
			soft: "s1[notify:ok>ESTABLISHED]", kern: "s1[notify:EISCONN>ESTABLISHED]", div: "items"},
		{name: "IB timewait", fl: IB, op: "s1 destroy",
			soft: "s1[destroy:ok>DESTROYED]", kern: "s1[destroy:ok>DESTROYED] s2[TIMEWAIT_EXIT:0>DISCONNECTED]",
			used: eqTimewait.Name},
		{name: "IB disconnect waits for the DREP", fl: IB, op: "s1 disconnect",
			soft: "s1[disconnect:ok>ESTABLISHED DISCONNECTED:0>DISCONNECTED] s2[DISCONNECTED:0>DISCONNECTED]",
			kern: "s1[disconnect:ok>ESTABLISHED] s2[DISCONNECTED:0>DISCONNECTED]", used: eqDisconnectDREP.Name},
		{name: "iWARP disconnect does not", fl: IWARP, op: "s1 disconnect",
			soft: "s1[disconnect:ok>ESTABLISHED DISCONNECTED:0>DISCONNECTED] s2[DISCONNECTED:0>DISCONNECTED]",
			kern: "s1[disconnect:ok>ESTABLISHED] s2[DISCONNECTED:0>DISCONNECTED]", div: "items"},
		{name: "listener destroyed before the request came, IB", fl: IB, op: "s0 destroy", listener: true,
			soft: "s0[destroy:ok>DESTROYED] s1[REJECTED:-104>FAILED]", kern: "s0[destroy:ok>DESTROYED] s1[REJECTED:8>FAILED]",
			used: eqDestroyRace.Name},
		{name: "listener destroyed before the request came, iWARP", fl: IWARP, op: "s0 destroy", listener: true,
			soft: "s0[destroy:ok>DESTROYED] s1[REJECTED:-111>FAILED]", kern: "s0[destroy:ok>DESTROYED] s1[REJECTED:-104>FAILED]",
			used: eqDestroyRace.Name},
		{name: "destroy of an id not listening", fl: IB, op: "s0 destroy",
			soft: "s0[destroy:ok>DESTROYED] s1[REJECTED:-104>FAILED]", kern: "s0[destroy:ok>DESTROYED] s1[REJECTED:8>FAILED]",
			div: "items"},
		{name: "listener destroyed, another status", fl: IB, op: "s0 destroy", listener: true,
			soft: "s0[destroy:ok>DESTROYED] s1[REJECTED:-104>FAILED]", kern: "s0[destroy:ok>DESTROYED] s1[UNREACHABLE:-110>FAILED]",
			div: "items"},
		{name: "order the model allows", fl: IWARP, op: "s0 join g0",
			soft: "s0/UD[join:ok>ADDR_RESOLVED MULTICAST_JOIN:0>ADDR_RESOLVED ADDR_CHANGE:0>ADDR_RESOLVED]",
			kern: "s0/UD[join:ok>ADDR_RESOLVED ADDR_CHANGE:0>ADDR_RESOLVED MULTICAST_JOIN:0>ADDR_RESOLVED]"},
		{name: "order the model refuses", fl: IWARP, op: "s0 resolve_addr local:1",
			soft: "s0[resolve_addr:ok>ADDR_QUERY ADDR_RESOLVED:0>ADDR_RESOLVED]",
			kern: "s0[ADDR_RESOLVED:0>IDLE resolve_addr:ok>ADDR_QUERY]", div: "items"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cmp := newComparer(c.fl)
			if strings.HasPrefix(c.op, "s0 join") {
				cmp.soft[0], cmp.kern[0] = id.StateAddrResolved, id.StateAddrResolved
			}
			if c.listener {
				cmp.soft[0], cmp.kern[0] = id.StateListen, id.StateListen
			}
			n, d := cmp.compare(3, op(t, c.op), epoch(t, c.soft), epoch(t, c.kern))
			switch {
			case c.div == "" && d != nil:
				t.Errorf("divergence %s", d)
			case c.div != "" && d == nil:
				t.Errorf("no divergence, want %s", c.div)
			case c.div != "" && d.What != c.div:
				t.Errorf("divergence %s, want %s", d, c.div)
			}
			if c.used != "" && n.used[c.used] == 0 {
				t.Errorf("%s not applied: %v", c.used, n.used)
			}
		})
	}
}

// TestCompareDeferred: IB's DISCONNECTED, deferred at the disconnect,
// is expected later and then taken out of the kernel's items; states
// agree meanwhile.
func TestCompareDeferred(t *testing.T) {
	cmp := newComparer(IB)
	// Both ESTABLISHED.
	cmp, d := cmp.compare(0, op(t, "s1 connect pd=0"),
		epoch(t, "s1[connect:ok>CONNECT ESTABLISHED:0>ESTABLISHED]"),
		epoch(t, "s1[connect:ok>CONNECT CONNECT_RESPONSE:0>CONNECT_RESPONSE establish(auto):ok>ESTABLISHED]"))
	if d != nil {
		t.Fatal(d)
	}
	cmp, d = cmp.compare(1, op(t, "s1 disconnect"),
		epoch(t, "s1[disconnect:ok>ESTABLISHED DISCONNECTED:0>DISCONNECTED]"), epoch(t, "s1[disconnect:ok>ESTABLISHED]"))
	if d != nil || !cmp.deferred[1] {
		t.Fatalf("%v, deferred %v", d, cmp.deferred)
	}
	// Something else meanwhile: s1's states differ, as deferred.
	cmp, d = cmp.compare(2, op(t, "s1 set_option tos"),
		epoch(t, "s1[set_option:ok>DISCONNECTED]"), epoch(t, "s1[set_option:ok>ESTABLISHED]"))
	if d != nil {
		t.Fatal(d)
	}
	// The kernel's DISCONNECTED comes.
	cmp, d = cmp.compare(3, op(t, "s2 disconnect"),
		epoch(t, "s2[disconnect:ok>DISCONNECTED]"),
		epoch(t, "s1[DISCONNECTED:0>DISCONNECTED] s2[disconnect:ok>DISCONNECTED]"))
	if d != nil || cmp.deferred[1] {
		t.Fatalf("%v, deferred %v", d, cmp.deferred)
	}
	// A second one is a divergence.
	if _, d = cmp.compare(4, op(t, "s2 destroy"),
		epoch(t, "s2[destroy:ok>DESTROYED]"), epoch(t, "s1[DISCONNECTED:0>DISCONNECTED] s2[destroy:ok>DESTROYED]")); d == nil {
		t.Fatal("a second DISCONNECTED passed")
	}
}

// TestKnown: documented divergences are recognized from the whole epoch,
// and nothing else is.
func TestKnown(t *testing.T) {
	for _, c := range []struct {
		fl         Flavour
		op         string
		soft, kern string
		known      string
	}{
		{IWARP, "s2 accept pd=0", "s1[ESTABLISHED:0>ESTABLISHED] s2[accept:ok>ACCEPT ESTABLISHED:0>ESTABLISHED]",
			"s1[REJECTED:-104>FAILED] s2[accept:EINVAL>CONNECT_REQUEST]", "iwarp-accept-needs-qp"},
		{IWARP, "s2 accept pd=0", "s2[accept:ECONNRESET>CONNECT_REQUEST]", "s2[accept:EINVAL>CONNECT_REQUEST]", "iwarp-accept-needs-qp"},
		{IB, "s2 accept pd=0", "s2[accept:ECONNRESET>CONNECT_REQUEST]", "s2[accept:ENOMEM>CONNECT_REQUEST]", ""},
		{IWARP, "s1 connect pd=0", "s1[connect:ok>CONNECT] s2[CONNECT_REQUEST:0>CONNECT_REQUEST]",
			"s1[connect:EINVAL>ROUTE_RESOLVED]", "iwarp-connect-needs-qp"},
		{IWARP, "s1 connect pd=0", "s1[connect:ok>CONNECT]", "s1[connect:ENODEV>ROUTE_RESOLVED]", ""},
	} {
		_, d := newComparer(c.fl).compare(0, op(t, c.op), epoch(t, c.soft), epoch(t, c.kern))
		if d == nil {
			t.Fatalf("%s: no divergence", c.op)
		}
		k := matchKnown(&Match{Flavour: c.fl, Div: d, Seq: callseq.Seq{op(t, c.op)}, Soft: []Epoch{d.SoftEpoch}, Kernel: []Epoch{d.KernelEpoch}})
		switch {
		case c.known == "" && k != nil:
			t.Errorf("%s on %s: documented %s", c.kern, c.fl, k.Name)
		case c.known != "" && (k == nil || k.Name != c.known):
			t.Errorf("%s on %s: %v, want %s", c.kern, c.fl, k, c.known)
		}
	}
	// A bind after a failed one: documented only when an earlier bind of
	// the id failed on the kernel.
	for _, c := range []struct {
		fl     Flavour
		before string
		kern   string
		known  string
	}{
		{IWARP, "s0[bind:EADDRINUSE>IDLE]", "s0[bind:ok>ADDR_BOUND]", "kernel-bind-after-failed-bind"},
		{IB, "s0[bind:EADDRNOTAVAIL>IDLE]", "s0[bind:ENODEV>IDLE]", "kernel-bind-after-failed-bind"},
		{IWARP, "s0[create:ok>IDLE]", "s0[bind:ok>ADDR_BOUND]", ""},
		{IB, "s0[bind:EADDRINUSE>IDLE]", "s0[bind:EINVAL>IDLE]", ""},
	} {
		o := op(t, "s0 bind nonlocal:2")
		_, d := newComparer(c.fl).compare(1, o, epoch(t, "s0[bind:EADDRNOTAVAIL>IDLE]"), epoch(t, c.kern))
		if d == nil {
			t.Fatal("bind: no divergence")
		}
		got := knownName(&Match{Flavour: c.fl, Div: d, Seq: callseq.Seq{o},
			Soft: []Epoch{epoch(t, c.before), d.SoftEpoch}, Kernel: []Epoch{epoch(t, c.before), d.KernelEpoch}})
		if got != c.known {
			t.Errorf("bind after %s on %s, kernel %s: documented %q, want %q", c.before, c.fl, c.kern, got, c.known)
		}
	}
	// A resolve to a destination no route leads to, after a failed bind:
	// documented only when an earlier bind of the id failed on the kernel,
	// and only for the kernel's success against the software fabric's
	// ENETUNREACH.
	for _, c := range []struct {
		fl     Flavour
		before string
		soft   string
		known  string
	}{
		{IB, "s0[bind:EADDRINUSE>IDLE]", "s0[bind:ok>ADDR_BOUND resolve_addr:ENETUNREACH>ADDR_BOUND]", "kernel-resolve-after-failed-bind"},
		{IWARP, "s0[bind:EADDRINUSE>IDLE]", "s0[bind:ok>ADDR_BOUND resolve_addr:ENETUNREACH>ADDR_BOUND]", "kernel-resolve-after-failed-bind"},
		{IB, "s0[bind:ok>ADDR_BOUND]", "s0[bind:ok>ADDR_BOUND resolve_addr:ENETUNREACH>ADDR_BOUND]", ""},
		{IB, "s0[create:ok>IDLE]", "s0[bind:ok>ADDR_BOUND resolve_addr:ENETUNREACH>ADDR_BOUND]", ""},
		{IB, "s0[bind:EADDRINUSE>IDLE]", "s0[bind:ok>ADDR_BOUND resolve_addr:EADDRINUSE>ADDR_BOUND]", ""},
	} {
		o := op(t, "s0 resolve_addr unroutable:2")
		_, d := newComparer(c.fl).compare(1, o, epoch(t, c.soft),
			epoch(t, "s0[resolve_addr:ok>ADDR_QUERY ADDR_RESOLVED:0>ADDR_RESOLVED]"))
		if d == nil {
			t.Fatal("resolve: no divergence")
		}
		got := knownName(&Match{Flavour: c.fl, Div: d, Seq: callseq.Seq{o},
			Soft: []Epoch{epoch(t, c.before), d.SoftEpoch}, Kernel: []Epoch{epoch(t, c.before), d.KernelEpoch}})
		if got != c.known {
			t.Errorf("resolve after %s on %s, soft %s: documented %q, want %q", c.before, c.fl, c.soft, got, c.known)
		}
	}
	// IB: an accept whose active peer was made synchronous in CONNECT gets
	// no ESTABLISHED: documented only on IB, after a migrate to sync that
	// left an id in CONNECT and nothing read since.
	for _, c := range []struct {
		fl      Flavour
		migrate string
		before  string
		known   string
	}{
		{IB, "s1 migrate sync", "s1[migrate:ok>CONNECT]", "ib-unread-connect-response"},
		{IWARP, "s1 migrate sync", "s1[migrate:ok>CONNECT]", ""},
		{IB, "s1 migrate ch1", "s1[migrate:ok>CONNECT]", ""},
		{IB, "s1 migrate sync", "s1[migrate:ok>ESTABLISHED]", ""},
		{IB, "s1 migrate sync", "s1[migrate:EINVAL>CONNECT]", ""},
	} {
		mig, acc := op(t, c.migrate), op(t, "s2 accept pd=0")
		_, d := newComparer(c.fl).compare(1, acc, epoch(t, "s2[accept:ok>ACCEPT ESTABLISHED:0>ESTABLISHED]"),
			epoch(t, "s2[accept:ok>ACCEPT]"))
		if d == nil {
			t.Fatal("accept: no divergence")
		}
		got := knownName(&Match{Flavour: c.fl, Div: d, Seq: callseq.Seq{mig, acc},
			Soft: []Epoch{epoch(t, c.before), d.SoftEpoch}, Kernel: []Epoch{epoch(t, c.before), d.KernelEpoch}})
		if got != c.known {
			t.Errorf("accept after %s (%s) on %s: documented %q, want %q", c.migrate, c.before, c.fl, got, c.known)
		}
	}
	// A listen refused EADDRINUSE by the kernel: documented only after a
	// listener of the other port space on the same port.
	for _, c := range []struct {
		ps, port string
		known    string
	}{
		{"udp", "3", "kernel-listen-port-across-port-spaces"},
		{"tcp", "3", ""}, // the same space: cmrt refuses it too, or it is a divergence
		{"udp", "2", ""}, // another port
	} {
		seq := callseq.Seq{op(t, "s0 create tcp ch1"), op(t, "s0 bind wildcard:3"), op(t, "s1 create "+c.ps+" ch1"),
			op(t, "s1 bind wildcard:"+c.port), op(t, "s1 listen 1"), op(t, "s0 listen -1")}
		kern := []Epoch{epoch(t, "s0[create:ok>IDLE]"), epoch(t, "s0[bind:ok>ADDR_BOUND]"), epoch(t, "s1[create:ok>IDLE]"),
			epoch(t, "s1[bind:ok>ADDR_BOUND]"), epoch(t, "s1[listen:ok>LISTEN]")}
		_, d := newComparer(IB).compare(5, seq[5], epoch(t, "s0[listen:ok>LISTEN]"), epoch(t, "s0[listen:EADDRINUSE>ADDR_BOUND]"))
		if d == nil {
			t.Fatal("listen: no divergence")
		}
		got := knownName(&Match{Flavour: IB, Div: d, Seq: seq, Soft: append(kern[:5:5], d.SoftEpoch), Kernel: append(kern, d.KernelEpoch)})
		if got != c.known {
			t.Errorf("listen after a %s listener on port %s: documented %q, want %q", c.ps, c.port, got, c.known)
		}
	}
	// IB: a synchronous disconnect still waits for its DISCONNECTED when
	// the id's next call comes.
	for _, c := range []struct {
		fl     Flavour
		before string
		known  string
	}{
		{IB, "s1[disconnect:ok>ESTABLISHED] s2[DISCONNECTED:0>DISCONNECTED]", "ib-sync-disconnect-waits-drep"},
		{IWARP, "s1[disconnect:ok>ESTABLISHED] s2[DISCONNECTED:0>DISCONNECTED]", ""},
		{IB, "s1[disconnect:ok>ESTABLISHED DISCONNECTED:0>DISCONNECTED]", ""},
		{IB, "s1[connect:ok>CONNECT]", ""},
	} {
		o := op(t, "s1 accept pd=0")
		_, d := newComparer(c.fl).compare(1, o, epoch(t, "s1[accept:EINVAL>DISCONNECTED]"), epoch(t, "!busy"))
		if d == nil {
			t.Fatal("busy: no divergence")
		}
		got := knownName(&Match{Flavour: c.fl, Div: d, Seq: callseq.Seq{o},
			Soft:   []Epoch{epoch(t, "s1[disconnect:ok>ESTABLISHED DISCONNECTED:0>DISCONNECTED]"), d.SoftEpoch},
			Kernel: []Epoch{epoch(t, c.before), d.KernelEpoch}})
		if got != c.known {
			t.Errorf("busy after %s on %s: documented %q, want %q", c.before, c.fl, got, c.known)
		}
	}
	// Probes the kernel of one transport takes.
	for _, c := range []struct {
		fl    Flavour
		op    string
		st    id.State
		known string
	}{
		{IB, "s0 probe disconnect", id.StateListen, "ib-disconnect-listener"},
		{IWARP, "s0 probe disconnect", id.StateListen, ""},
		{IB, "s0 probe reject pd=0", id.StateConnect, "ib-reject-connecting"},
		{IWARP, "s0 probe notify", id.StateListen, "iwarp-notify-any-state"},
		{IB, "s0 probe notify", id.StateListen, ""},
		{IB, "s0 probe bind local:0", id.StateListen, ""},
	} {
		d := &Divergence{Op: op(t, c.op), What: "probe", ProbeState: c.st}
		k := matchKnown(&Match{Flavour: c.fl, Div: d})
		switch {
		case c.known == "" && k != nil:
			t.Errorf("probe %s in %s on %s: documented %s", c.op, c.st, c.fl, k.Name)
		case c.known != "" && (k == nil || k.Name != c.known):
			t.Errorf("probe %s in %s on %s: %v, want %s", c.op, c.st, c.fl, k, c.known)
		}
	}
	for _, k := range Documented {
		if k.Name == "" || k.Why == "" || strings.Contains(k.Name, " ") {
			t.Errorf("documented divergence %+v: needs a name without spaces and a reason", k)
		}
	}
	for _, e := range Equivalences {
		if e.Name == "" || e.Why == "" || e.Kernel == "" || e.Soft == "" {
			t.Errorf("equivalence %+v: incomplete", e)
		}
	}
}

// knownName is the name of the documented divergence m matches, "" for
// none.
func knownName(m *Match) string {
	if k := matchKnown(m); k != nil {
		return k.Name
	}
	return ""
}
