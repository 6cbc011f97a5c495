package main

import (
	"strconv"
	"strings"
	"testing"

	"github.com/cmrt/cmrt/examples/internal/tool"
	"github.com/cmrt/cmrt/examples/internal/tooltest"
)

func TestMain(m *testing.M) { tooltest.Main(m) }

const serverPkg = "github.com/cmrt/cmrt/examples/rdma_server"

type result struct {
	rc             int
	stdout, stderr string
}

func runClient(args ...string) result {
	var out, errs tooltest.Buffer
	rc := run(append([]string{"rdma_client"}, args...), &out, &errs)
	return result{rc, out.String(), errs.String()}
}

const ok = "rdma_client: start\nrdma_client: end 0\n"

// server starts cmrt's rdma_server on a free port and returns the port.
func server(t *testing.T, args ...string) (*tooltest.Proc, int) {
	t.Helper()
	port := tooltest.FreePorts(t, 1)
	p := tooltest.Start(t, tooltest.Build(t, serverPkg), append([]string{"-p", strconv.Itoa(port)}, args...)...)
	tooltest.WaitListening(t, port)
	return p, port
}

func TestClientServer(t *testing.T) {
	for _, c := range []struct{ name, bind, dst string }{
		{"defaults", "", ""},
		{"loopback", "127.0.0.1", "127.0.0.1"},
		{"name", "", "localhost"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.dst == "localhost" {
				if a, err := tool.LookupHost("localhost"); err != nil || a.String() != "127.0.0.1" {
					t.Skipf("localhost is %v (%v), not 127.0.0.1", a, err)
				}
			}
			var sargs []string
			if c.bind != "" {
				sargs = []string{"-s", c.bind}
			}
			srv, port := server(t, sargs...)
			args := []string{"-p", strconv.Itoa(port)}
			if c.dst != "" {
				args = append(args, "-s", c.dst)
			}
			r := runClient(args...)
			if r.rc != 0 || r.stdout != ok || r.stderr != "" {
				t.Errorf("client: exit %d, stdout %q, stderr %q", r.rc, r.stdout, r.stderr)
			}
			if rc := srv.Wait(); rc != 0 || srv.Stdout.String() != "rdma_server: start\nrdma_server: end 0\n" {
				t.Errorf("server: exit %d\n%s%s", rc, srv.Stdout, srv.Stderr)
			}
		})
	}
}

func TestNoServer(t *testing.T) {
	r := runClient("-p", strconv.Itoa(tooltest.FreePorts(t, 1)))
	if r.rc != 255 || r.stdout != "rdma_client: start\nrdma_client: end -1\n" ||
		!strings.HasPrefix(r.stderr, "rdma_connect: Connection refused (") {
		t.Fatalf("exit %d, stdout %q, stderr %q", r.rc, r.stdout, r.stderr)
	}
}

// A server in another process holds the port: a second one fails.
func TestPortInUse(t *testing.T) {
	srv, port := server(t)
	p := tooltest.Start(t, tooltest.Build(t, serverPkg), "-p", strconv.Itoa(port))
	if rc := p.Wait(); rc != 255 || !strings.HasPrefix(p.Stderr.String(), "rdma_create_ep: Address already in use (") {
		t.Errorf("second server: exit %d\n%s%s", rc, p.Stdout, p.Stderr)
	}
	if r := runClient("-p", strconv.Itoa(port)); r.rc != 0 || r.stdout != ok {
		t.Errorf("client: exit %d, stdout %q, stderr %q", r.rc, r.stdout, r.stderr)
	}
	if rc := srv.Wait(); rc != 0 {
		t.Errorf("server: exit %d\n%s%s", rc, srv.Stdout, srv.Stderr)
	}
}

func TestErrors(t *testing.T) {
	usage := "usage: rdma_client\n\t[-s server_address]\n\t[-p port_number]\n"
	for _, c := range []struct {
		args           []string
		rc             int
		stdout, stderr string // stdout exactly, stderr's prefix
	}{
		{[]string{"-x"}, 1, usage, "rdma_client: invalid option -- 'x'\n"},
		{[]string{"-s"}, 1, usage, "rdma_client: option requires an argument -- 's'\n"},
		{[]string{"-s", "no-such-host.invalid"}, 254,
			"rdma_client: start\nrdma_getaddrinfo: Name or service not known\nrdma_client: end -2\n", ""},
		{[]string{"-p", "no-such-service"}, 248,
			"rdma_client: start\nrdma_getaddrinfo: Servname not supported for ai_socktype\nrdma_client: end -8\n", ""},
	} {
		r := runClient(c.args...)
		if r.rc != c.rc || r.stdout != c.stdout || !strings.HasPrefix(r.stderr, c.stderr) || (c.stderr == "" && r.stderr != "") {
			t.Errorf("%q: exit %d (want %d)\nstdout %q\nstderr %q\nwant stdout %q, stderr %q...", c.args, r.rc, c.rc, r.stdout, r.stderr, c.stdout, c.stderr)
		}
	}
}

func TestKernelFabricWithoutDevice(t *testing.T) {
	t.Setenv("CMRT_FABRIC", "kernel")
	r := runClient("-p", strconv.Itoa(tooltest.FreePorts(t, 1)))
	if r.rc != 255 || !strings.HasPrefix(r.stderr, "rdma_create_ep: No such device (") {
		t.Skipf("a kernel RDMA CM is present, or another failure: exit %d, stderr %q", r.rc, r.stderr)
	}
}
