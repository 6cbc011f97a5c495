package faultproxy

import (
	"bytes"
	"errors"
	"io"
	"net"
	"net/netip"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/cmrt/cmrt/internal/iwarp"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// stream is an MPA Request followed by FPDUs carrying one byte each.
func stream(t *testing.T, reply bool, payloads ...byte) []byte {
	t.Helper()
	b, err := iwarp.AppendMPA(nil, &iwarp.MPAFrame{Reply: reply, Rev: 2, Enhanced: true, IRD: 1, ORD: 1, PrivateData: []byte("pd")})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range payloads {
		b, _ = iwarp.AppendFPDU(b, []byte{p}, nil, false)
	}
	return b
}

// units parses a received stream back into its MPA frame and FPDU bytes.
func units(t *testing.T, b []byte) (mpa bool, fpdus []byte) {
	t.Helper()
	var f iwarp.MPAFrame
	n, err := iwarp.ParseMPA(b, &f)
	if err != nil {
		return false, nil
	}
	b = b[n:]
	for len(b) > 0 {
		u, m, err := iwarp.ParseFPDU(b, false)
		if err != nil {
			t.Fatalf("received a broken FPDU: %v", err)
		}
		fpdus = append(fpdus, u...)
		b = b[m:]
	}
	return true, fpdus
}

// upstream accepts one connection, sends reply once the first byte came
// (as an MPA responder does), and returns what it read until EOF (or
// error).
func upstream(t *testing.T, reply []byte) (netip.AddrPort, <-chan []byte, func()) {
	t.Helper()
	ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan []byte, 1)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		c, err := ln.Accept()
		if err != nil {
			got <- nil
			return
		}
		defer c.Close()
		first := make([]byte, 1)
		if _, err := io.ReadFull(c, first); err != nil {
			got <- nil
			return
		}
		if reply != nil {
			_, _ = c.Write(reply)
		}
		b, _ := io.ReadAll(c)
		got <- append(first, b...)
	}()
	return ln.Addr().(*net.TCPAddr).AddrPort(), got, func() { _ = ln.Close(); wg.Wait() }
}

func dial(a netip.AddrPort) (*net.TCPConn, error) {
	return net.DialTCP("tcp", nil, net.TCPAddrFromAddrPort(a))
}

func TestTCPUnitsAndOps(t *testing.T) {
	for _, tc := range []struct {
		name string
		ops  map[int]Op // c->s unit index -> op; 0 is the MPA Request
		want string
	}{
		{"pass", nil, "abcd"},
		{"drop", map[int]Op{2: Drop}, "acd"},
		{"duplicate", map[int]Op{1: Duplicate}, "aabcd"},
		{"reorder", map[int]Op{2: Reorder}, "acbd"},
		{"reorder last", map[int]Op{4: Reorder}, "abcd"},
		{"delay", map[int]Op{3: Delay}, "abcd"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addr, got, stop := upstream(t, nil)
			defer stop()
			var mu sync.Mutex
			var seen []UnitKind
			p, err := NewTCP(addr, func(u *Unit) Action {
				if u.Dir != ClientToServer {
					return Action{}
				}
				mu.Lock()
				seen = append(seen, u.Kind)
				mu.Unlock()
				return Action{Op: tc.ops[u.Index], Delay: 20 * time.Millisecond}
			})
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			c, err := dial(p.Addr())
			if err != nil {
				t.Fatal(err)
			}
			// Byte by byte: units must not depend on how the stream is cut.
			for _, b := range stream(t, false, 'a', 'b', 'c', 'd') {
				if _, err := c.Write([]byte{b}); err != nil {
					t.Fatal(err)
				}
			}
			_ = c.CloseWrite()
			b := <-got
			_ = c.Close()
			mpa, fpdus := units(t, b)
			if !mpa || string(fpdus) != tc.want {
				t.Fatalf("upstream got mpa %v payloads %q, want %q", mpa, fpdus, tc.want)
			}
			mu.Lock()
			defer mu.Unlock()
			if len(seen) != 5 || seen[0] != UnitMPARequest || seen[1] != UnitFPDU {
				t.Fatalf("units %v", seen)
			}
			if s := p.Stats(); s.Conns != 1 || s.Units[UnitFPDU] < 4 {
				t.Fatalf("stats %s", s)
			}
		})
	}
}

func TestTCPRawStream(t *testing.T) {
	addr, got, stop := upstream(t, nil)
	defer stop()
	var kinds []UnitKind
	var mu sync.Mutex
	p, err := NewTCP(addr, func(u *Unit) Action {
		mu.Lock()
		kinds = append(kinds, u.Kind)
		mu.Unlock()
		return Action{}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c, err := dial(p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	_, _ = c.Write([]byte("GET / HTTP/1.0\r\n\r\n"))
	_ = c.CloseWrite()
	if b := <-got; string(b) != "GET / HTTP/1.0\r\n\r\n" {
		t.Fatalf("got %q", b)
	}
	_ = c.Close()
	mu.Lock()
	defer mu.Unlock()
	if len(kinds) == 0 || kinds[0] != UnitRaw {
		t.Fatalf("kinds %v", kinds)
	}
}

func TestTCPResetCutAndCrash(t *testing.T) {
	for _, op := range []Op{Reset, Cut, CrashServer, CrashClient, Blackhole} {
		t.Run(op.String(), func(t *testing.T) {
			reply := stream(t, true, 'x')
			addr, got, stop := upstream(t, reply)
			defer stop()
			p, err := NewTCP(addr, func(u *Unit) Action {
				if u.Dir == ServerToClient && u.Kind == UnitFPDU {
					return Action{Op: op}
				}
				return Action{}
			})
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close() // also ends what a crash or partition left open
			c, err := dial(p.Addr())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			_, _ = c.Write(stream(t, false))
			_ = c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
			b, err := io.ReadAll(c)
			var want error
			switch op {
			case Reset, CrashServer:
				want = syscall.ECONNRESET
			case Cut:
				want = nil
			case CrashClient, Blackhole:
				want = os.ErrDeadlineExceeded
			}
			if (want == nil && err != nil) || (want != nil && !errors.Is(err, want)) {
				t.Fatalf("client read: %v, want %v", err, want)
			}
			if mpa, fpdus := units(t, b); len(b) > 0 && (!mpa || len(fpdus) != 0) {
				t.Fatalf("the FPDU went through: %q", b)
			}
			_ = p.Close()
			<-got
		})
	}
}

func TestUDPOps(t *testing.T) {
	up, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer up.Close()
	// The upstream echoes every datagram with a '!' appended.
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		buf := make([]byte, 1500)
		for {
			n, from, err := up.ReadFromUDPAddrPort(buf)
			if err != nil {
				return
			}
			_, _ = up.WriteToUDPAddrPort(append(buf[:n:n], '!'), from)
		}
	}()
	defer wg.Wait()
	defer up.Close()
	p, err := NewUDP(up.LocalAddr().(*net.UDPAddr).AddrPort(), func(u *Unit) Action {
		if u.Dir != ClientToServer {
			return Action{}
		}
		switch u.Bytes[0] {
		case 'd':
			return Action{Op: Drop}
		case '2':
			return Action{Op: Duplicate}
		case 'r':
			return Action{Op: Reorder}
		case 'w':
			return Action{Rewrite: []byte("W")}
		case 'l':
			return Action{Op: Delay, Delay: 30 * time.Millisecond}
		}
		return Action{}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(p.Addr()))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, m := range []string{"a", "d", "2", "r", "b", "w", "l", "c"} {
		_, _ = c.Write([]byte(m))
		time.Sleep(2 * time.Millisecond) // keep the order on the wire
	}
	var got bytes.Buffer
	buf := make([]byte, 64)
	_ = c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	for {
		n, err := c.Read(buf)
		if err != nil {
			break
		}
		got.Write(buf[:n])
	}
	if got.String() != "a!2!2!b!r!W!c!l!" {
		t.Fatalf("got %q", got.String())
	}
	if q := SIDRQKey([]byte{1, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 7}, 9); len(q) != 24 || q[23] != 9 {
		t.Fatalf("SIDRQKey %v", q)
	}
	if SIDRQKey([]byte("short"), 1) != nil {
		t.Fatal("SIDRQKey of a non-SIDR datagram")
	}
}
