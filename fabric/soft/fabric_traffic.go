package soft

import (
	"sync/atomic"

	"github.com/cmrt/cmrt/fabric"
)

// Counters are the software fabric's traffic counts: totals since the
// process started, of every software fabric instance of the process (the
// registered one and any made with New). Read them with Traffic.
type Counters struct {
	// Connections counts the connections established: ESTABLISHED events
	// reported, on both sides of an RC connection and on the active side
	// of a UD (SIDR) one.
	Connections uint64
	// SentBytes and ReceivedBytes count the bytes written to and read
	// from data sockets: an RC connection's TCP stream once the MPA
	// exchange is over (iWARP framing included), and UD datagrams (SIDR
	// messages included).
	SentBytes, ReceivedBytes uint64
	// SentWrites counts the system calls (write(2), writev(2)) that
	// wrote bytes to an RC connection's data socket: with SentMessages,
	// how many messages leave per system call.
	SentWrites uint64
	// SentMessages and ReceivedMessages count RC messages (DDP messages
	// framed and received in full: Sends, Writes, Read Requests and
	// Responses, Terminates) and UD datagrams.
	SentMessages, ReceivedMessages uint64
	// Completions counts the work completions the fabric produced,
	// successful or not (also those a destroyed queue dropped).
	Completions uint64
}

// statStripes is how many copies of the counters the fabric keeps: a count
// goes to the stripe of its socket (or id, or queue pair), so that
// connections served by different goroutines seldom write the same cache
// line.
const statStripes = 8

// statStripe is one copy of the counters, one cache line.
type statStripe struct {
	conns, txBytes, txWrites, rxBytes, txMsgs, rxMsgs, wcs atomic.Uint64
	_                                                      [8]byte
}

// softStats are the process-wide counters behind Traffic.
var softStats [statStripes]statStripe

func stripeOf(key int) *statStripe { return &softStats[uint(key)%statStripes] }

// countEvent counts an event an endpoint reports (emitLocked).
func countEvent(uid uint64, t fabric.EventType) {
	if t == fabric.EventEstablished {
		stripeOf(int(uid)).conns.Add(1)
	}
}

// countSent counts n bytes written to socket fd by one system call.
func countSent(fd, n int) {
	s := stripeOf(fd)
	s.txBytes.Add(uint64(n))
	s.txWrites.Add(1)
}

// countReceived counts n bytes read from socket fd.
func countReceived(fd, n int) { stripeOf(fd).rxBytes.Add(uint64(n)) }

// countSentMessage counts one message (or datagram) sent on socket fd.
func countSentMessage(fd int) { stripeOf(fd).txMsgs.Add(1) }

// countReceivedMessage counts one message received on socket fd when last
// is set (an RC message's last segment, or a datagram).
func countReceivedMessage(fd int, last bool) {
	if last {
		stripeOf(fd).rxMsgs.Add(1)
	}
}

// countDatagram counts a datagram of n bytes sent (err nil) on fd.
func countDatagram(fd, n int, err error) {
	if err == nil {
		s := stripeOf(fd)
		s.txBytes.Add(uint64(n))
		s.txMsgs.Add(1)
	}
}

// countCompletion counts a work completion queued for queue pair qpn.
func countCompletion(qpn uint32) { stripeOf(int(qpn)).wcs.Add(1) }

// Traffic returns the software fabric's counters, summed over their
// stripes: a lock-free read of atomic counters, for metrics (the
// reactor/promcollector package exports them).
func Traffic() Counters {
	var c Counters
	for k := range softStats {
		s := &softStats[k]
		c.Connections += s.conns.Load()
		c.SentBytes += s.txBytes.Load()
		c.SentWrites += s.txWrites.Load()
		c.ReceivedBytes += s.rxBytes.Load()
		c.SentMessages += s.txMsgs.Load()
		c.ReceivedMessages += s.rxMsgs.Load()
		c.Completions += s.wcs.Load()
	}
	return c
}
