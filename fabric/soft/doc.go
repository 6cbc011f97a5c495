// Package soft is the software fabric: RDMA CM semantics on any Linux host,
// with no RDMA hardware and no privileges, speaking iWARP on the wire.
//
// Each network interface with an IP address is a soft device (soft0, ...).
// RC ids (PS_TCP, and PS_IB ids of type RC) are TCP connections whose set-up
// is the iWARP MPA exchange (RFC 5044, revision 2 enhanced with the RFC 6581
// IRD/ORD block); the rdma_cm port is the TCP port, as on iWARP, so the
// fabric interoperates with the kernel's soft-iWARP (siw) and unmodified
// librdmacm programs. Address and route resolution use the kernel's routing
// table, and address resolution waits for the next hop's link-layer address
// (ARP or NDP) as the kernel's does: a host that does not answer on the
// subnet is ADDR_ERROR -ETIMEDOUT. Bind reserves real ports, so address conflicts give the errno the
// kernel's rdma_cm gives (EADDRINUSE, EADDRNOTAVAIL).
//
// UD ids (PS_UDP, PS_IPOIB) use UDP: the rdma_cm port is a UDP port whose
// socket carries a SIDR-like request/reply exchange (internal/sidr), and
// each UD QP is a UDP socket of its own. A UD connect ends with ESTABLISHED,
// or UNREACHABLE: status 2 after the listener's rdma_reject, 1 when nothing
// listens in the port space on that port (at once when the destination
// host has no socket there: its ICMP port unreachable ends the connect),
// -ETIMEDOUT when nothing answers within the retry budget (WithSIDRRetry,
// 7.75 s by default). A UD port is bound without SO_REUSEADDR, so no other
// socket of the host can take it or its datagrams; ids of one fabric share
// a port with the REUSEADDR option, under the kernel's rdma_cm rules. A
// REP counts only from the address and port its request went to.
//
// Listeners bound their state against peers: an RC listener's backlog
// counts requests reported to the user, not TCP connections still sending
// their MPA Request (those wait in a bounded pool, per source host and in
// all, oldest evicted first, and are closed at WithRequestTimeout); a UD
// listener's table of requests it answered is bounded per source host, and
// keeps an answer only for the requester's retry window.
//
// A connected RC id's QP carries RDMAP messages in DDP segments inside MPA
// FPDUs (RFC 5040/5041/5044, CRC32c when either side asks for it): Send,
// Send with Solicited Event, Send with Invalidate (the peer's region is
// invalidated once the message is placed, if it grants the peer remote
// access), RDMA Write and RDMA Read, with Terminate messages for protocol
// and protection errors. An RDMA Write completes once TCP has taken its
// bytes, before the peer has placed them.
//
// Memory regions live in the id's protection domain, one per id (not one
// per device as in librdmacm), so a peer reaches only the regions of the id
// its connection belongs to; they outlive the id's QPs. STags are a random
// 24-bit index that recurs only after 2^24 registrations in the domain and
// a random 8-bit key, with an unrelated random base address: they cannot be
// counted or guessed. Once DeregMR or DestroyQP returns, no peer reads or
// writes the memory: a Read Response or message cut short ends the
// connection with a Terminate.
//
// All sockets of a fabric are multiplexed by a small, fixed number of epoll
// loops (one by default), never a goroutine per connection; a loop starts
// with its first socket and stops a grace period (WithIdleGrace, 100ms)
// after its last, so a client making one connection at a time keeps it,
// and an idle fabric soon holds no goroutine and no descriptor beyond its
// event channels.
//
// Importing the package registers the fabric under the name "soft", the
// default fabric; package id imports it (through internal/fabrics), so
// every program that uses ids has it.
package soft

// The files, by prefix: cm_ is the CM side common to both services (the
// endpoint, its event channel, the transport interface, the port table);
// rc_ the RC transport (the TCP connection and its MPA exchange, the
// listener, the QP and the iWARP data path); ud_ the UD transport (SIDR,
// the UD QP, multicast, datagram sockets); net_ what the fabric asks of
// the host (devices, routes, neighbours, the address monitor, socket
// helpers); loop_ the event loops that poll the sockets. mr.go and cq.go
// are the verbs objects both services share; fabric.go the Fabric, its
// options and registration, fabric_traffic.go its traffic counters.
