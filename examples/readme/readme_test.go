// Package readme checks that README.md's snippets are true: each Go block is
// a declaration of tour_test.go, character for character, so it compiles
// with the imports the README shows; TestTour runs the functions against
// each other; the shell blocks name packages and make targets that exist.
package readme

import (
	"context"
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cmrt/cmrt/examples/internal/tooltest"
	"github.com/cmrt/cmrt/id"
	"github.com/cmrt/cmrt/id/journal"
	"github.com/cmrt/cmrt/reactor"
)

func TestMain(m *testing.M) { tooltest.Main(m) }

const root = "../.."

// block is a fenced code block of the README.
type block struct {
	lang, text string
	line       int
}

func readmeBlocks(t *testing.T) []block {
	t.Helper()
	src, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	var bs []block
	var cur *block
	for k, l := range strings.SplitAfter(string(src), "\n") {
		switch {
		case cur == nil && strings.HasPrefix(l, "```") && len(strings.TrimSpace(l)) > 3:
			cur = &block{lang: strings.TrimSpace(l[3:]), line: k + 1}
		case cur != nil && strings.TrimSpace(l) == "```":
			bs = append(bs, *cur)
			cur = nil
		case cur != nil:
			cur.text += l
		}
	}
	if cur != nil {
		t.Fatalf("README.md:%d: unterminated code block", cur.line)
	}
	return bs
}

// decls returns the source text of each top-level declaration of a Go
// file (imports under "import"), by name.
func decls(t *testing.T, name, src string) map[string]string {
	t.Helper()
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, name, src, parser.ParseComments)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	out := map[string]string{}
	text := func(n ast.Node) string {
		return src[fset.Position(n.Pos()).Offset:fset.Position(n.End()).Offset]
	}
	for _, d := range f.Decls {
		switch d := d.(type) {
		case *ast.FuncDecl:
			out[d.Name.Name] = text(d)
		case *ast.GenDecl:
			if d.Tok != token.IMPORT {
				t.Fatalf("%s: only imports and functions expected, got %s", name, d.Tok)
			}
			out["import"] = text(d)
		}
	}
	return out
}

// Every Go block of the README is tour_test.go's text, and every
// declaration of tour_test.go is in the README.
func TestGoBlocksAreTheTour(t *testing.T) {
	src, err := os.ReadFile("tour_test.go")
	if err != nil {
		t.Fatal(err)
	}
	tour := decls(t, "tour_test.go", string(src))
	seen := map[string]bool{}
	n := 0
	for _, b := range readmeBlocks(t) {
		if b.lang != "go" {
			continue
		}
		n++
		name := "README.md:" + strconv.Itoa(b.line)
		for k, text := range decls(t, name, "package readme\n\n"+b.text) {
			if seen[k] {
				t.Errorf("%s: %s shown twice", name, k)
			}
			seen[k] = true
			if tour[k] != text {
				t.Errorf("%s: %s differs from tour_test.go's:\n%s\nwant:\n%s", name, k, text, tour[k])
			}
		}
	}
	for k := range tour {
		if !seen[k] {
			t.Errorf("tour_test.go's %s is not in README.md", k)
		}
	}
	if n < 5 {
		t.Errorf("%d Go blocks in README.md, want the imports and four functions", n)
	}
}

// The shell blocks run packages and make targets that exist.
func TestShellBlocks(t *testing.T) {
	mk, err := os.ReadFile(filepath.Join(root, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	goRun := regexp.MustCompile(`^go run (\./\S+)`)
	makeT := regexp.MustCompile(`^make ([\w-]+)`)
	checked := 0
	for _, b := range readmeBlocks(t) {
		if b.lang != "sh" {
			continue
		}
		for _, l := range strings.Split(b.text, "\n") {
			if m := goRun.FindStringSubmatch(l); m != nil {
				checked++
				if fs, _ := filepath.Glob(filepath.Join(root, m[1], "main.go")); len(fs) == 0 {
					t.Errorf("README.md:%d: %q: no main package in %s", b.line, l, m[1])
				}
			}
			if m := makeT.FindStringSubmatch(l); m != nil {
				checked++
				if !regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(m[1]) + `:`).Match(mk) {
					t.Errorf("README.md:%d: %q: no target %s in the Makefile", b.line, l, m[1])
				}
			}
		}
	}
	if checked == 0 {
		t.Error("no go run or make line checked")
	}
}

// captureStdout runs fn with os.Stdout going to a pipe and returns what it
// printed.
func captureStdout(t *testing.T, fn func()) string {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan string, 1)
	go func() {
		b, _ := io.ReadAll(r)
		r.Close()
		got <- string(b)
	}()
	saved := os.Stdout
	os.Stdout = w
	func() {
		defer func() { os.Stdout, _ = saved, w.Close() }()
		fn()
	}()
	return <-got
}

// The tour's functions work as the README says, against each other: serve
// is the server of dial and dialEP.
func TestTour(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	port := tooltest.FreePorts(t, 1)
	addr := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), uint16(port))
	srvCtx, stop := context.WithCancel(ctx)
	served := make(chan error, 1)
	go func() { served <- serve(srvCtx, addr) }()
	tooltest.WaitListening(t, port)

	out := captureStdout(t, func() {
		if err := resolve(addr); err != nil {
			t.Errorf("resolve: %v", err)
		}
		cm, err := dial(ctx, addr)
		if err != nil {
			t.Fatalf("dial: %v", err)
		}
		if cm.State() != id.StateEstablished {
			t.Errorf("dial: state %s", cm.State())
		}
		// As ID.Connect's doc says: on the software fabric an id with no
		// QP is ESTABLISHED without CONNECT_RESPONSE, and Establish is
		// EINVAL.
		for _, r := range journal.Default().RecordsOf(cm.Handle()) {
			if r.Kind == journal.KindEvent && r.Event == id.EventConnectResponse {
				t.Errorf("dial: %s", &r)
			}
		}
		if err := cm.Establish(); !errors.Is(err, syscall.EINVAL) {
			t.Errorf("Establish after ESTABLISHED: %v, want EINVAL", err)
		}
		if err := cm.Disconnect(); err != nil {
			t.Errorf("disconnect: %v", err)
		}
		_ = cm.Destroy()

		ep, err := dialEP(ctx, "127.0.0.1", strconv.Itoa(port))
		if err != nil {
			t.Fatalf("dialEP: %v", err)
		}
		if ep.State() != id.StateEstablished || ep.QP() == nil {
			t.Errorf("dialEP: state %s, QP %v", ep.State(), ep.QP())
		}
		if err := ep.Disconnect(); err != nil {
			t.Errorf("disconnect: %v", err)
		}
		_ = ep.Destroy()
	})
	if want := "RDMA_CM_EVENT_ADDR_RESOLVED my context\nRDMA_CM_EVENT_ESTABLISHED\n"; out != want {
		t.Errorf("printed %q, want %q", out, want)
	}

	// The server still listens: a refused connection would fail here.
	captureStdout(t, func() {
		cm, err := dial(ctx, addr)
		if err != nil {
			t.Fatalf("dial after two connections: %v", err)
		}
		_ = cm.Disconnect()
		_ = cm.Destroy()
	})
	// serve destroys an accepted id on its DISCONNECTED, which crosses the
	// loopback after the client's Destroy returns; stopping serve before
	// that would leave the id (and the fabric's address monitor) behind.
	// Wait until only the listener is left.
	for deadline := time.Now().Add(5 * time.Second); id.Live() > 1; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d ids still exist; the server did not destroy its last connection", id.Live())
		}
	}
	stop()
	if err := <-served; err != nil {
		t.Errorf("serve: %v", err)
	}
}

// The rsocket snippet echoes its message over a connection on loopback.
func TestTourEcho(t *testing.T) {
	var err error
	out := captureStdout(t, func() { err = echo("127.0.0.1:0") })
	if err != nil {
		t.Fatalf("echo: %v", err)
	}
	if want := "hello over RDMA\n"; out != want {
		t.Fatalf("printed %q, want %q", out, want)
	}
}

// The metrics snippet serves the collector: a scrape names the reactor and
// counts the ids that exist.
func TestTourMetrics(t *testing.T) {
	r, err := reactor.New()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(context.Background())
	cm, err := id.Create(nil, nil, id.PSTCP)
	if err != nil {
		t.Fatal(err)
	}
	defer cm.Destroy()
	h, stop := metricsHandler(r)
	defer stop()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body := rec.Body.String()
	for _, want := range []string{`cmrt_reactor_events_total{reactor="server"} 0`, `cmrt_ids{port_space="RDMA_PS_TCP",state="IDLE"} 1`} {
		if !strings.Contains(body, want) {
			t.Errorf("scrape has no %q:\n%s", want, body)
		}
	}
}
