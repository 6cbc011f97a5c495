package fabric_test

import (
	"go/build"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
)

const module = "github.com/cmrt/cmrt"

// No package under fabric/ imports package id, directly or not: fabrics
// implement the contract in package fabric, as database/sql drivers
// implement database/sql/driver, and id imports them (for its default
// fabric), never the other way round.
func TestFabricsDoNotImportID(t *testing.T) {
	root, load := importGraph(t)
	// reaches returns the chain from path to a package id imports, if any.
	var reaches func(path string, seen map[string]bool) []string
	reaches = func(path string, seen map[string]bool) []string {
		if path == module+"/id" || strings.HasPrefix(path, module+"/id/") {
			return []string{path}
		}
		if seen[path] || !strings.HasPrefix(path, module) {
			return nil
		}
		seen[path] = true
		for _, imp := range load(path) {
			if chain := reaches(imp, seen); chain != nil {
				return append([]string{path}, chain...)
			}
		}
		return nil
	}
	checked := 0
	err := filepath.WalkDir(filepath.Join(root, "fabric"), func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		if d.Name() == "testdata" {
			return filepath.SkipDir
		}
		if _, err := build.ImportDir(path, 0); err != nil {
			return nil // no Go package here
		}
		rel, _ := filepath.Rel(root, path)
		pkg := module + "/" + filepath.ToSlash(rel)
		checked++
		if chain := reaches(pkg, map[string]bool{}); chain != nil {
			t.Errorf("%s imports id: %s", pkg, strings.Join(chain, " -> "))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 4 {
		t.Fatalf("checked %d packages under fabric/, want fabric, soft, kernel, ucma at least", checked)
	}
}

// importGraph returns the module's root directory and a function giving a
// module package's imports (non-test files).
func importGraph(t *testing.T) (string, func(path string) []string) {
	t.Helper()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	imports := map[string][]string{}
	var load func(path string) []string
	load = func(path string) []string {
		if imps, ok := imports[path]; ok {
			return imps
		}
		imports[path] = nil
		dir := filepath.Join(root, strings.TrimPrefix(strings.TrimPrefix(path, module), "/"))
		p, err := build.ImportDir(dir, 0)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		imports[path] = p.Imports
		return p.Imports
	}
	return root, load
}

// Package id imports the fabrics that ship with cmrt (through
// internal/fabrics), so that a program importing id alone finds the
// default fabric: id.Create(nil, ...) and channel.New() need no import of
// a fabric.
func TestIDImportsTheFabrics(t *testing.T) {
	_, load := importGraph(t)
	deps := map[string]bool{}
	var walk func(path string)
	walk = func(path string) {
		if deps[path] || !strings.HasPrefix(path, module) {
			return
		}
		deps[path] = true
		for _, imp := range load(path) {
			walk(imp)
		}
	}
	walk(module + "/id")
	for _, f := range []string{"/fabric/soft", "/fabric/kernel"} {
		if !deps[module+f] {
			t.Errorf("package id does not import %s", module+f)
		}
	}
}
