// Package iwarp holds the wire codecs of the iWARP protocol suite as the
// Linux soft-iWARP driver (siw) speaks it on an ordinary TCP connection:
//
//   - MPA Request/Reply frames for connection setup (RFC 5044 §7.1), with
//     the enhanced connection establishment IRD/ORD block of RFC 6581;
//   - MPA FPDU framing of ULPDUs on the byte stream (RFC 5044 §4), with
//     optional CRC32c and no markers;
//   - the DDP tagged and untagged segment headers (RFC 5041);
//   - the RDMAP control field, opcodes, Read Request and Terminate bodies
//     (RFC 5040).
//
// The package does no I/O and keeps no connection state: it encodes into
// caller-supplied slices and decodes from them. Decoders never panic on
// any input, never allocate, and return the sentinel errors defined in
// errors.go so that a caller can pick the Terminate error code to send
// (see TerminateFor). Decoded byte slices alias the input; the comment on
// each decoder says for how long they stay valid.
//
// Multi-byte fields are big-endian on the wire, except the MPA CRC, which
// siw stores little-endian.
package iwarp
