package main

import (
	"errors"
	"net"
	"net/netip"

	"golang.org/x/sys/unix"
)

// The socket baseline (-S): the same table for plain TCP connections, where
// "create id" is socket(2), "cm connect" connect(2) and "destroy id"
// close(2).

func (t *test) sockServer(iter int) bool {
	t.printf("Server baseline socket setup\n")
	l, err := net.ListenTCP("tcp", net.TCPAddrFromAddrPort(t.src))
	if err != nil {
		t.perrorFail("bind", err)
		return false
	}
	defer l.Close()
	t.printf("Accept sockets\n")
	conns := make([]*net.TCPConn, 0, iter)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for i := 0; i < iter; i++ {
		c, err := l.AcceptTCP()
		if err != nil {
			t.perrorFail("accept", err)
			return false
		}
		conns = append(conns, c)
		if i == 0 {
			t.startTime(stepFullConnect)
		}
	}
	t.endTime(stepFullConnect)

	t.printf("Closing sockets\n")
	t.startTime(stepDestroyID)
	for _, c := range conns {
		c.Close()
	}
	conns = conns[:0]
	t.endTime(stepDestroyID)
	t.printf("Server baseline socket results:\n")
	t.show(iter)
	return true
}

func (t *test) sockClient(iter int) bool {
	t.printf("Client baseline socket setup\n")
	defer func() {
		for i := range t.nodes {
			if n := &t.nodes[i]; n.sock > 0 {
				unix.Close(n.sock)
				n.sock = 0
			}
		}
	}()
	t.startTime(stepFullConnect)
	t.printf("Creating sockets\n")
	t.startTime(stepCreateID)
	t.each(iter, t.createSock)
	if !t.wait(stepCreateID, iter, "create socket") {
		return false
	}
	t.endTime(stepCreateID)

	t.printf("Connecting sockets\n")
	t.startTime(stepConnect)
	t.each(iter, t.connectSock)
	if !t.wait(stepConnect, iter, "connect socket") {
		return false
	}
	t.endTime(stepConnect)
	t.endTime(stepFullConnect)

	t.printf("Closing sockets\n")
	t.startTime(stepDestroyID)
	for i := 0; i < iter; i++ {
		n := &t.nodes[i]
		t.mu.Lock()
		fd := n.sock
		n.sock = 0
		t.mu.Unlock()
		unix.Close(fd)
	}
	t.endTime(stepDestroyID)
	t.printf("Client baseline socket results:\n")
	t.show(iter)
	return true
}

func family(a netip.Addr) int {
	if a.Is4() {
		return unix.AF_INET
	}
	return unix.AF_INET6
}

func (t *test) createSock(n *node) {
	t.startPerf(n, stepCreateID)
	fd, err := unix.Socket(family(t.dst.Addr()), unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.perrorFail("socket", err)
		return
	}
	t.mu.Lock()
	n.sock = fd
	t.mu.Unlock()
	t.endPerf(n, stepCreateID)
	t.complete(stepCreateID)
}

// connectSock connects as a blocking connect(2) would: the socket is
// non-blocking so that the Go runtime's signals cannot interrupt it.
func (t *test) connectSock(n *node) {
	t.mu.Lock()
	fd := n.sock
	t.mu.Unlock()
	var sa unix.Sockaddr
	if a := t.dst.Addr(); a.Is4() {
		sa = &unix.SockaddrInet4{Port: int(t.dst.Port()), Addr: a.As4()}
	} else {
		sa = &unix.SockaddrInet6{Port: int(t.dst.Port()), Addr: a.As16()}
	}
	t.startPerf(n, stepConnect)
	err := unix.Connect(fd, sa)
	if errors.Is(err, unix.EINPROGRESS) || errors.Is(err, unix.EINTR) {
		err = awaitConnect(fd)
	}
	if err != nil {
		t.perrorFail("connect", err)
		return
	}
	t.endPerf(n, stepConnect)
	t.complete(stepConnect)
}

func awaitConnect(fd int) error {
	pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLOUT}}
	for {
		_, err := unix.Poll(pfd, -1)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return err
		}
		if pfd[0].Revents != 0 {
			break
		}
	}
	soerr, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_ERROR)
	if err != nil {
		return err
	}
	if soerr != 0 {
		return unix.Errno(soerr)
	}
	return nil
}
