// Command benchplot draws the connection set-up rate against concurrency
// from the CSV benchreport writes (conc,impl,median,min,max): one line per
// implementation through the medians, with min..max bars, on a log
// concurrency axis. It uses only the standard library (image/png and a 5x7
// bitmap font of its own).
//
//	benchplot -in setup.csv -out setup-rate.png [-title T] [-note N]
package main

import (
	"encoding/csv"
	"flag"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"math"
	"os"
	"sort"
	"strconv"
	"strings"
)

type point struct {
	conc        float64
	med, lo, hi float64
}

type series struct {
	impl, label string
	col         color.RGBA
	marker      int // 0 square, 1 circle, 2 triangle, 3 diamond
	pts         []point
}

var styles = []struct {
	impl, label string
	col         color.RGBA
	marker      int
}{
	{"cmrt-sync", "cmrt, synchronous ids", color.RGBA{0xd6, 0x27, 0x28, 0xff}, 0},
	{"cmrt-async", "cmrt, asynchronous ids (1 channel)", color.RGBA{0xff, 0x7f, 0x0e, 0xff}, 1},
	{"tcp", "Go TCP connect/accept/close", color.RGBA{0x1f, 0x77, 0xb4, 0xff}, 2},
	{"tcp-mpa", "Go TCP + 24 B request/reply", color.RGBA{0x2c, 0xa0, 0x2c, 0xff}, 3},
}

func main() {
	in := flag.String("in", "setup.csv", "CSV from benchreport -csv")
	out := flag.String("out", "setup-rate.png", "PNG to write")
	title := flag.String("title", "Connection set-up rate vs concurrency, loopback", "title")
	note := flag.String("note", "median of the runs; bars: min..max", "subtitle")
	flag.Parse()
	ss, err := load(*in)
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchplot:", err)
		os.Exit(1)
	}
	img := draw(ss, *title, *note)
	f, err := os.Create(*out)
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchplot:", err)
		os.Exit(1)
	}
	if err := png.Encode(f, img); err != nil {
		fmt.Fprintln(os.Stderr, "benchplot:", err)
		os.Exit(1)
	}
	if err := f.Close(); err != nil {
		fmt.Fprintln(os.Stderr, "benchplot:", err)
		os.Exit(1)
	}
}

func load(path string) ([]*series, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	recs, err := csv.NewReader(f).ReadAll()
	if err != nil {
		return nil, err
	}
	by := map[string]*series{}
	var out []*series
	for _, st := range styles {
		s := &series{impl: st.impl, label: st.label, col: st.col, marker: st.marker}
		by[st.impl] = s
		out = append(out, s)
	}
	for k, r := range recs {
		if k == 0 || len(r) < 5 {
			continue
		}
		s := by[r[1]]
		if s == nil {
			continue
		}
		var v [4]float64
		for j, idx := range []int{0, 2, 3, 4} {
			if v[j], err = strconv.ParseFloat(r[idx], 64); err != nil {
				return nil, fmt.Errorf("%s line %d: %v", path, k+1, err)
			}
		}
		s.pts = append(s.pts, point{conc: v[0], med: v[1], lo: v[2], hi: v[3]})
	}
	var kept []*series
	for _, s := range out {
		if len(s.pts) > 0 {
			sort.Slice(s.pts, func(a, b int) bool { return s.pts[a].conc < s.pts[b].conc })
			kept = append(kept, s)
		}
	}
	if len(kept) == 0 {
		return nil, fmt.Errorf("%s: no data", path)
	}
	return kept, nil
}

// canvas is an RGBA image with drawing helpers.
type canvas struct{ *image.RGBA }

func (c canvas) set(x, y int, col color.RGBA) {
	if image.Pt(x, y).In(c.Rect) {
		c.SetRGBA(x, y, col)
	}
}

func (c canvas) rect(x0, y0, x1, y1 int, col color.RGBA) {
	for y := min(y0, y1); y <= max(y0, y1); y++ {
		for x := min(x0, x1); x <= max(x0, x1); x++ {
			c.set(x, y, col)
		}
	}
}

// line draws a line w pixels thick (Bresenham, a square brush).
func (c canvas) line(x0, y0, x1, y1, w int, col color.RGBA) {
	dx, dy := abs(x1-x0), -abs(y1-y0)
	sx, sy := sign(x1-x0), sign(y1-y0)
	e := dx + dy
	for {
		c.rect(x0-w/2, y0-w/2, x0+(w-1)/2, y0+(w-1)/2, col)
		if x0 == x1 && y0 == y1 {
			return
		}
		e2 := 2 * e
		if e2 >= dy {
			e += dy
			x0 += sx
		}
		if e2 <= dx {
			e += dx
			y0 += sy
		}
	}
}

func (c canvas) marker(x, y, kind int, col color.RGBA) {
	const r = 6
	for dy := -r; dy <= r; dy++ {
		for dx := -r; dx <= r; dx++ {
			in := false
			switch kind {
			case 0:
				in = abs(dx) <= r-1 && abs(dy) <= r-1
			case 1:
				in = dx*dx+dy*dy <= r*r
			case 2:
				in = dy >= -r && dy <= r-1 && abs(dx)*2 <= dy+r
			case 3:
				in = abs(dx)+abs(dy) <= r
			}
			if in {
				c.set(x+dx, y+dy, col)
			}
		}
	}
}

// glyph returns r's bitmap ('?' for a rune the font lacks) and how far
// below the line it is drawn at scale (descenders drop two pixels).
func glyph(r rune, scale int) ([7]string, int) {
	g, ok := font[r]
	if !ok {
		g = font['?']
	}
	if strings.ContainsRune(descend, r) {
		return g, 2 * scale
	}
	return g, 0
}

// text draws s with its top-left corner at x, y, each font pixel a
// scale x scale block; it returns the width drawn.
func (c canvas) text(x, y, scale int, s string, col color.RGBA) int {
	cx := x
	for _, r := range s {
		g, dy := glyph(r, scale)
		for row := 0; row < 7; row++ {
			for colIdx := 0; colIdx < 5; colIdx++ {
				if g[row][colIdx] == '#' {
					c.rect(cx+colIdx*scale, y+dy+row*scale, cx+colIdx*scale+scale-1, y+dy+row*scale+scale-1, col)
				}
			}
		}
		cx += 6 * scale
	}
	return cx - x
}

// vtext draws s rotated a quarter turn counter-clockwise (reading
// upwards) with its bottom-left corner at x, y.
func (c canvas) vtext(x, y, scale int, s string, col color.RGBA) {
	cy := y
	for _, r := range s {
		g, dx := glyph(r, scale)
		for row := 0; row < 7; row++ {
			for colIdx := 0; colIdx < 5; colIdx++ {
				if g[row][colIdx] == '#' {
					px, py := x+dx+row*scale, cy-colIdx*scale-scale+1
					c.rect(px, py, px+scale-1, py+scale-1, col)
				}
			}
		}
		cy -= 6 * scale
	}
}

func textWidth(s string, scale int) int { return len([]rune(s)) * 6 * scale }

func abs(v int) int {
	if v < 0 {
		return -v
	}
	return v
}

func sign(v int) int {
	switch {
	case v < 0:
		return -1
	case v > 0:
		return 1
	}
	return 0
}

// niceStep returns a round tick step giving about n ticks up to hi.
func niceStep(hi float64, n int) float64 {
	raw := hi / float64(n)
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if m*mag >= raw {
			return m * mag
		}
	}
	return 10 * mag
}

func fmtRate(v float64) string {
	switch {
	case v >= 1000 && math.Mod(v, 1000) == 0:
		return fmt.Sprintf("%.0fk", v/1000)
	case v >= 1000:
		return fmt.Sprintf("%.1fk", v/1000)
	}
	return fmt.Sprintf("%.0f", v)
}

func draw(ss []*series, title, note string) image.Image {
	const W, H = 1040, 620
	const left, right, top, bottom = 110, 330, 86, 84
	img := canvas{image.NewRGBA(image.Rect(0, 0, W, H))}
	white := color.RGBA{0xff, 0xff, 0xff, 0xff}
	black := color.RGBA{0x20, 0x20, 0x20, 0xff}
	grey := color.RGBA{0x60, 0x60, 0x60, 0xff}
	grid := color.RGBA{0xe4, 0xe4, 0xe4, 0xff}
	img.rect(0, 0, W-1, H-1, white)

	// Data ranges: x log10 over the concurrency levels, y linear from 0.
	xmin, xmax, ymax := math.Inf(1), math.Inf(-1), 0.0
	for _, s := range ss {
		for _, p := range s.pts {
			xmin, xmax = math.Min(xmin, p.conc), math.Max(xmax, p.conc)
			ymax = math.Max(ymax, math.Max(p.hi, p.med))
		}
	}
	lx0, lx1 := math.Log10(xmin), math.Log10(xmax)
	if lx1-lx0 < 1 {
		lx0, lx1 = lx0-0.5, lx1+0.5
	}
	pad := (lx1 - lx0) * 0.06
	lx0, lx1 = lx0-pad, lx1+pad
	step := niceStep(ymax*1.05, 6)
	ytop := math.Ceil(ymax*1.05/step) * step
	px0, px1, py0, py1 := left, W-right, H-bottom, top
	X := func(c float64) int { return px0 + int(math.Round((math.Log10(c)-lx0)/(lx1-lx0)*float64(px1-px0))) }
	Y := func(v float64) int { return py0 - int(math.Round(v/ytop*float64(py0-py1))) }

	// Title and subtitle.
	img.text(left, 18, 3, title, black)
	img.text(left, 54, 2, note, grey)

	// Grid, ticks and tick labels.
	for v := 0.0; v <= ytop+step/2; v += step {
		y := Y(v)
		img.line(px0, y, px1, y, 1, grid)
		img.line(px0-6, y, px0, y, 2, black)
		l := fmtRate(v)
		img.text(px0-12-textWidth(l, 2), y-7, 2, l, black)
	}
	for e := math.Ceil(lx0); e <= math.Floor(lx1); e++ {
		c := math.Pow(10, e)
		x := X(c)
		img.line(x, py1, x, py0, 1, grid)
		img.line(x, py0, x, py0+6, 2, black)
		l := strconv.FormatFloat(c, 'f', -1, 64)
		img.text(x-textWidth(l, 2)/2, py0+14, 2, l, black)
	}
	// Axes.
	img.line(px0, py0, px1, py0, 2, black)
	img.line(px0, py0, px0, py1, 2, black)
	xl := "concurrent ids (log scale)"
	img.text((px0+px1)/2-textWidth(xl, 2)/2, py0+44, 2, xl, black)
	yl := "connections per second"
	img.vtext(22, (py0+py1)/2+textWidth(yl, 2)/2, 2, yl, black)

	// Series: min..max bars, lines through the medians, markers.
	for _, s := range ss {
		for _, p := range s.pts {
			x := X(p.conc)
			if p.hi > p.lo {
				img.line(x, Y(p.lo), x, Y(p.hi), 2, s.col)
				img.line(x-5, Y(p.lo), x+5, Y(p.lo), 2, s.col)
				img.line(x-5, Y(p.hi), x+5, Y(p.hi), 2, s.col)
			}
		}
		for k := 1; k < len(s.pts); k++ {
			a, b := s.pts[k-1], s.pts[k]
			img.line(X(a.conc), Y(a.med), X(b.conc), Y(b.med), 3, s.col)
		}
		for _, p := range s.pts {
			img.marker(X(p.conc), Y(p.med), s.marker, s.col)
		}
	}

	// Legend.
	lx, ly := W-right+24, top+10
	for _, s := range ss {
		img.line(lx, ly+7, lx+34, ly+7, 3, s.col)
		img.marker(lx+17, ly+7, s.marker, s.col)
		words := wrap(s.label, 20)
		for k, w := range words {
			img.text(lx+46, ly+k*22, 2, w, black)
		}
		ly += 22*len(words) + 16
	}
	return img.RGBA
}

// wrap splits s into lines of at most n characters at spaces.
func wrap(s string, n int) []string {
	var lines []string
	cur := ""
	for _, w := range splitSpaces(s) {
		switch {
		case cur == "":
			cur = w
		case len(cur)+1+len(w) <= n:
			cur += " " + w
		default:
			lines = append(lines, cur)
			cur = w
		}
	}
	if cur != "" {
		lines = append(lines, cur)
	}
	return lines
}

func splitSpaces(s string) []string {
	var out []string
	start := -1
	for k, r := range s {
		if r == ' ' {
			if start >= 0 {
				out = append(out, s[start:k])
				start = -1
			}
		} else if start < 0 {
			start = k
		}
	}
	if start >= 0 {
		out = append(out, s[start:])
	}
	return out
}
