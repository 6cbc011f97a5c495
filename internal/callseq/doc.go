// Package callseq holds CM call sequences that drivers replay on a fabric:
// the operations (create, bind, resolve, listen, connect, accept, reject,
// disconnect, destroy, set_option, migrate, join, leave, ...) on numbered
// id slots, their text form (one operation a line, so that a failing
// sequence can be printed and replayed), a generator that draws sequences
// from a Chooser while it simulates the model (journal.CallAllowed and
// journal.AfterEvent) to keep most calls meaningful, and a shrinker that
// removes operations while a failure persists.
//
// Sequences name addresses and ports abstractly (the local address, an
// unreachable host on its subnet, an unroutable one; port index 1 to 3,
// or 0 for any): each driver maps them to its own, so that one sequence
// runs on two fabrics side by side (internal/diffkernel) or on one with
// the model as its oracle (package fuzz).
//
// ProgressCalls and Outcomes are the model's view of what moves an id
// along a connection's life-cycle and what answers a call that waits; the
// fuzzers use them too.
package callseq
