package promcollector_test

import (
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// promModules are the modules client_golang brings in and nothing else of
// cmrt's uses.
var promModules = []string{"github.com/prometheus/", "github.com/beorn7/perks", "github.com/munnerz/goautoneg"}

// promUsers are the packages that may link client_golang: this one, and
// the example that serves its metrics.
var promUsers = []string{"github.com/cmrt/cmrt/reactor/promcollector", "github.com/cmrt/cmrt/examples/metrics"}

// TestNoPrometheusInCore checks that only this package and the metrics
// example link client_golang: no other package a program using cmrt
// imports (id, reactor, the fabrics, the other examples, the commands,
// bench) depends on it.
func TestNoPrometheusInCore(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list")
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		goTool = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	list := func(args ...string) []string {
		cmd := exec.Command(goTool, args...)
		cmd.Dir = filepath.Join("..", "..")
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("go %v: %v", args, err)
		}
		return strings.Fields(string(out))
	}
	var core []string
	for _, p := range list("list", "./...") {
		user := false
		for _, u := range promUsers {
			user = user || p == u
		}
		if !user {
			core = append(core, p)
		}
	}
	if len(core) < 10 {
		t.Fatalf("only %d packages besides the collector: %v", len(core), core)
	}
	for _, dep := range list(append([]string{"list", "-deps"}, core...)...) {
		for _, m := range promModules {
			if strings.HasPrefix(dep, m) {
				t.Errorf("a package other than %v links %s", promUsers, dep)
			}
		}
	}
	// The check sees client_golang where it is.
	found := false
	for _, dep := range list("list", "-deps", "./reactor/promcollector") {
		found = found || strings.HasPrefix(dep, "github.com/prometheus/client_golang/prometheus")
	}
	if !found {
		t.Error("go list -deps does not show the collector linking client_golang")
	}
}
