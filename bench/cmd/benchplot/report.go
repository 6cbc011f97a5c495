package main

import (
	"bufio"
	"encoding/csv"
	"fmt"
	"io"
	"math"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// spread is a median with the least and greatest of the repetitions
// (all three equal for one repetition).
type spread struct{ med, min, max float64 }

// report is what benchplot draws from a benchreport report (report.txt,
// bench/results.txt): the run's description, the reactor's dispatch rates
// and the connection set-up rates.
type report struct {
	env      map[string]string // "date", "cpu", "mode", "tree", ...
	dispatch []bar             // part 1, in the report's order
	setup    map[string]map[int]spread
	concs    []int
}

// bar is one implementation of part 1, events/s, with its rate relative
// to the Go-channel fan-out (NaN for the fan-out itself).
type bar struct {
	name  string
	rate  spread
	ratio spread
}

// num parses a figure as benchreport prints it: 3 significant digits with
// a k or M suffix ("2694", "13.3k", "2.96M", "0.17x").
func num(s string) (float64, error) {
	s = strings.TrimSuffix(s, "x")
	mult := 1.0
	switch {
	case strings.HasSuffix(s, "k"):
		mult, s = 1e3, strings.TrimSuffix(s, "k")
	case strings.HasSuffix(s, "M"):
		mult, s = 1e6, strings.TrimSuffix(s, "M")
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return 0, fmt.Errorf("figure %q: %w", s, err)
	}
	return v * mult, nil
}

var spreadRE = regexp.MustCompile(`^(\S+)(?: \[(\S+)\.\.(\S+)\])?$`)

// parseSpread parses "2694 [2348..2763]", or "2694" for one repetition.
func parseSpread(s string) (spread, error) {
	m := spreadRE.FindStringSubmatch(strings.TrimSpace(s))
	if m == nil {
		return spread{}, fmt.Errorf("not a median [min..max]: %q", s)
	}
	med, err := num(m[1])
	if err != nil {
		return spread{}, err
	}
	sp := spread{med, med, med}
	if m[2] != "" {
		if sp.min, err = num(m[2]); err != nil {
			return spread{}, err
		}
		if sp.max, err = num(m[3]); err != nil {
			return spread{}, err
		}
	}
	return sp, nil
}

// cells splits a table row of benchreport's: columns are two or more
// spaces apart.
func cells(line string) []string {
	return regexp.MustCompile(`\s{2,}`).Split(strings.TrimSpace(line), -1)
}

// parseReport reads a report: the env lines at its top, part 1's table
// and ratios, and part 2's first table (connections/s by concurrency).
func parseReport(r io.Reader) (*report, error) {
	rep := &report{env: map[string]string{}, setup: map[string]map[int]spread{}}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	section := ""
	var setupCols []string
	ratios := map[string]spread{}
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if strings.HasPrefix(line, "== ") {
			section, _, _ = strings.Cut(strings.TrimPrefix(line, "== "), " ")
			setupCols = nil
			continue
		}
		if section == "" {
			if k, v, ok := strings.Cut(line, ":"); ok {
				rep.env[strings.TrimSpace(k)] = strings.TrimSpace(v)
			}
			continue
		}
		c := cells(line)
		switch section {
		case "1.":
			switch {
			case len(c) >= 2 && slices.Contains([]string{"DispatchInline", "DispatchPool4", "GoChannelFanout"}, c[0]):
				sp, err := parseSpread(c[1])
				if err != nil {
					return nil, fmt.Errorf("line %d: %w", n, err)
				}
				rep.dispatch = append(rep.dispatch, bar{name: c[0], rate: sp})
			case len(c) == 2 && strings.HasSuffix(c[0], "/ fan-out"):
				sp, err := parseSpread(c[1])
				if err != nil {
					return nil, fmt.Errorf("line %d: %w", n, err)
				}
				ratios[c[0]] = sp
			}
		case "2.":
			switch {
			case len(c) > 1 && c[0] == "conc" && slices.Contains(c, "cmrt-sync") && rep.concs == nil:
				setupCols = c
			case setupCols != nil && len(c) > 0 && c[0] != "" && c[0][0] >= '0' && c[0][0] <= '9':
				conc, err := strconv.Atoi(c[0])
				if err != nil {
					return nil, fmt.Errorf("line %d: %w", n, err)
				}
				for k, impl := range setupCols[1:] {
					if !slices.Contains(setupImpls, impl) || k+1 >= len(c) || c[k+1] == "-" {
						continue
					}
					sp, err := parseSpread(c[k+1])
					if err != nil {
						return nil, fmt.Errorf("line %d: %w", n, err)
					}
					if rep.setup[impl] == nil {
						rep.setup[impl] = map[int]spread{}
					}
					rep.setup[impl][conc] = sp
				}
				rep.concs = append(rep.concs, conc)
			default:
				setupCols = nil
			}
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	nan := spread{math.NaN(), math.NaN(), math.NaN()}
	for k := range rep.dispatch {
		b := &rep.dispatch[k]
		b.ratio = nan
		switch b.name {
		case "DispatchInline":
			if sp, ok := ratios["inline / fan-out"]; ok {
				b.ratio = sp
			}
		case "DispatchPool4":
			if sp, ok := ratios["pool of 4 / fan-out"]; ok {
				b.ratio = sp
			}
		}
	}
	return rep, nil
}

// reps is the number of repetitions the report's mode line gives ("full,
// 5 repetitions, ..."), or 0.
func (r *report) reps() int {
	m := regexp.MustCompile(`(\d+) repetitions`).FindStringSubmatch(r.env["mode"])
	if m == nil {
		return 0
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

// note describes the run under a plot's title.
func (r *report) note() string {
	var parts []string
	if n := r.reps(); n > 0 {
		parts = append(parts, fmt.Sprintf("median of %d runs, bars min..max", n))
	}
	if cpu := r.env["cpu"]; cpu != "" {
		parts = append(parts, cpu)
	}
	if d, _, _ := strings.Cut(r.env["date"], " "); d != "" {
		parts = append(parts, d)
	}
	if t, _, _ := strings.Cut(r.env["tree"], " "); t != "" {
		parts = append(parts, "tree "+t)
	}
	return strings.Join(parts, "; ")
}

// cdfPoint is one quantile of a ping-pong case's round trips.
type cdfPoint struct{ q, us float64 }

// cdfSeries is a case of the ping-pong CDFs: message size and
// implementation, with the number of round trips pooled over the runs.
type cdfSeries struct {
	size, impl string
	samples    int
	pts        []cdfPoint
}

// readCDF reads the CSV benchreport -cdf writes:
// size,impl,quantile,us,samples,runs.
func readCDF(path string) ([]*cdfSeries, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	recs, err := csv.NewReader(f).ReadAll()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	var out []*cdfSeries
	by := map[string]*cdfSeries{}
	for k, r := range recs {
		if k == 0 && len(r) > 0 && r[0] == "size" {
			continue
		}
		if len(r) < 5 {
			return nil, fmt.Errorf("%s line %d: %d fields", path, k+1, len(r))
		}
		q, err1 := strconv.ParseFloat(r[2], 64)
		us, err2 := strconv.ParseFloat(r[3], 64)
		n, err3 := strconv.Atoi(r[4])
		if err1 != nil || err2 != nil || err3 != nil {
			return nil, fmt.Errorf("%s line %d: bad number in %q", path, k+1, r)
		}
		key := r[0] + "/" + r[1]
		s := by[key]
		if s == nil {
			s = &cdfSeries{size: r[0], impl: r[1], samples: n}
			by[key] = s
			out = append(out, s)
		}
		s.pts = append(s.pts, cdfPoint{q, us})
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no data", path)
	}
	return out, nil
}
