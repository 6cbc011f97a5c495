package portrange

import (
	"errors"
	"testing"
)

func TestParse(t *testing.T) {
	for _, c := range []struct {
		in        string
		low, high int
		ok        bool
	}{
		{"32768\t60999\n", 32768, 60999, true},
		{"1024 1024", 1024, 1024, true},
		{"  40000   50000  ", 40000, 50000, true},
		{"", 0, 0, false},
		{"32768", 0, 0, false},
		{"60999 32768", 0, 0, false},
		{"0 100", 0, 0, false},
		{"1 65536", 0, 0, false},
		{"a b", 0, 0, false},
	} {
		low, high, err := Parse([]byte(c.in))
		if c.ok != (err == nil) || low != c.low || high != c.high {
			t.Errorf("Parse(%q) = %d, %d, %v", c.in, low, high, err)
		}
		if err != nil && !errors.Is(err, ErrMalformed) {
			t.Errorf("Parse(%q): %v is not ErrMalformed", c.in, err)
		}
	}
}

func TestReadOrDefault(t *testing.T) {
	low, high := ReadOrDefault()
	if low <= 0 || low > high || high >= 1<<16 {
		t.Fatalf("range %d-%d", low, high)
	}
	if l, h, err := Read(); err == nil && (l != low || h != high) {
		t.Fatalf("Read %d-%d, ReadOrDefault %d-%d", l, h, low, high)
	}
}
