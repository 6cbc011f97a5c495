package diffkernel

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// regressions are sequences on which the VM driver (test/diffkernel) found
// the software fabric diverging from the kernel, each with the kernel's
// trace as the driver printed it. The software fabric replays each in a
// network namespace laid out as the VM (no VM needed) and is compared with
// the kernel's trace as the driver compares it: it must agree, or diverge
// exactly as the documented divergence named in known. A documented
// divergence that no longer shows fails too: the change it waited for is
// in, and its entry (Documented, README) must go.
var regressions = []struct {
	name, dev string
	known     string // the documented divergence expected, "" for none
	kernel    string // the kernel's trace (built with trace and the steps below)
}{
	{
		// The equivalence ib-abandoned-request: the client destroyed while its
		// request waits; the passive id's accept fails (EINVAL on IB,
		// ECONNRESET here).
		name: "ib-abandoned-accept", dev: "rxe0", kernel: trace(
			listening("s0", "tcp", "ch0", "local:1", 0),
			resolved("s1", "tcp", "sync", "local:1"),
			requested("s1", "tcp", 0, "s2"),
			"s1 destroy => s1[destroy:ok>DESTROYED]",
			"s2 accept pd=0 => s2[accept:EINVAL>CONNECT_REQUEST]"),
	},
	{
		// A synchronous listener that never reads its requests, backlog 1.
		name: "ib-backlog-full-drops", dev: "rxe0", known: "ib-backlog-full-drops", kernel: trace(
			listening("s0", "tcp", "sync", "local:1", 1),
			resolved("s1", "tcp", "ch1", "local:1"),
			"s1 connect pd=9 => s1[connect:ok>CONNECT]",
			resolved("s2", "tcp", "ch0", "local:1"),
			"s2 connect pd=10 => s2[connect:ok>CONNECT]"),
	},
	{
		// No route: the call fails, the id bound (issue 16 bug 6; diff-kernel
		// found it too).
		name: "resolve-unroutable", dev: "rxe0", kernel: trace(
			created("s0", "tcp", "sync"),
			"s0 resolve_addr unroutable:1 => s0[bind:ok>ADDR_BOUND resolve_addr:ENETUNREACH>ADDR_BOUND]"),
	},
	{
		// An id bound by resolve_addr's source resolves through that device: a
		// destination without a route is on its link.
		name: "resolve-bound-device-on-link/src", dev: "rxe0", kernel: trace(
			created("s0", "tcp", "sync"),
			"s0 resolve_addr unroutable:1 src => s0[resolve_addr:ok>ADDR_QUERY ADDR_RESOLVED:0>ADDR_RESOLVED]"),
	},
	{
		name: "resolve-bound-device-on-link/bound", dev: "siw0", kernel: trace(
			created("s0", "tcp", "ch0"),
			"s0 bind local:3 => s0[bind:ok>ADDR_BOUND]",
			"s0 resolve_addr unroutable:2 => s0[resolve_addr:ok>ADDR_QUERY ADDR_RESOLVED:0>ADDR_RESOLVED]"),
	},
	{
		// A SIDR request to a port nobody listens on: UNREACHABLE 1 at once.
		name: "ud-no-listener", dev: "rxe0", kernel: trace(
			created("s0", "udp", "sync"),
			"s0 resolve_addr local:3 src => s0/UD[resolve_addr:ok>ADDR_QUERY ADDR_RESOLVED:0>ADDR_RESOLVED]",
			"s0 resolve_route => s0/UD[resolve_route:ok>ROUTE_QUERY ROUTE_RESOLVED:0>ROUTE_RESOLVED]",
			"s0 connect pd=6 => s0/UD[connect:ok>CONNECT UNREACHABLE:1>FAILED]"),
	},
	{
		// A SIDR request to a port a UD id holds without listening: UNREACHABLE
		// 1 at once too (the software fabric left it unanswered).
		name: "ud-bound-not-listening", dev: "rxe0", kernel: trace(
			created("s0", "udp", "sync"),
			created("s1", "udp", "sync"),
			"s1 resolve_addr local:3 => s1/UD[resolve_addr:ok>ADDR_QUERY ADDR_RESOLVED:0>ADDR_RESOLVED]",
			"s0 bind local:3 => s0/UD[bind:ok>ADDR_BOUND]",
			"s1 resolve_route => s1/UD[resolve_route:ok>ROUTE_QUERY ROUTE_RESOLVED:0>ROUTE_RESOLVED]",
			"s1 connect pd=10 => s1/UD[connect:ok>CONNECT UNREACHABLE:1>FAILED]"),
	},
	{
		// Backlog 1, the first request read and not yet answered: the second
		// is reported (the backlog counts requests not yet read).
		name: "listen-backlog-read/rxe", dev: "rxe0", kernel: trace(
			listening("s0", "tcp", "ch0", "local:1", 1),
			resolved("s1", "tcp", "ch1", "local:1"),
			resolved("s2", "tcp", "sync", "local:1"),
			requested("s2", "tcp", 5, "s3"),
			requested("s1", "tcp", 6, "s4")),
	},
	{
		name: "listen-backlog-read/siw", dev: "siw0", kernel: trace(
			listening("s0", "tcp", "ch0", "local:2", 1),
			resolved("s1", "tcp", "ch1 peer", "local:2"),
			resolved("s2", "tcp", "ch1 peer", "local:2"),
			requested("s2", "tcp", 5, "s3"),
			requested("s1", "tcp", 9, "s4")),
	},
	{
		// rdma_disconnect of an IB UD id, passive or active: 0, nothing
		// reported (the software fabric said EINVAL).
		name: "ud-disconnect", dev: "rxe0", kernel: trace(
			listening("s0", "udp", "ch1", "local:3", 0),
			resolved("s1", "udp", "sync", "local:3"),
			requested("s1", "udp", 8, "s2"),
			"s2 accept pd=7 => s1/UD[ESTABLISHED:0>ESTABLISHED] s2/UD[accept:ok>ESTABLISHED]",
			"s2 disconnect => s2/UD[disconnect:ok>ESTABLISHED]",
			"s1 disconnect => s1/UD[disconnect:ok>ESTABLISHED]"),
	},
	{
		// A disconnect of a request not yet answered, then of a connection, then
		// of a disconnected id; IB's DISCONNECTED comes with the DREP.
		name: "disconnect-unanswered-request/rxe", dev: "rxe0", kernel: trace(
			listening("s0", "tcp", "ch0", "local:1", 0),
			resolved("s1", "tcp", "ch1", "local:1"),
			requested("s1", "tcp", 0, "s2"),
			"s2 disconnect => s2[disconnect:ok>CONNECT_REQUEST]",
			"s2 accept pd=0 => s1[CONNECT_RESPONSE:0>CONNECT_RESPONSE establish(auto):ok>ESTABLISHED] s2[accept:ok>ACCEPT ESTABLISHED:0>ESTABLISHED]",
			"s2 disconnect => s1[DISCONNECTED:0>DISCONNECTED] s2[disconnect:ok>ESTABLISHED]",
			"s1 disconnect => s1[disconnect:ok>DISCONNECTED] s2[DISCONNECTED:0>DISCONNECTED]"),
	},
	{
		// The same on iWARP, with a reject, and disconnects of the FAILED ids.
		name: "disconnect-unanswered-request/siw", dev: "siw0", kernel: trace(
			listening("s0", "tcp", "ch0", "local:1", 0),
			resolved("s1", "tcp", "ch1 peer", "local:1"),
			requested("s1", "tcp", 0, "s2"),
			"s2 disconnect => s2[disconnect:ok>CONNECT_REQUEST]",
			"s2 reject pd=0 => s1[REJECTED:-104>FAILED] s2[reject:ok>FAILED]",
			"s2 disconnect => s2[disconnect:ok>FAILED]",
			"s1 disconnect => s1[disconnect:ok>FAILED]"),
	},
	{
		name: "disconnect-failed", dev: "rxe0", kernel: trace(
			listening("s0", "tcp", "ch0", "local:1", 0),
			resolved("s1", "tcp", "ch1", "local:1"),
			requested("s1", "tcp", 0, "s2"),
			"s2 reject pd=0 => s1[REJECTED:28>FAILED] s2[reject:ok>FAILED]",
			"s2 disconnect => s2[disconnect:ok>FAILED]",
			"s1 disconnect => s1[disconnect:ok>FAILED]"),
	},
	{
		// The peer destroyed while its request waits: reject is ECONNRESET (the
		// software fabric said 0).
		name: "reject-abandoned", dev: "siw0", kernel: trace(
			listening("s0", "tcp", "ch0", "local:3", -1),
			resolved("s1", "tcp", "ch0 peer", "local:3"),
			requested("s1", "tcp", 7, "s2"),
			"s1 destroy => s1[destroy:ok>DESTROYED]",
			"s2 reject pd=8 => s2[reject:ECONNRESET>CONNECT_REQUEST]"),
	},
	{
		// rdma_notify on established ids: EISCONN on IB, 0 on iWARP (the
		// equivalence ib-notify).
		name: "ib-notify", dev: "rxe0", kernel: trace(
			listening("s0", "tcp", "ch0", "local:1", 0),
			resolved("s1", "tcp", "ch0", "local:1"),
			requested("s1", "tcp", 0, "s2"),
			"s2 accept pd=0 => s1[CONNECT_RESPONSE:0>CONNECT_RESPONSE establish(auto):ok>ESTABLISHED] s2[accept:ok>ACCEPT ESTABLISHED:0>ESTABLISHED]",
			"s1 notify => s1[notify:EISCONN>ESTABLISHED]",
			"s2 notify => s2[notify:EISCONN>ESTABLISHED]"),
	},
	{
		name: "iwarp-accept-needs-qp", dev: "siw0", known: "iwarp-accept-needs-qp", kernel: trace(
			listening("s0", "tcp", "ch1", "wildcard:1", 1),
			resolved("s1", "tcp", "ch1 peer", "local:1"),
			requested("s1", "tcp", 0, "s2"),
			"s2 accept pd=8 => s1[REJECTED:-104>FAILED] s2[accept:EINVAL>CONNECT_REQUEST]"),
	},
	{
		// RDMA_OPTION_IB_PATH with a zeroed record (no record flagged GMP,
		// PRIMARY and BIDIRECTIONAL): EINVAL, nothing reported (the software
		// fabric took it and reported ROUTE_RESOLVED).
		name: "ib-path-unflagged/rxe", dev: "rxe0", kernel: trace(
			created("s0", "udp", "sync"),
			"s0 resolve_addr local:3 => s0/UD[resolve_addr:ok>ADDR_QUERY ADDR_RESOLVED:0>ADDR_RESOLVED]",
			"s0 set_option ib_path => s0/UD[set_option:EINVAL>ADDR_RESOLVED]"),
	},
	{
		name: "ib-path-unflagged/siw", dev: "siw0", kernel: trace(
			resolved("s0", "tcp", "ch1", "local:3"),
			"s0 set_option ib_path => s0[set_option:EINVAL>ROUTE_RESOLVED]"),
	},
	{
		// A bind of an address no interface has, after a bind that failed.
		name: "bind-after-failed-bind", dev: "siw0", known: "kernel-bind-after-failed-bind", kernel: trace(
			created("s0", "tcp", "ch0"),
			created("s1", "tcp", "sync"),
			"s1 bind local:1 => s1[bind:ok>ADDR_BOUND]",
			"s0 bind local:1 => s0[bind:EADDRINUSE>IDLE]",
			"s0 bind nonlocal:2 => s0[bind:ok>ADDR_BOUND]"),
	},
	{
		name: "bind-after-failed-bind/rxe", dev: "rxe0", known: "kernel-bind-after-failed-bind", kernel: trace(
			created("s0", "tcp", "ch0"),
			created("s1", "tcp", "ch0"),
			"s1 bind wildcard:3 => s1[bind:ok>ADDR_BOUND]",
			"s0 bind local:3 => s0[bind:EADDRNOTAVAIL>IDLE]",
			"s0 bind nonlocal:1 => s0[bind:ENODEV>IDLE]"),
	},
	{
		// A resolve to a destination no route leads to, after a bind that
		// failed: the kernel resolves it on the failed bind's device.
		name: "resolve-after-failed-bind/rxe", dev: "rxe0", known: "kernel-resolve-after-failed-bind", kernel: trace(
			created("s0", "tcp", "sync"),
			"s0 bind local:2 => s0[bind:ok>ADDR_BOUND]",
			created("s1", "tcp", "ch1"),
			"s1 bind local:2 => s1[bind:EADDRINUSE>IDLE]",
			"s1 resolve_addr unroutable:2 => s1[resolve_addr:ok>ADDR_QUERY ADDR_RESOLVED:0>ADDR_RESOLVED]"),
	},
	{
		name: "resolve-after-failed-bind/siw", dev: "siw0", known: "kernel-resolve-after-failed-bind", kernel: trace(
			created("s0", "tcp", "sync"),
			"s0 bind local:2 => s0[bind:ok>ADDR_BOUND]",
			created("s1", "tcp", "ch1"),
			"s1 bind local:2 => s1[bind:EADDRINUSE>IDLE]",
			"s1 resolve_addr unroutable:2 => s1[resolve_addr:ok>ADDR_QUERY ADDR_RESOLVED:0>ADDR_RESOLVED]"),
	},
	{
		// Listeners of two port spaces on one port: the kernel's UDP listener
		// holds siw0's TCP port (a wildcard listen covers every device).
		name: "listen-port-across-port-spaces/rxe", dev: "rxe0", known: "kernel-listen-port-across-port-spaces", kernel: trace(
			created("s0", "tcp", "ch1"),
			"s0 bind wildcard:3 => s0[bind:ok>ADDR_BOUND]",
			created("s1", "udp", "ch1"),
			"s1 bind wildcard:3 => s1/UD[bind:ok>ADDR_BOUND]",
			"s1 listen 1 => s1/UD[listen:ok>LISTEN]",
			"s0 listen -1 => s0[listen:EADDRINUSE>ADDR_BOUND]"),
	},
	{
		// An active id made synchronous while its connect is under way: on IB
		// nobody reads its CONNECT_RESPONSE, so no RTU goes and the accept
		// gets no ESTABLISHED.
		name: "unread-connect-response/rxe", dev: "rxe0", known: "ib-unread-connect-response", kernel: trace(
			listening("s0", "tcp", "sync", "local:1", 8),
			resolved("s1", "tcp", "ch0", "local:1"),
			"s1 connect pd=6 => s1[connect:ok>CONNECT]",
			"s1 migrate sync => s1[migrate:ok>CONNECT]",
			"s0 get_request => s0[get_request:ok>LISTEN] s2[CONNECT_REQUEST:0>CONNECT_REQUEST migrate:ok>CONNECT_REQUEST]",
			"s2 accept pd=0 => s2[accept:ok>ACCEPT]"),
	},
	{
		// Connect to a destination resolved on the bound device's link that no
		// route leads to.
		name: "connect-no-route", dev: "rxe0", known: "connect-no-route-unreachable", kernel: trace(
			created("s0", "tcp", "ch0"),
			"s0 bind local:1 => s0[bind:ok>ADDR_BOUND]",
			"s0 resolve_addr unroutable:1 => s0[resolve_addr:ok>ADDR_QUERY ADDR_RESOLVED:0>ADDR_RESOLVED]",
			"s0 resolve_route => s0[resolve_route:ok>ROUTE_QUERY ROUTE_RESOLVED:0>ROUTE_RESOLVED]",
			"s0 connect pd=0 => s0[connect:ok>CONNECT]"),
	},
	{
		// A synchronous listener migrated while a request waits on its private
		// channel: the request moves with it (the kernel fabric had left the
		// request's kernel id on the closed private channel: REJECTED 28 and a
		// dead CONNECT_REQUEST; seed 2026, sequence 1505).
		name: "migrate-sync-listener-queued-request", dev: "rxe0", kernel: trace(
			listening("s0", "tcp", "sync", "wildcard:3", 8),
			resolved("s1", "tcp", "ch1", "local:3"),
			"s1 connect pd=57 => -",
			"s1 connect pd=0 => s1[connect:ok>CONNECT]",
			"s0 migrate ch1 => s0[migrate:ok>LISTEN] s2[CONNECT_REQUEST:0>CONNECT_REQUEST]"),
	},
	{
		// The equivalence listener-destroy-race: the listener destroyed while
		// the request is under way; on the loaded VM the kernel's came after
		// (nobody listens: 8), the software fabric's before (rejected by the
		// destroy: -ECONNRESET). Seed 2026, sequence 431.
		name: "listener-destroy-race", dev: "rxe0", kernel: trace(
			created("s0", "tcp", "sync"),
			"s0 bind local:2 => s0[bind:ok>ADDR_BOUND]",
			"s0 leave g0 => s0[leave:EADDRNOTAVAIL>ADDR_BOUND]",
			"s0 bind local:1 => s0[bind:EINVAL>ADDR_BOUND]",
			"s0 listen 0 => s0[listen:ok>LISTEN]",
			resolved("s1", "tcp", "ch0", "local:2"),
			"s1 connect pd=56 => s1[connect:ok>CONNECT]",
			"s0 destroy => s0[destroy:ok>DESTROYED] s1[REJECTED:8>FAILED]"),
	},
	{
		// A synchronous disconnect on IB waits for the peer's DREP: the id's
		// next call finds it busy (seed 4242, sequence 727).
		name: "ib-sync-disconnect", dev: "rxe0", known: "ib-sync-disconnect-waits-drep", kernel: trace(
			listening("s0", "tcp", "ch1", "local:2", -1),
			resolved("s1", "tcp", "sync", "local:2"),
			requested("s1", "tcp", 0, "s2"),
			"s2 accept pd=9 => s1[CONNECT_RESPONSE:0>CONNECT_RESPONSE establish(auto):ok>ESTABLISHED] s2[accept:ok>ACCEPT ESTABLISHED:0>ESTABLISHED]",
			"s1 disconnect => s1[disconnect:ok>ESTABLISHED] s2[DISCONNECTED:0>DISCONNECTED]",
			"s1 accept pd=0 => !busy"),
	},
}

// The regressions' traces are lines as the driver prints them: trace joins
// steps (lines, or the runs of lines below) into one.
func trace(steps ...string) string { return "\n" + lines(steps...) + "\n" }

func lines(l ...string) string { return strings.Join(l, "\n") }

// tag is how a trace names slot s of port space ps ("tcp", "udp").
func tag(s, ps string) string {
	if ps == "udp" {
		return s + "/UD"
	}
	return s
}

// created: slot s made in port space ps on channel ch ("ch0", "sync",
// "ch1 peer").
func created(s, ps, ch string) string {
	return fmt.Sprintf("%s create %s %s => %s[create:ok>IDLE]", s, ps, ch, tag(s, ps))
}

// listening: slot s made, bound to addr and listening with backlog.
func listening(s, ps, ch, addr string, backlog int) string {
	t := tag(s, ps)
	return lines(created(s, ps, ch),
		fmt.Sprintf("%s bind %s => %s[bind:ok>ADDR_BOUND]", s, addr, t),
		fmt.Sprintf("%s listen %d => %s[listen:ok>LISTEN]", s, backlog, t))
}

// resolved: slot s made, its address and route resolved to addr.
func resolved(s, ps, ch, addr string) string {
	t := tag(s, ps)
	return lines(created(s, ps, ch),
		fmt.Sprintf("%s resolve_addr %s => %s[resolve_addr:ok>ADDR_QUERY ADDR_RESOLVED:0>ADDR_RESOLVED]", s, addr, t),
		fmt.Sprintf("%s resolve_route => %s[resolve_route:ok>ROUTE_QUERY ROUTE_RESOLVED:0>ROUTE_RESOLVED]", s, t))
}

// requested: slot c connects with pd bytes of private data, and the
// listener's new id lands in slot child.
func requested(c, ps string, pd int, child string) string {
	return fmt.Sprintf("%s connect pd=%d => %s[connect:ok>CONNECT] %s[CONNECT_REQUEST:0>CONNECT_REQUEST]",
		c, pd, tag(c, ps), tag(child, ps))
}

func TestRegressions(t *testing.T) {
	if !inVMNetns(t, "TestRegressions") {
		return
	}
	fabrics := map[string]*Runner{}
	for _, c := range regressions {
		t.Run(c.name, func(t *testing.T) {
			d, err := DeviceByName(c.dev)
			if err != nil {
				t.Fatal(err)
			}
			tr, err := ParseTrace(c.kernel)
			if err != nil {
				t.Fatal(err)
			}
			r := fabrics[c.dev]
			if r == nil {
				// The software fabric answers at once here: a second is
				// plenty to tell that it never will.
				r = NewRunner(Config{Device: d, Soft: softFabric(d, "regress-"+d.Netdev), Settle: time.Second})
				fabrics[c.dev] = r
			}
			res, err := r.RunTrace(0, tr)
			if err != nil {
				t.Fatal(err)
			}
			report := func(format string, args ...any) {
				t.Helper()
				t.Errorf(format+"\nkernel (recorded):\n%s\nsoft:\n%s", append(args, indent(res.Kernel.String()), indent(res.Soft.String()))...)
			}
			switch {
			case c.known == "" && res.Div != nil:
				report("the software fabric diverges from the kernel: %s", res.Div)
			case c.known != "" && res.Div == nil:
				report("documented divergence %s no longer shows: remove it from Documented and from the README", c.known)
			case c.known != "" && (res.Div.Known == nil || res.Div.Known.Name != c.known):
				report("want documented divergence %s, got %s", c.known, res.Div)
			}
		})
	}
}

func indent(s string) string {
	var b strings.Builder
	for _, l := range strings.SplitAfter(s, "\n") {
		if l != "" {
			b.WriteString("    " + l)
		}
	}
	return b.String()
}
