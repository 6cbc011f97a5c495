package soft_test

import (
	"bufio"
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
		// In a network namespace without routes: ADDR_ERROR.
		ch, err := channel.New()
		if err != nil {
			fmt.Println("error", err)
			return 1
		}
		cm, _ := id.Create(ch, nil, id.PSTCP)
		if err := cm.ResolveAddr(netip.AddrPort{}, netip.MustParseAddrPort("198.51.100.7:7471"), time.Second); err != nil {
			fmt.Println("error", err)
			return 1
		}
		ev, err := ch.GetEvent()
		if err != nil {
			fmt.Println("error", err)
			return 1
		}
		fmt.Println(ev.Type, ev.Status)
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
	ch := mkChan(t, nil)
	cli := mkID(t, ch, nil, id.PSTCP)
	defer cli.Destroy()
	routeTo(t, ch, cli, netip.AddrPortFrom(loopback, port))
	_ = cli.Connect(&id.ConnParam{PrivateData: []byte("from the client process")})
	ev := await(t, ch, id.EventEstablished)
	if string(ev.PrivateData()) != "from the server process" {
		t.Fatalf("reply pd %q", ev.PrivateData())
	}
	_ = ev.Ack()
	if l := line(t, sc, "request "); l != `request "from the client process"` {
		t.Fatalf("server saw %s", l)
	}
	_ = cli.Disconnect()
	_ = await(t, ch, id.EventDisconnected).Ack()
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
	ch := mkChan(t, nil)
	cli := mkID(t, ch, nil, id.PSTCP)
	defer cli.Destroy()
	routeTo(t, ch, cli, netip.AddrPortFrom(loopback, port))
	_ = cli.Connect(nil)
	_ = await(t, ch, id.EventEstablished).Ack()
	line(t, sc, "established")
	start := time.Now()
	_ = cmd.Process.Signal(syscall.SIGKILL)
	_ = cmd.Wait()
	ev := await(t, ch, id.EventDisconnected)
	if ev.ID != cli || time.Since(start) > 2*time.Second {
		t.Fatalf("DISCONNECTED after %v", time.Since(start))
	}
	_ = ev.Ack()
}

// TestNoRouteIsAddrError resolves in a network namespace with no routes.
func TestNoRouteIsAddrError(t *testing.T) {
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		t.Skip("no unshare(1): cannot make a namespace without routes")
	}
	args := []string{"-n"}
	if os.Geteuid() != 0 {
		args = []string{"-r", "-n"}
	}
	cmd := exec.Command(unshare, append(args, "sh", "-c", "ip link set lo up 2>/dev/null; exec \"$0\" -test.run=NONE", os.Args[0])...)
	cmd.Env = append(os.Environ(), helperEnv+"=resolve")
	out, err := cmd.CombinedOutput()
	if err != nil && strings.Contains(string(out), "Operation not permitted") {
		t.Skipf("cannot create a network namespace here: %s", out)
	}
	if err != nil {
		t.Fatalf("helper: %v: %s", err, out)
	}
	want := fmt.Sprintf("%s %d", id.EventAddrError, -int(syscall.ENETUNREACH))
	if strings.TrimSpace(string(out)) != want {
		t.Fatalf("got %q, want %q", out, want)
	}
}

var _ = channel.New
