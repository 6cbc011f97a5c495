package tool

import (
	"errors"
	"fmt"
	"reflect"
	"syscall"
	"testing"
)

func TestGetopt(t *testing.T) {
	for _, c := range []struct {
		args []string
		opts []Option
		rest []string
		err  string
	}{
		{[]string{"-s", "a", "-p7471", "-vV", "x"}, []Option{{'s', "a"}, {'p', "7471"}, {'v', ""}, {'V', ""}}, []string{"x"}, ""},
		{[]string{"-vp", "1", "--", "-s"}, []Option{{'v', ""}, {'p', "1"}}, []string{"-s"}, ""},
		{[]string{"-x"}, nil, nil, "invalid option -- 'x'"},
		{[]string{"-s"}, nil, nil, "option requires an argument -- 's'"},
		{nil, nil, nil, ""},
	} {
		opts, rest, err := Getopt(c.args, "s:p:vV")
		if c.err != "" {
			if err == nil || err.Error() != c.err {
				t.Errorf("%q: err %v, want %q", c.args, err, c.err)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(opts, c.opts) || !reflect.DeepEqual(rest, c.rest) {
			t.Errorf("%q: %v %q %v", c.args, opts, rest, err)
		}
	}
}

func TestAtoi(t *testing.T) {
	for s, want := range map[string]int{
		"100": 100, " -7x": -7, "+3": 3, "": 0, "abc": 0, "2147483648": -2147483648,
		"99999999999999999999": -1, "-99999999999999999999": 0,
	} {
		if got := Atoi(s); got != want {
			t.Errorf("Atoi(%q) = %d, want %d", s, got, want)
		}
	}
}

func TestPerror(t *testing.T) {
	err := fmt.Errorf("cmrt: bind: port held: %w", syscall.EADDRINUSE)
	if got, want := PerrorText("rdma_bind_addr", err), "rdma_bind_addr: Address already in use (cmrt: bind: port held: address already in use)"; got != want {
		t.Errorf("%q, want %q", got, want)
	}
	if got, want := PerrorText("x", syscall.ECONNREFUSED), "x: Connection refused"; got != want {
		t.Errorf("%q, want %q", got, want)
	}
	if got, want := PerrorText("x", errors.New("plain")), "x: plain"; got != want {
		t.Errorf("%q, want %q", got, want)
	}
	if Status(nil) != 0 || Status(err) != -int(syscall.EADDRINUSE) || Status(errors.New("x")) != -1 {
		t.Error("Status")
	}
}

func TestGetaddrinfo(t *testing.T) {
	for _, c := range []struct {
		node, service string
		passive       bool
		want          string
		code          int
	}{
		{"", "7471", true, "0.0.0.0:7471", 0},
		{"", "7471", false, "127.0.0.1:7471", 0},
		{"10.1.2.3", "", false, "10.1.2.3:0", 0},
		{"::ffff:10.1.2.3", "1", false, "10.1.2.3:1", 0},
		{"fe80::1", "1", false, "[fe80::1]:1", 0},
		{"no-such-host.invalid", "1", false, "", EAINoName},
		{"", "no-such-service", false, "", EAIService},
		{"", "70000", false, "", EAIService},
	} {
		got, err := Getaddrinfo(c.node, c.service, c.passive)
		var gai *GAIError
		switch {
		case c.code != 0:
			if !errors.As(err, &gai) || gai.Code != c.code {
				t.Errorf("%q %q: %v %v, want EAI %d", c.node, c.service, got, err, c.code)
			}
		case err != nil || got.String() != c.want:
			t.Errorf("%q %q: %v %v, want %s", c.node, c.service, got, err, c.want)
		}
	}
	if (&GAIError{Code: EAINoName}).Error() != "Name or service not known" {
		t.Error("gai_strerror text")
	}
}

func TestFabric(t *testing.T) {
	t.Setenv("CMRT_FABRIC", "")
	f, err := Fabric()
	if err != nil || f.Name() != "soft" {
		t.Fatalf("%v %v", f, err)
	}
	t.Setenv(EnvSoftP2P, "bogus")
	if _, err := Fabric(); err == nil {
		t.Error("bad CMRT_SOFT_P2P accepted")
	}
	t.Setenv(EnvSoftP2P, "write")
	if f, err := Fabric(); err != nil || f.Name() != "soft" {
		t.Errorf("%v %v", f, err)
	}
	t.Setenv("CMRT_FABRIC", "bogus")
	if _, err := Fabric(); !errors.Is(err, syscall.ENODEV) {
		t.Errorf("unknown fabric: %v", err)
	}
}
