package main

import (
	"strconv"
	"strings"
	"testing"

	"github.com/cmrt/cmrt/examples/internal/tooltest"
)

func TestMain(m *testing.M) { tooltest.Main(m) }

const clientPkg = "github.com/cmrt/cmrt/examples/rdma_client"

type result struct {
	rc             int
	stdout, stderr string
}

// start runs the server in the background.
func start(args ...string) <-chan result {
	done := make(chan result, 1)
	go func() {
		var out, errs tooltest.Buffer
		rc := run(append([]string{"rdma_server"}, args...), &out, &errs)
		done <- result{rc, out.String(), errs.String()}
	}()
	return done
}

func runServer(args ...string) result {
	return <-start(args...)
}

// client runs rdma-core's counterpart, cmrt's rdma_client, against port.
func client(t *testing.T, port int) {
	t.Helper()
	p := tooltest.Start(t, tooltest.Build(t, clientPkg), "-s", "127.0.0.1", "-p", strconv.Itoa(port))
	if rc := p.Wait(); rc != 0 {
		t.Errorf("client: exit %d\n%s%s", rc, p.Stdout, p.Stderr)
	}
	if got, want := p.Stdout.String(), "rdma_client: start\nrdma_client: end 0\n"; got != want {
		t.Errorf("client output %q, want %q", got, want)
	}
}

const ok = "rdma_server: start\nrdma_server: end 0\n"

func TestServerClient(t *testing.T) {
	for _, addr := range []string{"", "127.0.0.1", "0.0.0.0"} {
		t.Run("addr="+addr, func(t *testing.T) {
			port := tooltest.FreePorts(t, 1)
			args := []string{"-p", strconv.Itoa(port)}
			if addr != "" {
				args = append(args, "-s", addr)
			}
			done := start(args...)
			tooltest.WaitListening(t, port)
			client(t, port)
			r := <-done
			if r.rc != 0 || r.stdout != ok || r.stderr != "" {
				t.Fatalf("server: exit %d, stdout %q, stderr %q", r.rc, r.stdout, r.stderr)
			}
		})
	}
}

// A second server on a port in use fails in bind. As in the kernel's
// rdma_cm (cma_check_port), the same address gives EADDRINUSE and a
// wildcard address on either side EADDRNOTAVAIL; in another process the
// software fabric's TCP bind gives EADDRINUSE in both cases.
func TestPortInUse(t *testing.T) {
	for _, c := range []struct{ first, second, errno string }{
		{"127.0.0.1", "127.0.0.1", "Address already in use"},
		{"0.0.0.0", "0.0.0.0", "Cannot assign requested address"},
	} {
		t.Run(c.first+"-"+c.second, func(t *testing.T) {
			port := tooltest.FreePorts(t, 1)
			p := strconv.Itoa(port)
			done := start("-s", c.first, "-p", p)
			tooltest.WaitListening(t, port)

			r := runServer("-s", c.second, "-p", p)
			if r.rc != 255 || r.stdout != "rdma_server: start\nrdma_server: end -1\n" ||
				!strings.HasPrefix(r.stderr, "rdma_create_ep: "+c.errno+" (") {
				t.Errorf("second server: exit %d, stdout %q, stderr %q", r.rc, r.stdout, r.stderr)
			}

			client(t, port) // the first server still works
			if r := <-done; r.rc != 0 || r.stdout != ok {
				t.Fatalf("first server: exit %d, stdout %q, stderr %q", r.rc, r.stdout, r.stderr)
			}
		})
	}
}

func TestErrors(t *testing.T) {
	for _, c := range []struct {
		args           []string
		rc             int
		stdout, stderr string // stdout exactly, stderr's prefix
	}{
		{[]string{"-x"}, 1, "usage: rdma_server\n\t[-s server_address]\n\t[-p port_number]\n",
			"rdma_server: invalid option -- 'x'\n"},
		{[]string{"-p"}, 1, "usage: rdma_server\n\t[-s server_address]\n\t[-p port_number]\n",
			"rdma_server: option requires an argument -- 'p'\n"},
		{[]string{"-s", "192.0.2.1", "-p", "7471"}, 255, "rdma_server: start\nrdma_server: end -1\n",
			"rdma_create_ep: Cannot assign requested address ("},
		{[]string{"-s", "no-such-host.invalid"}, 254,
			"rdma_server: start\nrdma_getaddrinfo: Name or service not known\nrdma_server: end -2\n", ""},
		{[]string{"-p", "no-such-service"}, 248,
			"rdma_server: start\nrdma_getaddrinfo: Servname not supported for ai_socktype\nrdma_server: end -8\n", ""},
	} {
		r := runServer(c.args...)
		if r.rc != c.rc || r.stdout != c.stdout || !strings.HasPrefix(r.stderr, c.stderr) || (c.stderr == "" && r.stderr != "") {
			t.Errorf("%q: exit %d (want %d)\nstdout %q\nstderr %q\nwant stdout %q, stderr %q...", c.args, r.rc, c.rc, r.stdout, r.stderr, c.stdout, c.stderr)
		}
	}
}

func TestKernelFabricWithoutDevice(t *testing.T) {
	t.Setenv("CMRT_FABRIC", "kernel")
	r := runServer("-p", strconv.Itoa(tooltest.FreePorts(t, 1)))
	if r.rc != 255 || !strings.HasPrefix(r.stderr, "rdma_create_ep: No such device (") {
		t.Skipf("a kernel RDMA CM is present, or another failure: exit %d, stderr %q", r.rc, r.stderr)
	}
}

// The usage shows argv[0] as the program was invoked, as C does.
func TestArgv0(t *testing.T) {
	bin := tooltest.Build(t, "github.com/cmrt/cmrt/examples/rdma_server")
	p := tooltest.StartAs(t, bin, "./rdma_server", "-h")
	if rc := p.Wait(); rc != 1 || p.Stdout.String() != "usage: ./rdma_server\n\t[-s server_address]\n\t[-p port_number]\n" ||
		p.Stderr.String() != "./rdma_server: invalid option -- 'h'\n" {
		t.Errorf("exit %d\nstdout %q\nstderr %q", rc, p.Stdout, p.Stderr)
	}
}
