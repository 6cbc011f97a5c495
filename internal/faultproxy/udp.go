package faultproxy

import (
	"errors"
	"net"
	"net/netip"
	"sync"
	"time"
)

// UDP is a fault-injecting UDP proxy from a loopback port to an upstream
// address. Each client address is a flow with its own socket towards the
// upstream, so replies find their way back. Create it with NewUDP; Close
// it.
type UDP struct {
	front  *net.UDPConn
	up     netip.AddrPort
	policy Policy
	done   *closer
	wg     sync.WaitGroup
	stats  counters

	mu     sync.Mutex
	flows  map[netip.AddrPort]*flow
	timers map[*time.Timer]struct{}
	closed bool
}

// flow is one client address and its upstream socket.
type flow struct {
	n      int
	client netip.AddrPort
	back   *net.UDPConn
	mu     sync.Mutex
	dead   bool
	index  [2]int
	held   [2][]byte
}

// NewUDP starts a proxy on 127.0.0.1 (a free port) that forwards datagrams
// to upstream under policy p, and the upstream's answers back.
func NewUDP(upstream netip.AddrPort, p Policy) (*UDP, error) {
	front, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		return nil, err
	}
	u := &UDP{front: front, up: upstream, policy: p, done: newCloser(),
		flows: make(map[netip.AddrPort]*flow), timers: make(map[*time.Timer]struct{})}
	u.wg.Add(1)
	go u.frontLoop()
	return u, nil
}

// Addr returns the address clients send to.
func (u *UDP) Addr() netip.AddrPort { return u.front.LocalAddr().(*net.UDPAddr).AddrPort() }

// Stats returns what the proxy did so far.
func (u *UDP) Stats() Stats { return u.stats.snapshot() }

// Close stops the proxy and returns when its goroutines have; delayed
// datagrams not yet sent are dropped.
func (u *UDP) Close() error {
	u.mu.Lock()
	if u.closed {
		u.mu.Unlock()
		return nil
	}
	u.closed = true
	for t := range u.timers {
		if t.Stop() {
			u.wg.Done()
		}
	}
	u.timers = nil
	flows := make([]*flow, 0, len(u.flows))
	for _, f := range u.flows {
		flows = append(flows, f)
	}
	u.mu.Unlock()
	u.done.close()
	err := u.front.Close()
	for _, f := range flows {
		_ = f.back.Close()
	}
	u.wg.Wait()
	return err
}

func (u *UDP) frontLoop() {
	defer u.wg.Done()
	buf := make([]byte, 64<<10)
	for {
		n, from, err := u.front.ReadFromUDPAddrPort(buf)
		if err != nil {
			select {
			case <-u.done.ch:
				return
			default:
			}
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				continue
			}
			return
		}
		f := u.flow(from)
		if f == nil {
			return
		}
		u.forward(f, ClientToServer, buf[:n])
	}
}

// flow returns the flow of a client address, creating it (and its
// upstream socket and reader) on first use; nil once closed.
func (u *UDP) flow(client netip.AddrPort) *flow {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.closed {
		return nil
	}
	if f := u.flows[client]; f != nil {
		return f
	}
	back, err := net.DialUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)}, net.UDPAddrFromAddrPort(u.up))
	if err != nil {
		return nil
	}
	f := &flow{n: len(u.flows), client: client, back: back}
	u.flows[client] = f
	u.stats.conns.Add(1)
	u.wg.Add(1)
	go u.backLoop(f)
	return f
}

func (u *UDP) backLoop(f *flow) {
	defer u.wg.Done()
	buf := make([]byte, 64<<10)
	for {
		n, err := f.back.Read(buf)
		if err != nil {
			select {
			case <-u.done.ch:
				return
			default:
			}
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				continue
			}
			// ECONNREFUSED from an earlier send to a closed port: go on.
			if !isClosed(err) {
				continue
			}
			return
		}
		u.forward(f, ServerToClient, buf[:n])
	}
}

func isClosed(err error) bool { return errors.Is(err, net.ErrClosed) }

// send writes one datagram in direction dir.
func (u *UDP) send(f *flow, dir Dir, b []byte) {
	f.mu.Lock()
	dead := f.dead
	f.mu.Unlock()
	if dead {
		return
	}
	if dir == ClientToServer {
		_, _ = f.back.Write(b)
	} else {
		_, _ = u.front.WriteToUDPAddrPort(b, f.client)
	}
}

// later sends b after d unless the proxy closes first.
func (u *UDP) later(f *flow, dir Dir, b []byte, d time.Duration) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.closed {
		return
	}
	u.wg.Add(1)
	var t *time.Timer
	t = time.AfterFunc(d, func() {
		defer u.wg.Done()
		u.mu.Lock()
		if u.timers != nil {
			delete(u.timers, t)
		}
		u.mu.Unlock()
		u.send(f, dir, b)
	})
	u.timers[t] = struct{}{}
}

// forward applies the policy to one datagram.
func (u *UDP) forward(f *flow, dir Dir, b []byte) {
	f.mu.Lock()
	if f.dead {
		f.mu.Unlock()
		return
	}
	unit := Unit{Dir: dir, Conn: f.n, Index: f.index[dir], Kind: UnitDatagram, Bytes: append([]byte(nil), b...)}
	f.index[dir]++
	f.mu.Unlock()
	a := decide(u.policy, &u.stats, &unit)
	out := unit.Bytes
	if a.Rewrite != nil {
		out = a.Rewrite
	}
	var held []byte
	if a.Op != Reorder {
		f.mu.Lock()
		held, f.held[dir] = f.held[dir], nil
		f.mu.Unlock()
	}
	switch a.Op {
	case Pass:
		u.send(f, dir, out)
	case Drop:
	case Delay:
		u.later(f, dir, out, a.Delay)
	case Duplicate:
		u.send(f, dir, out)
		u.send(f, dir, out)
	case Reorder:
		f.mu.Lock()
		prev := f.held[dir]
		f.held[dir] = out
		f.mu.Unlock()
		if prev != nil {
			u.send(f, dir, prev)
		}
	default: // Cut, Reset, CrashClient, CrashServer, Blackhole
		f.mu.Lock()
		f.dead = true
		f.mu.Unlock()
	}
	if held != nil {
		u.send(f, dir, held)
	}
}
