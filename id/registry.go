package id

import (
	"os"
	"sort"
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

// DefaultFabric returns the fabric named by $CMRT_FABRIC, or "soft" when it
// is unset. The error wraps ENODEV when that fabric is not registered (its
// package is not imported).
func DefaultFabric() (Fabric, error) {
	name := os.Getenv(FabricEnv)
	if name == "" {
		name = "soft"
	}
	if f, ok := Lookup(name); ok {
		return f, nil
	}
	return nil, errorf("create_id", syscall.ENODEV,
		"fabric %q is not registered (registered: %v); import github.com/cmrt/cmrt/fabric/%s", name, Fabrics(), name)
}
