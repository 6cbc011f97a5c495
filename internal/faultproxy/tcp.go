package faultproxy

import (
	"errors"
	"io"
	"net"
	"net/netip"
	"sync"
	"syscall"
	"time"

	"github.com/cmrt/cmrt/internal/iwarp"
)

// TCP is a fault-injecting TCP proxy from a loopback port to an upstream
// address. Create it with NewTCP; Close it.
type TCP struct {
	ln     *net.TCPListener
	up     netip.AddrPort
	policy Policy
	done   *closer
	wg     sync.WaitGroup
	stats  counters

	mu     sync.Mutex
	pairs  map[*pair]struct{}
	nconn  int
	closed bool
}

// NewTCP starts a proxy listening on 127.0.0.1 (a free port) that forwards
// every connection to upstream under policy p.
func NewTCP(upstream netip.AddrPort, p Policy) (*TCP, error) {
	ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		return nil, err
	}
	t := &TCP{ln: ln, up: upstream, policy: p, done: newCloser(), pairs: make(map[*pair]struct{})}
	t.wg.Add(1)
	go t.accept()
	return t, nil
}

// Addr returns the address clients connect to.
func (t *TCP) Addr() netip.AddrPort { return t.ln.Addr().(*net.TCPAddr).AddrPort() }

// Stats returns what the proxy did so far.
func (t *TCP) Stats() Stats { return t.stats.snapshot() }

// Close stops the proxy: the listener and every connection are closed, and
// Close returns when the proxy's goroutines have.
func (t *TCP) Close() error {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return nil
	}
	t.closed = true
	pairs := make([]*pair, 0, len(t.pairs))
	for p := range t.pairs {
		pairs = append(pairs, p)
	}
	t.mu.Unlock()
	t.done.close()
	err := t.ln.Close()
	for _, p := range pairs {
		p.closeBoth(false)
	}
	t.wg.Wait()
	return err
}

func (t *TCP) accept() {
	defer t.wg.Done()
	for {
		c, err := t.ln.AcceptTCP()
		if err != nil {
			return
		}
		t.mu.Lock()
		if t.closed {
			t.mu.Unlock()
			_ = c.Close()
			return
		}
		n := t.nconn
		t.nconn++
		t.wg.Add(1)
		t.mu.Unlock()
		t.stats.conns.Add(1)
		go t.serve(n, c)
	}
}

// pair is one proxied connection: the client's and the upstream's sockets.
type pair struct {
	n      int
	conns  [2]*net.TCPConn // indexed by the side the bytes come from: [ClientToServer] is the client's
	mu     sync.Mutex
	dead   bool // blackholed or crashed: read and discard
	cut    bool // FIN sent both ways: read and discard until the peers close
	closed [2]bool
	ended  [2]bool // the direction's reader is done
}

// serve dials upstream for client connection c and pumps both ways.
func (t *TCP) serve(n int, c *net.TCPConn) {
	defer t.wg.Done()
	d := net.Dialer{Timeout: 2 * time.Second}
	s, err := d.Dial("tcp", t.up.String())
	if err != nil {
		_ = c.SetLinger(0)
		_ = c.Close()
		return
	}
	p := &pair{n: n, conns: [2]*net.TCPConn{c, s.(*net.TCPConn)}}
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		p.closeBoth(true)
		return
	}
	t.pairs[p] = struct{}{}
	t.mu.Unlock()
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); t.pump(p, ClientToServer) }()
	go func() { defer wg.Done(); t.pump(p, ServerToClient) }()
	wg.Wait()
	if p.isDead() {
		// A vanished peer's partner, or a partitioned pair, stays open
		// and silent until the proxy closes.
		<-t.done.ch
	}
	p.closeBoth(false)
	t.mu.Lock()
	delete(t.pairs, p)
	t.mu.Unlock()
}

// closeSide closes one socket, with RST if reset.
func (p *pair) closeSide(side Dir, reset bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed[side] {
		return
	}
	p.closed[side] = true
	if reset {
		_ = p.conns[side].SetLinger(0)
	}
	_ = p.conns[side].Close()
}

func (p *pair) closeBoth(reset bool) {
	p.closeSide(ClientToServer, reset)
	p.closeSide(ServerToClient, reset)
}

func (p *pair) isDead() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.dead
}

// silent reports whether nothing more is forwarded.
func (p *pair) silent() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.dead || p.cut
}

// shutdown sends FIN both ways (once) and stops forwarding.
func (p *pair) shutdown() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cut {
		return
	}
	p.cut = true
	for side, c := range p.conns {
		if !p.closed[side] {
			_ = c.CloseWrite()
		}
	}
}

func (p *pair) setDead() {
	p.mu.Lock()
	p.dead = true
	p.mu.Unlock()
}

// framer cuts one direction's stream into units: an MPA frame first, then
// FPDUs; raw chunks once the stream stops parsing.
type framer struct {
	buf    []byte
	mpa    bool // the MPA frame went by
	raw    bool
	reject bool // the MPA frame was a Reject: what follows is not FPDUs
}

// next returns the next complete unit at the front of buf (and its
// length), or ok false when more bytes are needed.
func (f *framer) next() (kind UnitKind, n int, ok bool) {
	if len(f.buf) == 0 {
		return 0, 0, false
	}
	if f.raw {
		return UnitRaw, len(f.buf), true
	}
	if !f.mpa {
		var fr iwarp.MPAFrame
		m, err := iwarp.ParseMPA(f.buf, &fr)
		switch {
		case errors.Is(err, iwarp.ErrShort):
			return 0, 0, false
		case m == 0:
			f.raw = true
			return UnitRaw, len(f.buf), true
		}
		f.mpa, f.reject = true, fr.Reject
		if fr.Reply {
			return UnitMPAReply, m, true
		}
		return UnitMPARequest, m, true
	}
	if f.reject {
		f.raw = true
		return UnitRaw, len(f.buf), true
	}
	_, m, err := iwarp.ParseFPDU(f.buf, false)
	if errors.Is(err, iwarp.ErrShort) {
		if m > iwarp.MaxFPDU {
			f.raw = true
			return UnitRaw, len(f.buf), true
		}
		return 0, 0, false
	}
	return UnitFPDU, m, true
}

// pump forwards one direction of p until its reader ends.
func (t *TCP) pump(p *pair, dir Dir) {
	from, to := p.conns[dir], p.conns[1-dir]
	toSide := 1 - dir
	var f framer
	var held []byte // a Reorder'ed unit
	index := 0
	rb := make([]byte, 32<<10)
	write := func(b []byte) {
		if !p.silent() {
			_, _ = to.Write(b)
		}
	}
	for {
		n, err := from.Read(rb)
		if n > 0 && !p.silent() {
			f.buf = append(f.buf, rb[:n]...)
			for {
				kind, m, ok := f.next()
				if !ok {
					break
				}
				unit := append([]byte(nil), f.buf[:m]...)
				f.buf = f.buf[m:]
				u := Unit{Dir: dir, Conn: p.n, Index: index, Kind: kind, Bytes: unit}
				index++
				a := decide(t.policy, &t.stats, &u)
				out := unit
				if a.Rewrite != nil {
					out = a.Rewrite
				}
				switch a.Op {
				case Pass:
					write(out)
				case Drop:
				case Delay:
					if !sleep(a.Delay, t.done.ch) {
						return
					}
					write(out)
				case Duplicate:
					write(out)
					write(out)
				case Reorder:
					if held != nil {
						write(held) // two in a row: keep the first one's turn
					}
					held = out
					continue
				case Cut:
					// FIN both ways; go on reading (and discarding) so that
					// closing later sends no RST for unread bytes.
					p.shutdown()
					held = nil
					continue
				case Reset:
					p.closeBoth(true)
					return
				case CrashClient:
					p.setDead()
					p.closeSide(ServerToClient, true)
					return
				case CrashServer:
					p.setDead()
					p.closeSide(ClientToServer, true)
					return
				case Blackhole:
					p.setDead()
				}
				if held != nil && a.Op != Reorder {
					write(held)
					held = nil
				}
			}
		}
		if err != nil {
			if held != nil {
				write(held)
			}
			switch {
			case p.silent():
				// A crashed or partitioned peer says nothing more.
			case errors.Is(err, io.EOF):
				_ = to.CloseWrite() // pass the FIN on
			case errors.Is(err, syscall.ECONNRESET):
				p.closeSide(toSide, true)
			default:
				p.closeSide(toSide, false)
			}
			return
		}
	}
}
