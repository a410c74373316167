package main

import (
	"errors"
	"fmt"
	"image/color"
	"math"
	"os"
	"slices"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"

	"github.com/termfence/termfence/perf/results"
)

// minPlotMS stands in for a sample of 0 ms, which a log axis cannot show.
const minPlotMS = 0.01

// systemColors keeps one colour per system across panels.
var systemColors = map[string]color.Color{
	results.SystemTermfence: color.RGBA{R: 0xc0, G: 0x39, B: 0x2b, A: 0xff}, // red
	results.SystemRaft:      color.RGBA{R: 0x1f, G: 0x4e, B: 0x9a, A: 0xff}, // blue
	results.SystemEtcd:      color.RGBA{R: 0x2b, G: 0x7a, B: 0x2b, A: 0xff}, // green
}

// ecdf is the empirical distribution of samples as step-line points:
// F(x) = fraction of samples <= x.
func ecdf(samples []float64) plotter.XYs {
	s := slices.Clone(samples)
	slices.Sort(s)
	pts := make(plotter.XYs, 0, len(s)+1)
	pts = append(pts, plotter.XY{X: max(s[0], minPlotMS), Y: 0})
	for i, v := range s {
		pts = append(pts, plotter.XY{X: max(v, minPlotMS), Y: float64(i+1) / float64(len(s))})
	}
	return pts
}

// renderPNG draws one ECDF panel per scenario, stacked, into path.
func renderPNG(path string, rs []results.Result) error {
	rs, err := order(rs)
	if err != nil {
		return err
	}
	if len(rs) == 0 {
		return errors.New("perfreport: nothing to plot")
	}
	var scenarios []string
	for _, r := range rs {
		if !slices.Contains(scenarios, r.Scenario) {
			scenarios = append(scenarios, r.Scenario)
		}
	}
	// One x range for all panels, so they can be compared by eye.
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, r := range rs {
		for _, v := range r.SamplesMS {
			lo, hi = min(lo, max(v, minPlotMS)), max(hi, max(v, minPlotMS))
		}
	}
	lo, hi = math.Pow(10, math.Floor(math.Log10(lo))), math.Pow(10, math.Ceil(math.Log10(hi)))
	if lo == hi {
		hi = lo * 10
	}

	plots := make([][]*plot.Plot, len(scenarios))
	legends := make([]plot.Legend, len(scenarios))
	for i, sc := range scenarios {
		p := plot.New()
		p.Title.Text = "Scenario " + sc + ": time until another participant leads"
		// Kept short: gonum sizes the plot around a centred axis label's box
		// as if it started at the centre, so a long label narrows the plot.
		p.X.Label.Text = "ms (log scale)"
		p.Y.Label.Text = "fraction of rounds ≤ x"
		p.X.Scale = plot.LogScale{}
		p.X.Tick.Marker = plot.LogTicks{Prec: -1}
		p.X.Min, p.X.Max = lo, hi
		p.Y.Min, p.Y.Max = 0, 1
		// The legend goes beside the panel, never over a line.
		leg := plot.NewLegend()
		leg.Top, leg.Left = true, true
		leg.ThumbnailWidth = vg.Points(28)
		p.Add(plotter.NewGrid())
		dashIndex := map[string]int{}
		otherColor := 0
		for _, r := range rs {
			if r.Scenario != sc {
				continue
			}
			l, err := plotter.NewLine(ecdf(r.SamplesMS))
			if err != nil {
				return fmt.Errorf("perfreport: %s: %w", r.Name(), err)
			}
			l.StepStyle = plotter.PostStep
			l.Width = vg.Points(2)
			c, ok := systemColors[r.System]
			if !ok {
				c = plotutil.Color(otherColor)
				otherColor++
			}
			l.Color = c
			l.Dashes = plotutil.Dashes(dashIndex[r.System])
			dashIndex[r.System]++
			p.Add(l)
			s := results.Summarize(r.SamplesMS)
			leg.Add(fmt.Sprintf("%s: p50 %s ms, n=%d", displayName(r), msText(s.P50), s.N), l)
		}
		plots[i] = []*plot.Plot{p}
		legends[i] = leg
	}

	const w, h, legendW = 12 * vg.Inch, 4 * vg.Inch, 3.9 * vg.Inch
	img := vgimg.NewWith(vgimg.UseWH(w, vg.Length(len(scenarios))*h), vgimg.UseDPI(110))
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: len(scenarios), Cols: 1, PadTop: vg.Millimeter * 2, PadBottom: vg.Millimeter * 2,
		PadLeft: vg.Millimeter * 2, PadRight: vg.Millimeter * 4, PadY: vg.Millimeter * 6}
	for i := range plots {
		c := tiles.At(dc, 0, i)
		plots[i][0].Draw(draw.Crop(c, 0, -legendW, 0, 0))
		lc := draw.Crop(c, c.Max.X-c.Min.X-legendW+4*vg.Millimeter, 0, 0, -8*vg.Millimeter)
		legends[i].Draw(lc)
	}

	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("perfreport: %w", err)
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		_ = f.Close()
		return fmt.Errorf("perfreport: write %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("perfreport: %w", err)
	}
	return nil
}

// displayName is the legend label: the Label, or system and timing.
func displayName(r results.Result) string {
	if r.Label != "" {
		return r.Label
	}
	if t := r.Timing(); t != "" {
		return r.System + ", " + t
	}
	return r.System
}
