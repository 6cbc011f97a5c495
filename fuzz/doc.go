// Package fuzz holds cmrt's fuzzers and property tests over the public
// API. They drive random call sequences across many ids, inject faults,
// and check every id's journal against the model of legal call and event
// sequences (journal.Check), that Destroy always returns, and that
// nothing leaks (goroutines, descriptors, ids).
//
// Two layers:
//
//   - FuzzFake and TestRapidFake run over package internal/fakefab: fast
//     and deterministic interleavings of calls and injected events (legal
//     ones, which must fold as the model says, and illegal ones, which must
//     neither panic nor deadlock), on synchronous and asynchronous ids,
//     with a hand-pumped channel or a reactor with or without workers,
//     destroying and migrating ids from handlers.
//   - FuzzSoftRC and FuzzSoftUD run over the software fabric on loopback,
//     with package internal/faultproxy between client and server dropping,
//     delaying, duplicating and reordering whole MPA frames, FPDUs and
//     datagrams, cutting and resetting connections, making a peer vanish,
//     and destroying listeners and connecting ids midway.
//
// Without -fuzz, go test runs the seed corpus (in the code and under
// testdata/fuzz) and a short rapid check. To fuzz one target:
//
//	go test -run=NONE -fuzz='^FuzzFake$' -fuzztime=30s ./fuzz/
//
// (make fuzz runs every target for FUZZTIME). A failing input is saved
// under testdata/fuzz/<Target>/ and replays with
//
//	go test -run='^FuzzFake$/<file name>' ./fuzz/
//
// rapid prints the failing seed and writes a fail file under
// testdata/rapid/; rerun one with (rapid's flags after the package)
//
//	go test ./fuzz/ -run='^TestRapidFake$' -rapid.seed=<seed>
//	go test ./fuzz/ -run='^TestRapidFake$' -rapid.failfile=<file>
//
// and explore further with -rapid.checks=N (default 100). When a journal
// breaks the model, the failure message names a picture of it (drawn by
// internal/journalsvg, as cmd/cmrt draw does) next to the input: look
// there first. It is testdata/fuzz/<Target>/journal/<input>.svg for a
// fuzz input (a subdirectory, which the engine does not read as input)
// and testdata/rapid/<Test>/journal.svg for rapid's last failing run, its
// minimized one; .gitignore keeps them out of commits. Bugs the fuzzers
// found in other packages stay pinned by the tests in regressions_test.go.
package fuzz
