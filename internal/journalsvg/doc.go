// Package journalsvg draws a cmrt journal (journal.Record, as journal.ReadJSON reads
// the JSON lines id.WriteJSON and id.ObserveJSON write) as an SVG sequence
// diagram: one lifeline per id, grouped by the channel the id first
// reported to, with the ids a listener's CONNECT_REQUESTs made placed
// right after it; one row per record, in sequence order, with the call or
// event and its status (errno names, e.g. "-104 ECONNRESET"), the state it
// led to where that says more than the name, and the time since the
// journal's first record on the left. Records journal.Check flags are
// drawn in red, with the violation in words.
//
// Long journals stay readable in two ways:
//
//   - Successive ids of one group (the children of one listener, or the
//     ids of one channel) whose records are the same sequence of calls,
//     events, statuses and states are drawn as one lifeline marked ×N: a
//     thousand connect/disconnect cycles draw one cycle.
//   - A block of up to eight rows repeated back to back (a listener's
//     get_request after each request, a join/leave loop) is drawn once with
//     a ×N bracket.
//
// What is left is cut into pages of at most MaxRows rows (WithMaxRows,
// WithPage). Records of ids with a violation are never collapsed. The
// output depends only on the records and the options: the same journal
// gives the same bytes.
package journalsvg
