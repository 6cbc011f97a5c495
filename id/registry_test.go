package id

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// withFabrics replaces the registry with fs for the test.
func withFabrics(t *testing.T, fs ...Fabric) {
	t.Helper()
	fabrics.Lock()
	saved := fabrics.m
	fabrics.m = make(map[string]Fabric)
	for _, f := range fs {
		fabrics.m[f.Name()] = f
	}
	fabrics.Unlock()
	t.Cleanup(func() {
		fabrics.Lock()
		fabrics.m = saved
		fabrics.Unlock()
	})
}

// namedFabric is a Fabric whose only working method is Name.
type namedFabric struct {
	Fabric
	name string
}

func (f *namedFabric) Name() string { return f.name }

// The error of a fabric that is not registered names the package to import
// (a real one) and the registered fabrics with their packages.
func TestDefaultFabricNotRegistered(t *testing.T) {
	const other = `"other" (github.com/cmrt/cmrt/id)`
	for _, c := range []struct {
		env  string
		reg  []Fabric
		want string
	}{
		{"", nil, `fabric "soft" (the default) is not registered: import _ "github.com/cmrt/cmrt/fabric/soft" (registered: none)`},
		{"kernel", []Fabric{&namedFabric{name: "other"}},
			`fabric CMRT_FABRIC="kernel" is not registered: import _ "github.com/cmrt/cmrt/fabric/kernel" (registered: ` + other + `)`},
		{"bogus", []Fabric{&namedFabric{name: "other"}},
			`no fabric CMRT_FABRIC="bogus" (registered: ` + other + `; not imported: "soft" (import _ "github.com/cmrt/cmrt/fabric/soft"), "kernel" (import _ "github.com/cmrt/cmrt/fabric/kernel"))`},
		{"bogus", []Fabric{&namedFabric{name: "soft"}, &namedFabric{name: "kernel"}},
			`no fabric CMRT_FABRIC="bogus" (registered: "kernel" (github.com/cmrt/cmrt/id), "soft" (github.com/cmrt/cmrt/id))`},
	} {
		t.Setenv(FabricEnv, c.env)
		withFabrics(t, c.reg...)
		f, err := DefaultFabric()
		var e *Error
		if f != nil || !errors.Is(err, syscall.ENODEV) || !errors.As(err, &e) || e.Msg != c.want {
			t.Errorf("%s=%q: %v %v\nwant message %s", FabricEnv, c.env, f, err, c.want)
		}
	}
}

// The packages the errors name exist and register the fabric of that name.
func TestBuiltinFabricPackages(t *testing.T) {
	for _, b := range builtinFabrics {
		dir := filepath.Join("..", strings.TrimPrefix(b.pkg, "github.com/cmrt/cmrt/"))
		files, _ := filepath.Glob(filepath.Join(dir, "*.go"))
		found := false
		for _, f := range files {
			src, err := os.ReadFile(f)
			if err == nil && strings.Contains(string(src), "id.Register(") && !strings.HasSuffix(f, "_test.go") {
				found = true
			}
		}
		if !found {
			t.Errorf("%s: no package in %s calls id.Register", b.pkg, dir)
		}
		if f, ok := Lookup(b.name); ok && fabricPkg(f) != b.pkg {
			t.Errorf("fabric %q is registered by %s, not %s", b.name, fabricPkg(f), b.pkg)
		}
	}
}
