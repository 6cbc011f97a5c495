package main

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strconv"
)

// oob is cmtime's out-of-band channel: one TCP connection (IPv4, as
// rdma-core's) over which client and server exchange one byte at each sync
// point, the byte being the step just finished (0 when a test starts). A
// goroutine reads it, so a peer that goes away ends the waits at once.
type oob struct {
	conn net.Conn
	in   chan byte     // the bytes read; closed when reading ends
	done chan struct{} // closed when the reader has returned
	quit chan struct{} // closed by close
	dead chan struct{} // closed when reading ended by itself (peer gone)
	err  error         // why reading ended, valid after in is closed
}

func newOOB(c net.Conn) *oob {
	o := &oob{conn: c, in: make(chan byte, 16), done: make(chan struct{}), quit: make(chan struct{}), dead: make(chan struct{})}
	go o.read()
	return o
}

func (o *oob) read() {
	defer close(o.done)
	defer close(o.in)
	var b [1]byte
	for {
		if _, err := io.ReadFull(o.conn, b[:]); err != nil {
			o.err = err
			select {
			case <-o.quit:
			default:
				close(o.dead)
			}
			return
		}
		select {
		case o.in <- b[0]:
		case <-o.quit:
			return
		}
	}
}

// oobListen listens on addr:port (any address when addr is invalid) and
// takes one connection (oob_server_setup).
func oobListen(addr netip.Addr, port uint16) (*oob, error) {
	if !addr.IsValid() {
		addr = netip.IPv4Unspecified()
	}
	l, err := net.Listen("tcp4", net.JoinHostPort(addr.String(), strconv.Itoa(int(port))))
	if err != nil {
		return nil, err
	}
	defer l.Close()
	c, err := l.Accept()
	if err != nil {
		return nil, err
	}
	return newOOB(c), nil
}

// oobDial connects to the server's out-of-band port (oob_client_setup).
func oobDial(addr netip.Addr, port uint16) (*oob, error) {
	c, err := net.Dial("tcp4", net.JoinHostPort(addr.String(), strconv.Itoa(int(port))))
	if err != nil {
		return nil, err
	}
	return newOOB(c), nil
}

var errOOBClosed = errors.New("out-of-band connection closed by the peer")

func (o *oob) recv(abort <-chan struct{}) (byte, error) {
	select {
	case b, ok := <-o.in:
		if !ok {
			if errors.Is(o.err, io.EOF) {
				return 0, errOOBClosed
			}
			return 0, o.err
		}
		return b, nil
	case <-abort:
		return 0, errAborted
	}
}

// sendRecv sends val and waits for the peer to echo it (oob_sendrecv).
func (o *oob) sendRecv(val byte, abort <-chan struct{}) error {
	if _, err := o.conn.Write([]byte{val}); err != nil {
		return err
	}
	b, err := o.recv(abort)
	if err == nil && b != val {
		err = fmt.Errorf("out-of-band sync: got %d, want %d", b, val)
	}
	return err
}

// recvSend waits for val from the peer and echoes it (oob_recvsend).
func (o *oob) recvSend(val byte, abort <-chan struct{}) error {
	b, err := o.recv(abort)
	if err != nil {
		return err
	}
	if b != val {
		return fmt.Errorf("out-of-band sync: got %d, want %d", b, val)
	}
	_, err = o.conn.Write([]byte{val})
	return err
}

// close closes the connection and waits for the reader.
func (o *oob) close() {
	close(o.quit)
	_ = o.conn.Close()
	<-o.done
}
