package tool

import (
	"os"
	"path/filepath"
	"strings"
)

// ProgName returns argv0 as a C program shows its argv[0]: as it was
// invoked ("udaddy", "./udaddy", "/usr/bin/udaddy"), except for a program
// `go run` built, which lives in the go command's temporary directory
// (".../go-build.../b001/exe/udaddy") and is shown by its name alone, the
// name the user asked `go run` for.
func ProgName(argv0 string) string {
	dir := filepath.Dir(argv0)
	if filepath.Base(dir) == "exe" && strings.Contains(filepath.ToSlash(dir), "/go-build") {
		return filepath.Base(argv0)
	}
	return argv0
}

// Args returns the command line as a C program's main gets it: os.Args,
// with argv[0] as ProgName shows it.
func Args() []string {
	if len(os.Args) == 0 {
		return []string{""}
	}
	return append([]string{ProgName(os.Args[0])}, os.Args[1:]...)
}

// ExitStatus is the exit status of a C program whose main returns ret (or
// that calls exit(ret)): the status's low 8 bits, so "return status -111"
// exits 145 and -1 exits 255.
func ExitStatus(ret int) int { return ret & 0xff }
