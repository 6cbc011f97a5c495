// Package reliability holds cmrt's reliability suite (issue 9): faults
// (links cut during connect and while established, peers killed, listeners
// destroyed with requests pending, addresses removed, destroy from a
// handler, a reactor closed with events queued), load (connect/disconnect
// cycles and a thousand concurrent connections with traffic) and bad input
// from raw sockets (malformed MPA frames, FPDUs, SIDR datagrams, floods of
// half-open connections, descriptor exhaustion), plus the security
// properties of listeners, channels and private data.
//
// The suite is made of Go tests and helper programs: the test binary runs
// as a helper when CMRT_REL_HELPER names a role (a server, a client, a
// descriptor-starved listener), so one binary plays every part, in
// whatever network namespace ip-netns(8) starts it in.
//
// Everything is skipped unless CMRT_RELIABILITY=1: `go test ./...` only
// compiles it. scripts/reliability.sh (make reliability) builds the test
// binary, creates network namespaces joined by a bridge, sets the
// CMRT_REL_* variables that describe them and runs the suite in one of
// them; see RELIABILITY.md for what is tested, how, and the figures.
// Tests that need the namespaces skip with a reason when those variables
// are missing; the others run anywhere with CMRT_RELIABILITY=1 (as root for
// some).
package reliability
