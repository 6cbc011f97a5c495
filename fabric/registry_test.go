package fabric

import (
	"errors"
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

// Default picks the fabric $CMRT_FABRIC names, "soft" when unset; with no
// such fabric its error wraps ENODEV and names the registered fabrics with
// their packages.
func TestDefault(t *testing.T) {
	soft, other := &namedFabric{name: "soft"}, &namedFabric{name: "other"}
	const otherPkg = `"other" (github.com/cmrt/cmrt/fabric)`
	for _, c := range []struct {
		env  string
		reg  []Fabric
		want Fabric
		msg  string
	}{
		{"", []Fabric{soft, other}, soft, ""},
		{"other", []Fabric{soft, other}, other, ""},
		{"", nil, nil, `no fabric "soft" (the default) (registered: none): no such device`},
		{"kernel", []Fabric{other}, nil, `no fabric CMRT_FABRIC="kernel" (registered: ` + otherPkg + `): no such device`},
		{"bogus", []Fabric{other, soft}, nil,
			`no fabric CMRT_FABRIC="bogus" (registered: ` + otherPkg + `, "soft" (github.com/cmrt/cmrt/fabric)): no such device`},
	} {
		t.Setenv(Env, c.env)
		withFabrics(t, c.reg...)
		f, err := Default()
		if c.want != nil {
			if f != c.want || err != nil {
				t.Errorf("%s=%q: %v %v, want %s", Env, c.env, f, err, c.want.Name())
			}
			continue
		}
		if f != nil || !errors.Is(err, syscall.ENODEV) || err.Error() != c.msg {
			t.Errorf("%s=%q: %v %v\nwant message %s", Env, c.env, f, err, c.msg)
		}
	}
}

// Names lists the registered fabrics, sorted; Register replaces a fabric
// of the same name.
func TestRegisterLookupNames(t *testing.T) {
	withFabrics(t)
	a, b, b2 := &namedFabric{name: "b"}, &namedFabric{name: "a"}, &namedFabric{name: "a"}
	Register(a)
	Register(b)
	Register(b2)
	if got := Names(); len(got) != 2 || got[0] != "a" || got[1] != "b" {
		t.Errorf("Names() = %q, want [a b]", got)
	}
	if f, ok := Lookup("a"); !ok || f != b2 {
		t.Errorf("Lookup(a) = %v %v, want the second registration", f, ok)
	}
	if _, ok := Lookup("c"); ok {
		t.Error("Lookup(c) found a fabric")
	}
}
