package id_test

import (
	"net/netip"
	"reflect"
	"testing"

	"github.com/cmrt/cmrt/fabric"
	"github.com/cmrt/cmrt/id"
)

// briefEndpoint is a non-nil fabric.Endpoint whose methods are never
// called.
type briefEndpoint struct{ fabric.Endpoint }

// TestBriefEveryField: id.Brief reports a raw event brief only when every
// field but UID, Type, Status and Arg is zero (the private data counts by
// its length), so that a runtime handing over only those four never loses
// a parameter. It sets each leaf field of fabric.RawEvent in turn, through
// reflection, so that a field added to RawEvent fails here until Brief
// checks it.
func TestBriefEveryField(t *testing.T) {
	base := fabric.RawEvent{UID: 9, Type: id.EventUser, Status: -5, Arg: 77}
	base.PrivateData[3] = 1 // past the length: not a parameter
	if !id.Brief(&base) {
		t.Fatalf("Brief(%+v) = false, want true", base)
	}
	carried := map[string]bool{"UID": true, "Type": true, "Status": true, "Arg": true, "PrivateData": true}
	raw := base
	n := 0
	var walk func(v reflect.Value, path string)
	walk = func(v reflect.Value, path string) {
		for k := 0; k < v.NumField(); k++ {
			f, name := v.Field(k), v.Type().Field(k).Name
			if path == "RawEvent" && carried[name] {
				continue
			}
			p := path + "." + name
			if f.Kind() == reflect.Struct && f.Type() != reflect.TypeFor[netip.Addr]() {
				walk(f, p)
				continue
			}
			old := reflect.New(f.Type()).Elem()
			old.Set(f)
			switch {
			case f.Type() == reflect.TypeFor[netip.Addr]():
				f.Set(reflect.ValueOf(netip.MustParseAddr("239.1.2.3")))
			case f.Type() == reflect.TypeFor[fabric.Endpoint]():
				f.Set(reflect.ValueOf(briefEndpoint{}))
			case f.Kind() == reflect.Array:
				f.Index(f.Len() - 1).SetUint(1)
			case f.CanUint():
				f.SetUint(1)
			case f.CanInt():
				f.SetInt(1)
			default:
				t.Fatalf("%s: kind %s: teach the test", p, f.Kind())
			}
			n++
			if id.Brief(&raw) {
				t.Errorf("Brief with %s set = true, want false", p)
			}
			f.Set(old)
		}
	}
	walk(reflect.ValueOf(&raw).Elem(), "RawEvent")
	if raw != base {
		t.Fatalf("the walk left %+v, want %+v", raw, base)
	}
	if n < 20 {
		t.Fatalf("only %d fields set: the walk missed some", n)
	}
}
