package id

import (
	"fmt"
	"os"
	"reflect"
	"sort"
	"strings"
	"sync"
	"syscall"
)

// entry is what a uid stands for: an id, or a multicast join of one.
type entry struct {
	id *ID
	mc *multicast
}

// handles maps the uids fabrics report events with to ids and joins, as
// librdmacm's indexer. uid 0 is never used: the kernel drops events of
// uid 0.
var handles = struct {
	sync.Mutex
	next uint64
	m    map[uint64]entry
}{m: make(map[uint64]entry)}

func addHandle(e entry) uint64 {
	handles.Lock()
	handles.next++
	uid := handles.next
	handles.m[uid] = e
	handles.Unlock()
	return uid
}

func removeHandle(uid uint64) {
	handles.Lock()
	delete(handles.m, uid)
	handles.Unlock()
}

// Live returns how many ids and multicast joins exist in this process. Tests
// use it to prove nothing leaks.
func Live() int {
	handles.Lock()
	defer handles.Unlock()
	return len(handles.m)
}

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

// Fabrics returns the names of the registered fabrics, sorted.
func Fabrics() []string {
	fabrics.RLock()
	defer fabrics.RUnlock()
	names := make([]string, 0, len(fabrics.m))
	for n := range fabrics.m {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// FabricEnv is the environment variable that names the default fabric.
const FabricEnv = "CMRT_FABRIC"

// builtinFabrics are cmrt's own fabrics, by name, with the package whose
// import registers each.
var builtinFabrics = [...]struct{ name, pkg string }{
	{"soft", "github.com/cmrt/cmrt/fabric/soft"},
	{"kernel", "github.com/cmrt/cmrt/fabric/kernel"},
}

// DefaultFabric returns the fabric named by $CMRT_FABRIC, or "soft" when it
// is unset. A fabric is registered by importing its package, e.g.
//
//	import _ "github.com/cmrt/cmrt/fabric/soft"
//
// When that fabric is not registered the error wraps ENODEV and says which
// fabrics are registered (with their packages) and which package to import.
func DefaultFabric() (Fabric, error) {
	name := os.Getenv(FabricEnv)
	what := fmt.Sprintf("%s=%q", FabricEnv, name)
	if name == "" {
		name, what = "soft", `"soft" (the default)`
	}
	if f, ok := Lookup(name); ok {
		return f, nil
	}
	return nil, notRegistered(name, what)
}

// notRegistered is DefaultFabric's error for a fabric name (described by
// what) with no registered fabric.
func notRegistered(name, what string) error {
	fabrics.RLock()
	var reg []string
	for n, f := range fabrics.m {
		reg = append(reg, fmt.Sprintf("%q (%s)", n, fabricPkg(f)))
	}
	fabrics.RUnlock()
	sort.Strings(reg)
	registered := "none"
	if len(reg) > 0 {
		registered = strings.Join(reg, ", ")
	}
	var others []string
	for _, b := range builtinFabrics {
		if b.name == name {
			return errorf("create_id", syscall.ENODEV,
				"fabric %s is not registered: import _ %q (registered: %s)", what, b.pkg, registered)
		}
		if _, ok := Lookup(b.name); !ok {
			others = append(others, fmt.Sprintf("%q (import _ %q)", b.name, b.pkg))
		}
	}
	msg := fmt.Sprintf("no fabric %s (registered: %s", what, registered)
	if len(others) > 0 {
		msg += "; not imported: " + strings.Join(others, ", ")
	}
	return errorf("create_id", syscall.ENODEV, "%s)", msg)
}

// fabricPkg returns the import path of the package that defines f's type.
func fabricPkg(f Fabric) string {
	t := reflect.TypeOf(f)
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if p := t.PkgPath(); p != "" {
		return p
	}
	return "unknown package"
}
