package diffkernel

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cmrt/cmrt/fabric"
	"github.com/cmrt/cmrt/fabric/soft"
)

// netnsEnv marks the child process a test runs in, in a network namespace
// of its own set up as the test VM: dummy0 10.0.0.1/24 (rxe0's netdev in
// the VM) and dummy1 10.0.1.1/24 (siw0's), links without ARP that drop
// what they send, and no default route. Machines without the dummy driver
// get veth pairs named so, with ARP off and the other ends idle: what is
// sent to another host of the subnet is dropped there.
const netnsEnv = "CMRT_DIFFKERNEL_NETNS"

// inVMNetns runs test name in a child process in a new network namespace
// laid out as the VM's, and adopts its verdict; in the child it sets the
// namespace up and returns true.
func inVMNetns(t *testing.T, name string) bool {
	t.Helper()
	if os.Getenv(netnsEnv) != "" {
		links := [][]string{
			{"link", "add", "dummy0", "type", "dummy"},
			{"link", "add", "dummy1", "type", "dummy"},
		}
		if exec.Command("ip", links[0]...).Run() != nil {
			links = [][]string{
				{"link", "add", "dummy0", "type", "veth", "peer", "name", "dummy0p"},
				{"link", "add", "dummy1", "type", "veth", "peer", "name", "dummy1p"},
				{"link", "set", "dummy0p", "up"},
				{"link", "set", "dummy1p", "up"},
			}
		} else {
			links = links[1:]
		}
		for _, args := range append(links, [][]string{
			{"link", "set", "lo", "up"},
			{"link", "set", "dummy0", "arp", "off"},
			{"link", "set", "dummy1", "arp", "off"},
			{"addr", "add", "10.0.0.1/24", "dev", "dummy0"},
			{"addr", "add", "10.0.1.1/24", "dev", "dummy1"},
			{"link", "set", "dummy0", "up"},
			{"link", "set", "dummy1", "up"},
		}...) {
			if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
				t.Fatalf("ip %s: %v\n%s", strings.Join(args, " "), err, out)
			}
		}
		return true
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("needs ip(8)")
	}
	if os.Getuid() != 0 {
		t.Skip("needs root: dummy links in a network namespace")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	args := []string{"-test.run=^" + name + "$", "-test.count=1"}
	if testing.Verbose() {
		args = append(args, "-test.v")
	}
	cmd := exec.CommandContext(ctx, os.Args[0], args...)
	cmd.Env = append(os.Environ(), netnsEnv+"=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNET}
	out, err := cmd.CombinedOutput()
	if cmd.ProcessState == nil {
		t.Skipf("cannot make a network namespace: %v", err)
	}
	if err != nil {
		t.Fatalf("in a network namespace: %v\n%s", err, out)
	}
	if strings.Contains(string(out), "--- SKIP") {
		t.Skipf("skipped in the namespace:\n%s", out)
	}
	if testing.Verbose() {
		t.Logf("in a network namespace:\n%s", out)
	}
	return false
}

// softFabric is a software fabric on d's netdev, as the VM driver makes
// it.
func softFabric(d Device, name string) fabric.Fabric {
	return soft.New(soft.WithName(name), soft.WithNetdevs(d.Netdev), soft.WithIdleGrace(0),
		soft.WithConnectTimeout(time.Minute), soft.WithSIDRRetry(4*time.Second, 15))
}
