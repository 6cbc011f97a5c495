// Package rsocket is net.Conn and net.Listener over RDMA, speaking the wire
// protocol of librdmacm's rsockets (rsocket(7)), so a Go program talks to C
// programs written against rsocket.h, and any Go server (net/http, gRPC,
// io.Copy) runs over RDMA unchanged:
//
//	l, _ := rsocket.Listen("tcp", ":7471")
//	go http.Serve(l, handler)
//	c, _ := rsocket.Dial("tcp", "server:7471", rsocket.WithRQSize(256))
//
// # Protocol
//
// A connection is an RC queue pair set up through the RDMA CM (port space
// TCP; on iWARP, and so on cmrt's software fabric, the rdma_cm port is the
// TCP port). Each side puts rsockets' connection data in the private data
// of the request and the reply: version 1, its byte order, its receive
// credits, where its target SGL is and its first receive buffer. Data goes
// by RDMA Write into a receive buffer the peer offered; a 32-bit message
// word announces each write and carries credit updates, new receive
// buffers (written into the target SGL), iomap updates and control
// messages (shutdown, disconnect). As in rsockets, each side picks how it
// sends the word from its own device's transport when it creates its queue
// pair: on InfiniBand and RoCE the word is the immediate data of the RDMA
// Write itself (a zero-length Write when nothing is written), which
// consumes one of the peer's receives; iWARP has no Write with Immediate,
// so there the word is a 4-byte Send after the Write (RS_OPT_MSG_SEND).
// Where the queue pair posts lists (fabric.SendListPoster: the software
// fabric), a message's Write and Send go as one list, and so do the
// messages a Write is cut into (rsockets cuts a 4 KiB Write into two):
// one write(2) on the fabric's socket for a Write.
// The connection data says nothing of it (both ends of a link share its
// transport), and a receiver takes either form. Keepalives are
// zero-length RDMA Writes. Direct writes into a buffer the peer mapped
// (riomap, riowrite) are Conn.IOMap and Conn.IOWrite.
//
// cmrt adds one thing rsockets ignores: a flag in the connection data and a
// mark in credit messages that tell a cmrt peer when a new receive buffer
// descriptor has been written, so it never reads one while it is being
// written (see connFlagMarked).
//
// # Goroutines
//
// The sockets of a fabric share one event channel and one reactor
// (package reactor), which reads the CM events of every id on a single
// goroutine. On the kernel fabric (a fabric that does not declare its
// completions made in process: fabric.InProcessCompleter) it also polls
// the completion queues of every connection and wakes the Reads and
// Writes that wait, which spin for the poll time first; on the software
// fabric a blocked Read or Write polls and waits on its connection's
// queues itself, and is woken by the fabric goroutine that queues the
// completion. Thousands of connections add no goroutine
// inside the library; goroutines blocked in Read or Write are the
// caller's.
//
// # Addresses
//
// LocalAddr and RemoteAddr are *Addr, a type of this package (network
// "rsocket") whose String is "ip:port", rather than *net.TCPAddr: an
// rsocket is not a TCP connection, even where the fabric's wire is.
//
// # Fabrics
//
// Sockets run on the default fabric (fabric.Default: $CMRT_FABRIC, else
// the software fabric) or the one given with WithFabric. The software
// fabric is iWARP on the wire: Sends after Writes. The kernel fabric
// speaks either mode, by device: Sends on siw, Writes with Immediate on
// rxe (RoCE), as on any InfiniBand device the kernel fabric has a verbs
// provider for. On a device, the Write of a data message from the send
// buffer is signaled and frees its part of the buffer by its own
// completion, as rsockets' requests all are: siw sends an unsignaled
// request of a page or more by reference, reading it while TCP holds it,
// after later requests have completed.
//
// A close on siw is not a delivery: rsockets closes once its sends have
// completed, which on siw means handed to TCP. A message the peer sends
// meanwhile (a credit update) reaches a socket closed for reading, TCP
// aborts the connection and drops what was not sent yet; the peer's
// Read then fails with ECONNRESET (a C rsocket there hangs). Protocols
// that need the last bytes delivered confirm them, as over TCP.
package rsocket
