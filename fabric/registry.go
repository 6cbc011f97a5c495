package fabric

import (
	"fmt"
	"os"
	"reflect"
	"sort"
	"strings"
	"sync"
	"syscall"
)

var fabrics = struct {
	sync.RWMutex
	m map[string]Fabric
}{m: make(map[string]Fabric)}

// Register makes a fabric available by name. Fabric packages call it from
// their init functions; registering a name twice replaces the fabric.
func Register(f Fabric) {
	fabrics.Lock()
	fabrics.m[f.Name()] = f
	fabrics.Unlock()
}

// Lookup returns the registered fabric with this name.
func Lookup(name string) (Fabric, bool) {
	fabrics.RLock()
	defer fabrics.RUnlock()
	f, ok := fabrics.m[name]
	return f, ok
}

// Names returns the names of the registered fabrics, sorted.
func Names() []string {
	fabrics.RLock()
	defer fabrics.RUnlock()
	names := make([]string, 0, len(fabrics.m))
	for n := range fabrics.m {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Env is the environment variable that names the default fabric.
const Env = "CMRT_FABRIC"

// Default returns the registered fabric named by $CMRT_FABRIC, or "soft"
// when it is unset. With no fabric of that name the error wraps ENODEV and
// names the registered fabrics with their packages.
func Default() (Fabric, error) {
	name := os.Getenv(Env)
	what := fmt.Sprintf("%s=%q", Env, name)
	if name == "" {
		name, what = "soft", `"soft" (the default)`
	}
	if f, ok := Lookup(name); ok {
		return f, nil
	}
	fabrics.RLock()
	var reg []string
	for n, f := range fabrics.m {
		reg = append(reg, fmt.Sprintf("%q (%s)", n, pkgOf(f)))
	}
	fabrics.RUnlock()
	sort.Strings(reg)
	registered := "none"
	if len(reg) > 0 {
		registered = strings.Join(reg, ", ")
	}
	return nil, fmt.Errorf("no fabric %s (registered: %s): %w", what, registered, syscall.ENODEV)
}

// pkgOf returns the import path of the package that defines f's type.
func pkgOf(f Fabric) string {
	t := reflect.TypeOf(f)
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if p := t.PkgPath(); p != "" {
		return p
	}
	return "unknown package"
}
