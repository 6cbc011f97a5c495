package main

import "fmt"

// option is one parsed command-line option.
type option struct {
	name byte
	arg  string
}

// getopt parses args as getopt(3) does with optstring spec ("s:b:m": a
// letter followed by ':' takes an argument): options may be grouped
// ("-vV"), arguments attached ("-p7471") or separate ("-p 7471"), and "--"
// ends the options. It returns the options and the remaining operands.
func getopt(args []string, spec string) ([]option, []string, error) {
	takes := map[byte]bool{}
	known := map[byte]bool{}
	for k := 0; k < len(spec); k++ {
		known[spec[k]] = true
		if k+1 < len(spec) && spec[k+1] == ':' {
			takes[spec[k]] = true
			k++
		}
	}
	var opts []option
	for k := 0; k < len(args); k++ {
		a := args[k]
		if a == "--" {
			return opts, args[k+1:], nil
		}
		if len(a) < 2 || a[0] != '-' {
			return opts, args[k:], nil
		}
		for j := 1; j < len(a); j++ {
			c := a[j]
			if !known[c] || c == ':' {
				return opts, nil, fmt.Errorf("invalid option -- '%c'", c)
			}
			if !takes[c] {
				opts = append(opts, option{name: c})
				continue
			}
			switch {
			case j+1 < len(a):
				opts = append(opts, option{name: c, arg: a[j+1:]})
			case k+1 < len(args):
				k++
				opts = append(opts, option{name: c, arg: args[k]})
			default:
				return opts, nil, fmt.Errorf("option requires an argument -- '%c'", c)
			}
			j = len(a) // the rest of a was the argument
		}
	}
	return opts, nil, nil
}
