package soft_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cmrt/cmrt/channel"
	"github.com/cmrt/cmrt/id"
	"github.com/cmrt/cmrt/id/journal"
)

const helperEnv = "CMRT_SOFT_TEST_HELPER"

// runHelper is the second process of the multi-process tests.
func runHelper(role string) int {
	switch role {
	case "server":
		// A synchronous server: print the port, accept one connection with
		// private data, wait for the client's disconnect, exit.
		l, err := id.Create(nil, nil, id.PSTCP)
		if err != nil {
			fmt.Println("error", err)
			return 1
		}
		if err := l.Bind(netip.MustParseAddrPort("127.0.0.1:0")); err != nil {
			fmt.Println("error", err)
			return 1
		}
		if err := l.Listen(0); err != nil {
			fmt.Println("error", err)
			return 1
		}
		fmt.Println("port", l.SrcPort())
		child, err := l.GetRequest()
		if err != nil {
			fmt.Println("error", err)
			return 1
		}
		fmt.Printf("request %q\n", child.Event().PrivateData())
		if err := child.Accept(&id.ConnParam{PrivateData: []byte("from the server process")}); err != nil {
			fmt.Println("error", err)
			return 1
		}
		fmt.Println("established")
		if os.Getenv("CMRT_HELPER_HANG") != "" {
			select {} // wait to be killed
		}
		if err := child.Disconnect(); err != nil {
			fmt.Println("error", err)
			return 1
		}
		fmt.Println("disconnected")
		_ = child.Destroy()
		_ = l.Destroy()
		return 0
	case "resolve":
		// In a network namespace without routes: resolve_addr fails with
		// ENETUNREACH and leaves the id bound, as the kernel's
		// rdma_resolve_addr (it binds first, and a route lookup that fails
		// fails the call), for an asynchronous and a synchronous id.
		ch, err := channel.New()
		if err != nil {
			fmt.Println("error", err)
			return 1
		}
		async, _ := id.Create(ch, nil, id.PSTCP)
		sync, _ := id.Create(nil, nil, id.PSUDP)
		for _, cm := range []*id.ID{async, sync} {
			err := cm.ResolveAddr(netip.AddrPort{}, netip.MustParseAddrPort("198.51.100.7:7471"), time.Second)
			var errno syscall.Errno
			errors.As(err, &errno)
			fmt.Printf("result %d %s %v\n", errno, cm.State(), cm.LocalAddr().Addr())
			if cm.LocalAddr().Port() == 0 {
				fmt.Println("unbound")
			}
			// Nothing follows on the channel: the call failed.
			ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
			if ev, err := ch.GetEventContext(ctx); err == nil {
				fmt.Println("event", ev.Type, ev.Status)
			}
			cancel()
			// A bound id cannot bind again; it can resolve again.
			if err := cm.Bind(netip.MustParseAddrPort("127.0.0.1:0")); !errors.Is(err, syscall.EINVAL) {
				fmt.Println("bind after the failed resolve:", err)
			}
		}
		// The journal shows the implicit bind, and folds to the same states.
		if err := journal.Check(journal.Default().Records()); err != nil {
			fmt.Println("journal:", err)
		}
		for _, cm := range []*id.ID{async, sync} {
			recs := journal.Default().RecordsOf(cm.Handle())
			if len(recs) < 3 || recs[1].Call != journal.CallBind || recs[1].Status != 0 || recs[2].Call != journal.CallResolveAddr || recs[2].Status != int32(syscall.ENETUNREACH) {
				fmt.Println("journal of the id:", recs)
			}
		}
		return 0
	}
	return 2
}

func startHelper(t *testing.T, role string, env ...string) (*exec.Cmd, *bufio.Scanner) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=NONE")
	cmd.Env = append(append(os.Environ(), helperEnv+"="+role), env...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return cmd, bufio.NewScanner(out)
}

func line(t *testing.T, sc *bufio.Scanner, prefix string) string {
	t.Helper()
	c := make(chan string, 1)
	go func() {
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), prefix) {
				c <- sc.Text()
				return
			}
		}
		c <- "EOF"
	}()
	select {
	case l := <-c:
		if !strings.HasPrefix(l, prefix) {
			t.Fatalf("helper ended without %q", prefix)
		}
		return l
	case <-time.After(10 * time.Second):
		t.Fatalf("helper printed no %q", prefix)
	}
	return ""
}

// TestTwoProcesses connects to a server in another process.
func TestTwoProcesses(t *testing.T) {
	cmd, sc := startHelper(t, "server")
	var port uint16
	fmt.Sscanf(line(t, sc, "port "), "port %d", &port)
	ch := newChannel(t, nil)
	cli := mkID(t, ch, nil, id.PSTCP)
	defer cli.Destroy()
	resolve(t, ch, cli, netip.AddrPortFrom(lo4, port))
	_ = cli.Connect(&id.ConnParam{PrivateData: []byte("from the client process")})
	ev := next(t, ch, id.EventEstablished)
	if string(ev.PrivateData()) != "from the server process" {
		t.Fatalf("reply pd %q", ev.PrivateData())
	}
	_ = ev.Ack()
	if l := line(t, sc, "request "); l != `request "from the client process"` {
		t.Fatalf("server saw %s", l)
	}
	_ = cli.Disconnect()
	_ = next(t, ch, id.EventDisconnected).Ack()
	line(t, sc, "disconnected")
	if err := cmd.Wait(); err != nil {
		t.Fatalf("server process: %v", err)
	}
}

// TestPeerProcessKilled: the peer process dies; the id gets DISCONNECTED.
func TestPeerProcessKilled(t *testing.T) {
	cmd, sc := startHelper(t, "server", "CMRT_HELPER_HANG=1")
	var port uint16
	fmt.Sscanf(line(t, sc, "port "), "port %d", &port)
	ch := newChannel(t, nil)
	cli := mkID(t, ch, nil, id.PSTCP)
	defer cli.Destroy()
	resolve(t, ch, cli, netip.AddrPortFrom(lo4, port))
	_ = cli.Connect(nil)
	_ = next(t, ch, id.EventEstablished).Ack()
	line(t, sc, "established")
	start := time.Now()
	_ = cmd.Process.Signal(syscall.SIGKILL)
	_ = cmd.Wait()
	ev := next(t, ch, id.EventDisconnected)
	if ev.ID != cli || time.Since(start) > 2*time.Second {
		t.Fatalf("DISCONNECTED after %v", time.Since(start))
	}
	_ = ev.Ack()
}
