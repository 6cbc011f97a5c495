// Command benchplot draws the figures of BENCHMARKS.md from one run of
// scripts/bench.sh, with gonum.org/v1/plot:
//
//   - setup-rate.png: connections per second against concurrency, cmrt's
//     synchronous and asynchronous ids against Go TCP (part 2);
//   - dispatch-rate.png: events per second through the reactor, inline and
//     on a pool of 4, against a Go-channel fan-out (part 1);
//   - pingpong-cdf.png: the distribution of ping-pong round trips, cmrt's
//     RC Sends against TCP, per message size (part 3).
//
// The first two come from the run's report (benchreport's output,
// report.txt; bench/results.txt is a copy), the CDFs from the quantiles
// benchreport -cdf computes from the round trips the run recorded
// (BenchmarkPingPong -bench.samples). bench.sh passes both from the same
// run.
//
//	benchplot -report OUT/report.txt [-cdf OUT/pingpong-cdf.csv] [-outdir DIR]
//
// Only bench/ links gonum: the runtime's packages never do (a test in
// this package checks).
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

func main() {
	reportPath := flag.String("report", "report.txt", "the run's report (benchreport's output)")
	cdfPath := flag.String("cdf", "", "the run's ping-pong quantiles (benchreport -cdf); none: no CDF plot")
	outdir := flag.String("outdir", ".", "where to write the PNGs")
	flag.Parse()
	if err := run(*reportPath, *cdfPath, *outdir, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "benchplot:", err)
		os.Exit(1)
	}
}

// run draws every plot the data allows, and says on w which it skips.
func run(reportPath, cdfPath, outdir string, w io.Writer) error {
	f, err := os.Open(reportPath)
	if err != nil {
		return err
	}
	rep, err := parseReport(f)
	f.Close()
	if err != nil {
		return fmt.Errorf("%s: %w", reportPath, err)
	}
	var series []*cdfSeries
	if cdfPath != "" {
		if series, err = readCDF(cdfPath); err != nil {
			return err
		}
	}
	drawn := 0
	if len(rep.concs) > 0 {
		p, err := setupPlot(rep)
		if err != nil {
			return err
		}
		if err := savePNG(p, filepath.Join(outdir, "setup-rate.png")); err != nil {
			return err
		}
		drawn++
	} else {
		fmt.Fprintf(w, "benchplot: no set-up table in %s: no setup-rate.png\n", reportPath)
	}
	if len(rep.dispatch) > 0 {
		p, err := dispatchPlot(rep)
		if err != nil {
			return err
		}
		if err := savePNG(p, filepath.Join(outdir, "dispatch-rate.png")); err != nil {
			return err
		}
		drawn++
	} else {
		fmt.Fprintf(w, "benchplot: no reactor table in %s: no dispatch-rate.png\n", reportPath)
	}
	if series != nil {
		p, err := cdfPlot(series, rep)
		if err != nil {
			return err
		}
		if err := savePNG(p, filepath.Join(outdir, "pingpong-cdf.png")); err != nil {
			return err
		}
		drawn++
	} else {
		fmt.Fprintln(w, "benchplot: no -cdf: no pingpong-cdf.png")
	}
	if drawn == 0 {
		return fmt.Errorf("%s: nothing to draw", reportPath)
	}
	return nil
}
