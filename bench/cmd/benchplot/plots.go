package main

import (
	"fmt"
	"image/color"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// The size of every PNG: 1020x600 pixels.
const (
	plotW, plotH = 8.5 * vg.Inch, 5 * vg.Inch
	plotDPI      = 120
)

var setupImpls = []string{"cmrt-sync", "cmrt-async", "tcp", "tcp-mpa"}

var (
	red    = color.RGBA{0xd6, 0x27, 0x28, 0xff}
	orange = color.RGBA{0xff, 0x7f, 0x0e, 0xff}
	blue   = color.RGBA{0x1f, 0x77, 0xb4, 0xff}
	green  = color.RGBA{0x2c, 0xa0, 0x2c, 0xff}
	purple = color.RGBA{0x94, 0x67, 0xbd, 0xff}
)

var setupStyles = map[string]struct {
	label string
	col   color.Color
	glyph draw.GlyphDrawer
}{
	"cmrt-sync":  {"cmrt, synchronous ids", red, draw.BoxGlyph{}},
	"cmrt-async": {"cmrt, asynchronous ids (1 channel)", orange, draw.CircleGlyph{}},
	"tcp":        {"Go TCP connect/accept/close", blue, draw.TriangleGlyph{}},
	"tcp-mpa":    {"Go TCP + 24 B request/reply", green, draw.PyramidGlyph{}},
}

// newPlot is a plot with the house style: a title and the run's
// description under it, a light grid.
func newPlot(title, note string) *plot.Plot {
	p := plot.New()
	p.Title.Text = title
	if note != "" {
		p.Title.Text += "\n" + note
	}
	p.Title.TextStyle.Font.Size = vg.Points(13)
	p.Title.Padding = vg.Points(8)
	p.Legend.TextStyle.Font.Size = vg.Points(10)
	g := plotter.NewGrid()
	g.Vertical.Color = color.Gray{0xe4}
	g.Horizontal.Color = color.Gray{0xe4}
	p.Add(g)
	return p
}

// errPoints are points with min..max error bars.
type errPoints struct {
	plotter.XYs
	plotter.YErrors
}

func (s spread) errs() struct{ Low, High float64 } {
	return struct{ Low, High float64 }{s.med - s.min, s.max - s.med}
}

// rateTicks are a linear axis's default ticks labelled 5k, 1.5M, ...
type rateTicks struct{}

func (rateTicks) Ticks(min, max float64) []plot.Tick {
	ts := plot.DefaultTicks{}.Ticks(min, max)
	for k := range ts {
		if ts[k].Label != "" {
			ts[k].Label = rate(ts[k].Value)
		}
	}
	return ts
}

// rate formats a rate with a k or M suffix.
func rate(v float64) string {
	switch a := math.Abs(v); {
	case a >= 1e6:
		return strconv.FormatFloat(v/1e6, 'f', -1, 64) + "M"
	case a >= 1e3:
		return strconv.FormatFloat(v/1e3, 'f', -1, 64) + "k"
	}
	return strconv.FormatFloat(v, 'f', -1, 64)
}

// setupPlot draws part 2: connections/s against concurrency.
func setupPlot(r *report) (*plot.Plot, error) {
	p := newPlot("Connection set-up rate against concurrency, loopback", r.note())
	p.X.Label.Text = "concurrent ids (log scale)"
	p.Y.Label.Text = "connections per second"
	p.X.Scale = plot.LogScale{}
	var ticks plot.ConstantTicks
	for _, c := range r.concs {
		ticks = append(ticks, plot.Tick{Value: float64(c), Label: strconv.Itoa(c)})
	}
	p.X.Tick.Marker = ticks
	p.Y.Tick.Marker = rateTicks{}
	ymax := 0.0
	for _, impl := range setupImpls {
		byConc := r.setup[impl]
		if len(byConc) == 0 {
			continue
		}
		st := setupStyles[impl]
		var pts errPoints
		for _, c := range r.concs {
			sp, ok := byConc[c]
			if !ok {
				continue
			}
			pts.XYs = append(pts.XYs, plotter.XY{X: float64(c), Y: sp.med})
			pts.YErrors = append(pts.YErrors, sp.errs())
			ymax = math.Max(ymax, sp.max)
		}
		line, points, err := plotter.NewLinePoints(pts)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", impl, err)
		}
		line.Color, line.Width = st.col, vg.Points(2)
		points.Color, points.Shape, points.Radius = st.col, st.glyph, vg.Points(3.5)
		bars, err := plotter.NewYErrorBars(pts)
		if err != nil {
			return nil, err
		}
		bars.Color, bars.Width = st.col, vg.Points(1.2)
		p.Add(line, points, bars)
		p.Legend.Add(st.label, line, points)
	}
	p.Legend.Top = true
	p.Y.Min, p.Y.Max = 0, ymax*1.45 // room for the legend above the lines
	lo, hi := float64(r.concs[0]), float64(r.concs[len(r.concs)-1])
	p.X.Min, p.X.Max = lo/1.6, hi*1.6
	return p, nil
}

// dispatchNames label part 1's bars.
var dispatchNames = map[string]string{
	"DispatchInline":  "reactor, inline",
	"DispatchPool4":   "reactor, pool of 4 workers",
	"GoChannelFanout": "Go channel fan-out to 4 goroutines",
}

// dispatchPlot draws part 1: events/s, with each reactor bar's rate
// relative to the fan-out in the same run.
func dispatchPlot(r *report) (*plot.Plot, error) {
	p := newPlot("Event dispatch rate: channel fd → epoll → handler", r.note())
	p.Y.Label.Text = "events per second"
	p.Y.Tick.Marker = rateTicks{}
	var names []string
	var labels plotter.XYLabels
	ymax := 0.0
	for k, b := range r.dispatch {
		col := color.Color(blue)
		if strings.HasPrefix(b.name, "Dispatch") {
			col = orange
		}
		bc, err := plotter.NewBarChart(plotter.Values{b.rate.med}, vg.Points(90))
		if err != nil {
			return nil, err
		}
		bc.XMin, bc.Color, bc.LineStyle.Width = float64(k), col, 0
		pts := errPoints{plotter.XYs{{X: float64(k), Y: b.rate.med}}, plotter.YErrors{b.rate.errs()}}
		bars, err := plotter.NewYErrorBars(pts)
		if err != nil {
			return nil, err
		}
		bars.Width = vg.Points(1.5)
		p.Add(bc, bars)
		name := dispatchNames[b.name]
		if name == "" {
			name = b.name
		}
		names = append(names, name)
		text := rate(round3(b.rate.med)) + "/s"
		if !math.IsNaN(b.ratio.med) {
			text += fmt.Sprintf("\n%.2fx the fan-out", b.ratio.med)
		}
		labels.XYs = append(labels.XYs, plotter.XY{X: float64(k), Y: b.rate.max})
		labels.Labels = append(labels.Labels, text)
		ymax = math.Max(ymax, b.rate.max)
	}
	l, err := plotter.NewLabels(labels)
	if err != nil {
		return nil, err
	}
	for k := range l.TextStyle {
		l.TextStyle[k].XAlign = draw.XCenter
		l.TextStyle[k].Font.Size = vg.Points(10)
	}
	l.Offset = vg.Point{Y: vg.Points(6)}
	p.Add(l)
	p.NominalX(names...)
	p.Y.Min, p.Y.Max = 0, ymax*1.2
	return p, nil
}

// round3 keeps 3 significant digits, as the report prints.
func round3(v float64) float64 {
	if v == 0 {
		return 0
	}
	e := math.Pow(10, math.Floor(math.Log10(math.Abs(v)))-2)
	return math.Round(v/e) * e
}

// tailScale spreads the top of a CDF: y maps to -log10(1-y), so 90%, 99%,
// 99.9% are equally far apart.
type tailScale struct{}

func tail(y float64) float64 { return -math.Log10(math.Max(1-y, 1e-7)) }

func (tailScale) Normalize(min, max, y float64) float64 {
	return (tail(y) - tail(min)) / (tail(max) - tail(min))
}

var sizeColors = []color.Color{blue, red, green, purple, orange}

// cdfPlot draws part 3: the fraction of round trips at or under each
// time, cmrt solid and TCP dashed, a colour per message size.
func cdfPlot(series []*cdfSeries, r *report) (*plot.Plot, error) {
	note := "round trips of every run pooled"
	if n := r.reps(); n > 0 {
		note = fmt.Sprintf("round trips of %d runs pooled", n)
	}
	if rest := r.noteRest(); rest != "" {
		note += "; " + rest
	}
	p := newPlot("Ping-pong round trip: cmrt RC Sends (solid) against TCP (dashed), loopback", note)
	p.X.Label.Text = "round trip, µs (log scale)"
	p.Y.Label.Text = "round trips at or under it"
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	p.Y.Scale = tailScale{}
	var sizes []string
	qmax := 0.0
	for _, s := range series {
		if !slices.Contains(sizes, s.size) {
			sizes = append(sizes, s.size)
		}
	}
	for _, s := range series {
		var xys plotter.XYs
		for _, pt := range s.pts {
			if pt.us > 0 && pt.q >= 0 && pt.q < 1 {
				xys = append(xys, plotter.XY{X: pt.us, Y: pt.q})
				qmax = math.Max(qmax, pt.q)
			}
		}
		if len(xys) == 0 {
			continue
		}
		line, err := plotter.NewLine(xys)
		if err != nil {
			return nil, err
		}
		line.Color = sizeColors[slices.Index(sizes, s.size)%len(sizeColors)]
		line.Width = vg.Points(2)
		impl := s.impl
		if impl != "cmrt" {
			line.Dashes = []vg.Length{vg.Points(6), vg.Points(3)}
			impl = strings.ToUpper(impl)
		}
		p.Add(line)
		p.Legend.Add(fmt.Sprintf("%s %s (%d)", impl, s.size, s.samples), line)
	}
	if qmax == 0 {
		return nil, fmt.Errorf("no quantile in (0, 1) to draw")
	}
	var ticks plot.ConstantTicks
	for _, t := range []struct {
		q     float64
		label string
	}{{0, "0"}, {0.5, "50%"}, {0.9, "90%"}, {0.99, "99%"}, {0.999, "99.9%"}, {0.9999, "99.99%"}, {0.99999, "99.999%"}} {
		if t.q <= qmax*(1+1e-9) {
			ticks = append(ticks, plot.Tick{Value: t.q, Label: t.label})
		}
	}
	p.Y.Tick.Marker = ticks
	p.Y.Min, p.Y.Max = 0, qmax
	p.Legend.Top, p.Legend.Left = false, false
	p.Legend.YOffs = vg.Points(6)
	return p, nil
}

// noteRest is the note without its "median of N runs" part.
func (r *report) noteRest() string {
	parts := strings.Split(r.note(), "; ")
	if len(parts) > 0 && strings.HasPrefix(parts[0], "median of") {
		parts = parts[1:]
	}
	return strings.Join(parts, "; ")
}

// savePNG draws p into a PNG of the house size.
func savePNG(p *plot.Plot, path string) error {
	c := vgimg.NewWith(vgimg.UseWH(plotW, plotH), vgimg.UseDPI(plotDPI))
	p.Draw(draw.New(c))
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: c}).WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
