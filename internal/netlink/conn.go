package netlink

import (
	"fmt"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// maxDumpAttempts bounds the retries of a dump interrupted by concurrent
// changes (NLM_F_DUMP_INTR).
const maxDumpAttempts = 5

// Conn is a NETLINK_ROUTE request socket. It reuses its buffers across
// requests, so repeated lookups allocate little. A Conn is safe for
// concurrent use; requests are serialized. It stays in the network
// namespace it was created in.
type Conn struct {
	mu    sync.Mutex
	s     *socket // nil once closed
	seq   uint32
	req   builder
	dirty bool             // an exchange was abandoned; drain before the next one
	names map[int32]string // interface-name cache, revalidated on every use
	// noIoctl is set once the SIOCGIFNAME/SIOCGIFMTU ioctls failed; name and
	// MTU lookups then use RTM_GETLINK.
	noIoctl bool
}

// Dial opens a NETLINK_ROUTE socket in the calling thread's network
// namespace.
func Dial() (*Conn, error) {
	s, err := openSocket(0, false)
	if err != nil {
		return nil, fmt.Errorf("netlink: dial: %w", err)
	}
	return &Conn{s: s, seq: uint32(time.Now().UnixNano())}, nil
}

// Close closes the socket. It is idempotent.
func (c *Conn) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.s == nil {
		return nil
	}
	err := c.s.close()
	c.s = nil
	return err
}

// exchange modes.
const (
	modeGet  = iota // a single reply message (or NLMSG_ERROR)
	modeDump        // NLM_F_MULTI messages ended by NLMSG_DONE
	modeAck         // NLM_F_ACK: ended by NLMSG_ERROR (error 0 = success)

	// modeSmall, or-ed into modeGet, marks a request whose answer is one
	// short message (a route, a neighbour: a few hundred bytes, far below
	// the 32 KiB buffer), read without a peek first (socket.recvSmall).
	modeSmall = 1 << 4
)

// reply tracks one request/response exchange. It is independent of the
// socket so that it can be tested and fuzzed with hand-built datagrams.
type reply struct {
	op   string
	seq  uint32
	pid  uint32
	mode int
	err  error // first error (kernel error, callback error)
	// broken is set when a datagram could not be split into messages; the
	// exchange is over but unread parts may remain in the socket.
	broken bool
	intr   bool // some message carried NLM_F_DUMP_INTR
}

// feed processes one datagram and reports whether the exchange is complete.
// fn is called for each data message of this exchange while no error has
// been recorded; messages for other sequence numbers or ports are ignored.
func (r *reply) feed(b []byte, fn func(typ uint16, payload []byte) error) bool {
	for len(b) > 0 {
		h, p, rest, err := nextMessage(b)
		if err != nil {
			r.setErr(err)
			r.broken = true
			return true
		}
		b = rest
		if h.Seq != r.seq || h.Pid != r.pid {
			continue // stale reply of an abandoned exchange, or not ours
		}
		switch h.Type {
		case unix.NLMSG_NOOP:
			continue
		case unix.NLMSG_ERROR:
			e, err := parseError(r.op, h.Flags, p)
			if err != nil {
				r.setErr(err)
			} else if e != nil {
				r.setErr(e)
			}
			return true
		case unix.NLMSG_DONE:
			if len(p) >= 4 {
				if code := int32(ne.Uint32(p)); code < 0 && code >= -4095 {
					r.setErr(&Error{Op: r.op, Errno: unix.Errno(-code)})
				}
			}
			return true
		case unix.NLMSG_OVERRUN:
			r.setErr(malformed("NLMSG_OVERRUN"))
			return true
		}
		if h.Flags&unix.NLM_F_DUMP_INTR != 0 {
			r.intr = true
		}
		if r.err == nil && fn != nil {
			if err := fn(h.Type, p); err != nil {
				r.err = err
			}
		}
		if r.mode == modeGet && h.Flags&unix.NLM_F_MULTI == 0 {
			return true
		}
	}
	return false
}

func (r *reply) setErr(err error) {
	if r.err == nil {
		r.err = err
	}
}

// roundTrip sends the request in c.req (built with sequence number seq) and
// feeds the replies to fn until the exchange completes. c.mu must be held.
// The payload passed to fn is only valid during the call.
func (c *Conn) roundTrip(op string, seq uint32, mode int, fn func(typ uint16, payload []byte) error) (intr bool, err error) {
	if c.s == nil {
		return false, ErrClosed
	}
	if c.dirty {
		c.drain()
	}
	if err := c.s.send(c.req.finish()); err != nil {
		return false, err
	}
	small := mode&modeSmall != 0 && len(c.s.buf) >= initialBufSize
	r := reply{op: op, seq: seq, pid: c.s.pid, mode: mode &^ modeSmall}
	for {
		var n int
		var from uint32
		var err error
		if small {
			n, from, err = c.s.recvSmall()
		} else {
			n, from, err = c.s.recv(0)
		}
		if err != nil {
			c.dirty = true
			return false, os.NewSyscallError("recvfrom", err)
		}
		if from != 0 {
			continue // unicast from another process, not the kernel
		}
		if r.feed(c.s.buf[:n], fn) {
			if r.broken {
				c.dirty = true
			}
			return r.intr, r.err
		}
	}
}

// drain discards whatever is queued on the socket, including the remaining
// parts of an abandoned dump (the kernel refuses a new dump with EBUSY while
// one is in progress).
func (c *Conn) drain() {
	for i := 0; i < 1<<16; i++ {
		if _, _, err := c.s.recv(unix.MSG_DONTWAIT); err != nil && err != unix.ENOBUFS {
			break
		}
	}
	c.dirty = false
}

// nextSeq returns a fresh sequence number. c.mu must be held.
func (c *Conn) nextSeq() uint32 {
	c.seq++
	return c.seq
}

// dump runs a dump request built by build (which must call c.req.begin with
// the given sequence number), retrying when the kernel reports the dump was
// interrupted. reset is called before every attempt. c.mu must be held.
func (c *Conn) dump(op string, build func(seq uint32), reset func(), fn func(typ uint16, payload []byte) error) error {
	for range maxDumpAttempts {
		seq := c.nextSeq()
		build(seq)
		reset()
		intr, err := c.roundTrip(op, seq, modeDump, fn)
		if err != nil {
			return err
		}
		if !intr {
			return nil
		}
	}
	return ErrDumpInterrupted
}

// internName returns the interface name b for index as a string, reusing the
// cached string when it is unchanged so that steady-state lookups do not
// allocate. c.mu must be held.
func (c *Conn) internName(index int32, b []byte) string {
	if s, ok := c.names[index]; ok && s == string(b) {
		return s
	}
	if c.names == nil {
		c.names = make(map[int32]string)
	} else if len(c.names) >= 1024 {
		clear(c.names)
	}
	s := string(b)
	c.names[index] = s
	return s
}
