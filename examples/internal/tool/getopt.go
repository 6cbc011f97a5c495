package tool

import (
	"fmt"
	"io"
	"strings"
)

// Option is one parsed command-line option: a letter (Name), or one of the
// whole-word options cmrt adds (Long, with Name 0).
type Option struct {
	Name byte
	Long string
	Arg  string
}

// Getopt parses args (without the program name) as getopt(3) does with
// optstring spec ("s:b:m": a letter followed by ':' takes an argument):
// options may be grouped ("-vV"), arguments attached ("-p7471") or separate
// ("-p 7471"), and "--" or the first operand ends the options. It returns
// the options and the remaining operands. On an unknown option or a missing
// argument it returns an error whose text is glibc's ("invalid option --
// 'x'"); PrintGetoptError prints it as getopt does.
//
// long lists whole-word options a program adds to its C counterpart's
// ("port:" takes an argument, as in spec). They are matched whole, after
// one dash or two ("-port 7174", "--port=7174"), before the letters are;
// everything else parses as getopt(3) parses it, so a command line the C
// program takes, and the errors it gives, are unchanged.
func Getopt(args []string, spec string, long ...string) ([]Option, []string, error) {
	takes := map[byte]bool{}
	known := map[byte]bool{}
	for k := 0; k < len(spec); k++ {
		known[spec[k]] = true
		if k+1 < len(spec) && spec[k+1] == ':' {
			takes[spec[k]] = true
			k++
		}
	}
	longTakes := map[string]bool{}
	for _, l := range long {
		name, arg := strings.CutSuffix(l, ":")
		longTakes[name] = arg
	}
	var opts []Option
	for k := 0; k < len(args); k++ {
		a := args[k]
		if a == "--" {
			return opts, args[k+1:], nil
		}
		if len(a) < 2 || a[0] != '-' {
			return opts, args[k:], nil
		}
		if name, val, hasVal := strings.Cut(strings.TrimPrefix(a[1:], "-"), "="); len(long) > 0 {
			if withArg, ok := longTakes[name]; ok {
				switch {
				case !withArg && hasVal:
					return opts, nil, fmt.Errorf("option '%s' doesn't allow an argument", a[:strings.IndexByte(a, '=')])
				case !withArg:
				case hasVal:
				case k+1 < len(args):
					k++
					val = args[k]
				default:
					return opts, nil, fmt.Errorf("option '%s' requires an argument", a)
				}
				opts = append(opts, Option{Long: name, Arg: val})
				continue
			}
		}
		for j := 1; j < len(a); j++ {
			c := a[j]
			if !known[c] || c == ':' {
				return opts, nil, fmt.Errorf("invalid option -- '%c'", c)
			}
			if !takes[c] {
				opts = append(opts, Option{Name: c})
				continue
			}
			switch {
			case j+1 < len(a):
				opts = append(opts, Option{Name: c, Arg: a[j+1:]})
			case k+1 < len(args):
				k++
				opts = append(opts, Option{Name: c, Arg: args[k]})
			default:
				return opts, nil, fmt.Errorf("option requires an argument -- '%c'", c)
			}
			j = len(a) // the rest of a was the argument
		}
	}
	return opts, nil, nil
}

// PrintGetoptError prints err as getopt(3) does: "prog: invalid option --
// 'x'".
func PrintGetoptError(w io.Writer, prog string, err error) {
	fmt.Fprintf(w, "%s: %v\n", prog, err)
}

// Atoi converts s as atoi(3) does (strtol then a cast to int): leading
// blanks and a sign, then decimal digits up to the first other character;
// no digits give 0; out-of-range values saturate at the long range and are
// then truncated to 32 bits, as in C on LP64 platforms.
func Atoi(s string) int {
	k := 0
	for k < len(s) && (s[k] == ' ' || (s[k] >= '\t' && s[k] <= '\r')) {
		k++
	}
	neg := false
	if k < len(s) && (s[k] == '+' || s[k] == '-') {
		neg = s[k] == '-'
		k++
	}
	const limit = uint64(1) << 63
	var v uint64
	for ; k < len(s) && s[k] >= '0' && s[k] <= '9'; k++ {
		if v > limit/10 {
			v = limit
			continue
		}
		if v = v*10 + uint64(s[k]-'0'); v > limit {
			v = limit
		}
	}
	var l int64
	switch {
	case neg:
		l = int64(-v) // -limit is LONG_MIN
	case v >= limit:
		l = int64(limit - 1)
	default:
		l = int64(v)
	}
	return int(int32(l))
}
