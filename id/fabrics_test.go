package id_test

import (
	"errors"
	"reflect"
	"syscall"
	"testing"

	"github.com/cmrt/cmrt/channel"
	"github.com/cmrt/cmrt/fabric"
	"github.com/cmrt/cmrt/id"
)

// Importing id registers the fabrics that ship with cmrt: this test
// package imports no fabric, yet a synchronous id and a channel find the
// default one, and $CMRT_FABRIC can name either.
func TestImportingIDRegistersTheFabrics(t *testing.T) {
	for name, pkg := range map[string]string{
		"soft":   "github.com/cmrt/cmrt/fabric/soft",
		"kernel": "github.com/cmrt/cmrt/fabric/kernel",
	} {
		f, ok := fabric.Lookup(name)
		if !ok {
			t.Fatalf("fabric %q not registered by importing id", name)
		}
		if got := reflect.TypeOf(f).Elem().PkgPath(); got != pkg {
			t.Errorf("fabric %q comes from %s, want %s", name, got, pkg)
		}
	}
	t.Setenv(fabric.Env, "")
	cm, err := id.Create(nil, nil, id.PSTCP)
	if err != nil {
		t.Fatalf("Create(nil) with no fabric imported: %v", err)
	}
	if cm.Fabric().Name() != "soft" {
		t.Errorf("default fabric %q, want soft", cm.Fabric().Name())
	}
	if err := cm.Destroy(); err != nil {
		t.Fatal(err)
	}
	ch, err := channel.New()
	if err != nil {
		t.Fatalf("channel.New() with no fabric imported: %v", err)
	}
	if ch.Fabric().Name() != "soft" {
		t.Errorf("channel on %q, want soft", ch.Fabric().Name())
	}
	if err := ch.Close(); err != nil {
		t.Fatal(err)
	}
	t.Setenv(fabric.Env, "kernel")
	if f, err := fabric.Default(); err != nil || f.Name() != "kernel" {
		t.Errorf("CMRT_FABRIC=kernel: %v %v", f, err)
	}
	t.Setenv(fabric.Env, "bogus")
	var e *id.Error
	if _, err := channel.New(); !errors.Is(err, syscall.ENODEV) || !errors.As(err, &e) || e.Op != "create_event_channel" {
		t.Errorf("CMRT_FABRIC=bogus: channel.New() = %v, want create_event_channel ENODEV", err)
	}
}
