package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestDemo(t *testing.T) {
	var out, errs bytes.Buffer
	if rc := run([]string{"-n", "5"}, &out, &errs); rc != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", rc, out.String(), errs.String())
	}
	text := out.String()
	for _, want := range []string{
		`RDMA_CM_EVENT_CONNECT_REQUEST private data "hello from client 0"`,
		`RDMA_CM_EVENT_ESTABLISHED private data "welcome client 3"`,
		`RDMA_CM_EVENT_REJECTED private data "sorry, full" status -104 ECONNRESET`,
		"OK: 4 connections established and disconnected, 1 rejected",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("output lacks %q:\n%s", want, text)
		}
	}
	for _, side := range []string{"client", "server"} {
		c := 0
		for _, l := range strings.Split(text, "\n") {
			if strings.Contains(l, " "+side+" ") && strings.HasSuffix(l, "RDMA_CM_EVENT_DISCONNECTED") {
				c++
			}
		}
		if c != 4 {
			t.Errorf("%d DISCONNECTED on the %s side, want 4:\n%s", c, side, text)
		}
	}
}

func TestDemoBadFlags(t *testing.T) {
	var out, errs bytes.Buffer
	if rc := run([]string{"-n", "1"}, &out, &errs); rc != 2 || !strings.Contains(errs.String(), "at least 2") {
		t.Fatalf("exit %d, stderr %q", rc, errs.String())
	}
	if rc := run([]string{"-a", "nonsense"}, &out, &errs); rc != 2 {
		t.Fatalf("bad address: exit %d", rc)
	}
}
