package tool

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"syscall"
	"testing"

	"github.com/cmrt/cmrt/id"
)

func TestGetopt(t *testing.T) {
	for _, c := range []struct {
		args []string
		opts []Option
		rest []string
		err  string
	}{
		{[]string{"-s", "a", "-p7471", "-vV", "x"}, []Option{{Name: 's', Arg: "a"}, {Name: 'p', Arg: "7471"}, {Name: 'v', Arg: ""}, {Name: 'V', Arg: ""}}, []string{"x"}, ""},
		{[]string{"-vp", "1", "--", "-s"}, []Option{{Name: 'v', Arg: ""}, {Name: 'p', Arg: "1"}}, []string{"-s"}, ""},
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
	for _, v := range []string{"write", "off"} {
		t.Setenv(EnvSoftP2P, v)
		if f, err := Fabric(); err != nil || f.Name() != "soft" {
			t.Errorf("%s: %v %v", v, f, err)
		}
	}
	t.Setenv(EnvSoftP2P, "off,write")
	if _, err := Fabric(); err == nil {
		t.Error("CMRT_SOFT_P2P=off,write accepted")
	}
	t.Setenv("CMRT_FABRIC", "bogus")
	if _, err := Fabric(); !errors.Is(err, syscall.ENODEV) {
		t.Errorf("unknown fabric: %v", err)
	}
}

// Whole-word options are matched first, with one dash or two; everything
// else parses and fails as getopt(3) does.
func TestGetoptLong(t *testing.T) {
	for _, c := range []struct {
		args []string
		opts []Option
		rest []string
		err  string
	}{
		{[]string{"-port", "7174", "-p", "0x2"}, []Option{{Long: "port", Arg: "7174"}, {Name: 'p', Arg: "0x2"}}, nil, ""},
		{[]string{"--port=1", "-port=2", "-v", "x"}, []Option{{Long: "port", Arg: "1"}, {Long: "port", Arg: "2"}, {Name: 'v'}}, []string{"x"}, ""},
		{[]string{"-pv", "-quiet", "--quiet"}, []Option{{Name: 'p', Arg: "v"}, {Long: "quiet"}, {Long: "quiet"}}, nil, ""},
		{[]string{"-h"}, nil, nil, "invalid option -- 'h'"},
		{[]string{"-porter"}, []Option{{Name: 'p', Arg: "orter"}}, nil, ""},
		{[]string{"-port"}, nil, nil, "option '-port' requires an argument"},
		{[]string{"--quiet=1"}, nil, nil, "option '--quiet' doesn't allow an argument"},
	} {
		opts, rest, err := Getopt(c.args, "p:v", "port:", "quiet")
		if c.err != "" {
			if err == nil || err.Error() != c.err {
				t.Errorf("%q: err %v, want %q", c.args, err, c.err)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(opts, c.opts) || !reflect.DeepEqual(rest, c.rest) {
			t.Errorf("%q: %v %q %v, want %v %q", c.args, opts, rest, err, c.opts, c.rest)
		}
	}
}

func TestProgName(t *testing.T) {
	for in, want := range map[string]string{
		"udaddy":                               "udaddy",
		"./udaddy":                             "./udaddy",
		"/usr/bin/udaddy":                      "/usr/bin/udaddy",
		"/tmp/go-build1234/b001/exe/udaddy":    "udaddy",
		"/root/.cache/go-build/b001/udaddy":    "/root/.cache/go-build/b001/udaddy",
		"/home/u/exe/udaddy":                   "/home/u/exe/udaddy",
		"/tmp/x/go-build987654/b001/exe/mckey": "mckey",
	} {
		if got := ProgName(in); got != want {
			t.Errorf("ProgName(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestExitStatus(t *testing.T) {
	for ret, want := range map[int]int{0: 0, 1: 1, -1: 255, -111: 145, -110: 146, 22: 22, 256: 0, -2: 254} {
		if got := ExitStatus(ret); got != want {
			t.Errorf("ExitStatus(%d) = %d, want %d", ret, got, want)
		}
	}
}

func TestStatusName(t *testing.T) {
	for _, c := range []struct {
		t      id.EventType
		status int
		want   string
	}{
		{id.EventRejected, -104, "-104 ECONNRESET"},
		{id.EventRejected, -111, "-111 ECONNREFUSED"},
		{id.EventUnreachable, -110, "-110 ETIMEDOUT"},
		{id.EventUnreachable, 2, "2 IB_SIDR_REJECT"},
		{id.EventUnreachable, 1, "1 IB_SIDR_UNSUPPORTED"},
		{id.EventRejected, 28, "28 IB_CM_REJ_CONSUMER_DEFINED"},
		{id.EventRejected, 8, "8 IB_CM_REJ_INVALID_SERVICE_ID"},
		{id.EventRejected, 34, "34"},
		{id.EventEstablished, 0, "0"},
		{id.EventConnectError, 7, "7"},
		{id.EventConnectError, -99999, "-99999"},
	} {
		if got := StatusText(c.t, c.status); got != c.want {
			t.Errorf("StatusText(%s, %d) = %q, want %q", c.t, c.status, got, c.want)
		}
	}
}

// A fabric that does not exist is "No RDMA devices were detected", as the
// C tools say when the channel has no device, with the packages to import.
func TestCreateEventChannel(t *testing.T) {
	t.Setenv("CMRT_FABRIC", "bogus")
	var w bytes.Buffer
	ch, err := CreateEventChannel(&w)
	want := `No RDMA devices were detected (cmrt: create_event_channel: no fabric CMRT_FABRIC="bogus" (registered: "kernel" (github.com/cmrt/cmrt/fabric/kernel), "soft" (github.com/cmrt/cmrt/fabric/soft)): no such device)` + "\n"
	if ch != nil || !errors.Is(err, syscall.ENODEV) || w.String() != want {
		t.Errorf("%v %v %q, want %q", ch, err, w.String(), want)
	}
	t.Setenv("CMRT_FABRIC", "")
	t.Setenv(EnvSoftP2P, "bogus")
	w.Reset()
	if ch, err := CreateEventChannel(&w); ch != nil || err == nil ||
		w.String() != "failed to create RDMA CM event channel: CMRT_SOFT_P2P=\"bogus\": want write, read, write,read or off\n" {
		t.Errorf("%v %v %q", ch, err, w.String())
	}
	t.Setenv(EnvSoftP2P, "")
	w.Reset()
	ch, err = CreateEventChannel(&w)
	if err != nil || w.Len() != 0 || ch.Fabric().Name() != "soft" {
		t.Fatalf("%v %v %q", ch, err, w.String())
	}
	_ = ch.Close()
}
