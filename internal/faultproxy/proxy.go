// Package faultproxy is a fault-injecting proxy for tests: it sits between
// a client and a server on loopback and forwards their traffic, dropping,
// delaying, duplicating or reordering it, cutting or resetting the
// connection, or making one peer vanish, as a Policy decides.
//
// Decisions are made per unit of the protocol, never per arbitrary chunk:
// on TCP (package fabric/soft's RC connections, iWARP) the byte stream of
// each direction is parsed with package iwarp into its MPA Request or Reply
// and then the FPDUs that follow; a stream that does not parse as MPA is
// forwarded in the chunks it arrives in (UnitRaw). On UDP (UD ids, SIDR)
// the unit is the datagram.
//
// The Policy sees every unit with its direction, its connection (or UDP
// flow) and its index in that direction, so a policy computed from those
// (and a fuzzer's input) decides the same on every run, however the
// goroutines of the proxy interleave.
package faultproxy

import (
	"encoding/binary"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// Dir is a direction through the proxy.
type Dir uint8

// Directions.
const (
	// ClientToServer is from whoever connected to the proxy to the upstream.
	ClientToServer Dir = iota
	// ServerToClient is the way back.
	ServerToClient
)

// String returns "c->s" or "s->c".
func (d Dir) String() string {
	if d == ClientToServer {
		return "c->s"
	}
	return "s->c"
}

// UnitKind says what a unit is.
type UnitKind uint8

// Unit kinds.
const (
	// UnitRaw is a chunk of a TCP stream that is not (or no longer) MPA.
	UnitRaw UnitKind = iota
	// UnitMPARequest is an MPA Request frame (with its private data).
	UnitMPARequest
	// UnitMPAReply is an MPA Reply frame, accepting or rejecting.
	UnitMPAReply
	// UnitFPDU is one MPA FPDU: length, ULPDU, pad and CRC.
	UnitFPDU
	// UnitDatagram is one UDP datagram.
	UnitDatagram
)

var unitNames = [...]string{"raw", "mpa-request", "mpa-reply", "fpdu", "datagram"}

// String names the kind.
func (k UnitKind) String() string {
	if int(k) < len(unitNames) {
		return unitNames[k]
	}
	return fmt.Sprintf("UnitKind(%d)", uint8(k))
}

// Unit is what the proxy forwards, or not, as a whole.
type Unit struct {
	// Dir is the unit's direction.
	Dir Dir
	// Conn numbers the TCP connections (or UDP flows: client addresses)
	// from 0 in the order the proxy saw them.
	Conn int
	// Index numbers the units of one direction of one connection from 0.
	Index int
	// Kind is what the unit is.
	Kind UnitKind
	// Bytes are the unit's bytes, valid during the Policy call only.
	Bytes []byte
}

// Op is what to do with a unit.
type Op uint8

// Operations. On UDP, Cut, Reset, CrashClient, CrashServer and Blackhole
// all stop the flow: the unit and every later datagram of the flow, both
// ways, are dropped.
const (
	// Pass forwards the unit.
	Pass Op = iota
	// Drop discards the unit.
	Drop
	// Delay forwards the unit after Action.Delay. On TCP the direction
	// waits (order is kept); on UDP later datagrams overtake it.
	Delay
	// Duplicate forwards the unit twice.
	Duplicate
	// Reorder holds the unit and forwards it right after the next unit of
	// its direction (or before the direction's end, if none comes).
	Reorder
	// Cut closes both connections in order (FIN), before the unit.
	Cut
	// Reset resets both connections (RST), before the unit.
	Reset
	// CrashClient makes the client vanish before the unit: the server's
	// connection is reset, the client's left open and silent.
	CrashClient
	// CrashServer makes the server vanish: the client's connection is
	// reset, the server's left open and silent.
	CrashServer
	// Blackhole stops all forwarding of the connection, both ways, leaving
	// both sides open and silent: a partition.
	Blackhole
	numOps
)

var opNames = [...]string{"pass", "drop", "delay", "duplicate", "reorder", "cut", "reset", "crash-client", "crash-server", "blackhole"}

// String names the operation.
func (o Op) String() string {
	if o < numOps {
		return opNames[o]
	}
	return fmt.Sprintf("Op(%d)", uint8(o))
}

// NumOps is the number of operations, for policies that pick one from a
// fuzzer's byte.
const NumOps = int(numOps)

// Action is a Policy's decision for a unit.
type Action struct {
	Op Op
	// Delay is the wait of a Delay.
	Delay time.Duration
	// Rewrite, if not nil, is forwarded instead of the unit's bytes (by
	// Pass, Delay, Duplicate and Reorder).
	Rewrite []byte
}

// Policy decides what happens to each unit. It is called from the proxy's
// goroutines, concurrently for different directions and connections, and
// must not block. A nil Policy passes everything.
type Policy func(u *Unit) Action

// Stats counts what a proxy did.
type Stats struct {
	// Conns is the number of TCP connections or UDP flows seen.
	Conns int
	// Units counts the units seen, by kind.
	Units [len(unitNames)]int
	// Ops counts the decisions taken, by operation.
	Ops [numOps]int
}

// String summarises the counts.
func (s Stats) String() string {
	out := fmt.Sprintf("%d conns;", s.Conns)
	for k, n := range s.Units {
		if n > 0 {
			out += fmt.Sprintf(" %s %d", UnitKind(k), n)
		}
	}
	out += ";"
	for k, n := range s.Ops {
		if n > 0 {
			out += fmt.Sprintf(" %s %d", Op(k), n)
		}
	}
	return out
}

// counters is the lock-free side of Stats.
type counters struct {
	conns atomic.Int64
	units [len(unitNames)]atomic.Int64
	ops   [numOps]atomic.Int64
}

func (c *counters) snapshot() Stats {
	s := Stats{Conns: int(c.conns.Load())}
	for k := range c.units {
		s.Units[k] = int(c.units[k].Load())
	}
	for k := range c.ops {
		s.Ops[k] = int(c.ops[k].Load())
	}
	return s
}

// decide runs the policy and counts.
func decide(p Policy, c *counters, u *Unit) Action {
	c.units[u.Kind].Add(1)
	a := Action{}
	if p != nil {
		a = p(u)
	}
	if a.Op >= numOps {
		a.Op = Pass
	}
	c.ops[a.Op].Add(1)
	return a
}

// sleep waits for a duration or until done closes; it reports whether
// the wait ran to its end.
func sleep(d time.Duration, done <-chan struct{}) bool {
	if d <= 0 {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-done:
		return false
	}
}

// closer closes a channel once.
type closer struct {
	once sync.Once
	ch   chan struct{}
}

func newCloser() *closer { return &closer{ch: make(chan struct{})} }

func (c *closer) close() { c.once.Do(func() { close(c.ch) }) }

// SIDRQKey returns a copy of a SIDR REQ or REP (package internal/sidr's
// wire format) with its Q_Key replaced, or nil if b is not one: a policy's
// Rewrite to make a UD connect end in ADDR_ERROR (the peer's Q_Key is
// wrong).
func SIDRQKey(b []byte, qkey uint32) []byte {
	const qkeyOff, hdrLen = 20, 24
	if len(b) < hdrLen || b[0] != 1 || (b[1] != 1 && b[1] != 2) {
		return nil
	}
	out := append([]byte(nil), b...)
	binary.BigEndian.PutUint32(out[qkeyOff:], qkey)
	return out
}
