package bench

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sort"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"

	"github.com/lowbit-ai/lowbit/checkpoint"
)

// Named is a result with the label it has in plots.
type Named struct {
	Name   string
	Result *Result
}

// Plot file names WritePlots writes.
const (
	ThroughputPlot = "throughput.png"
	TTFTCDFPlot    = "ttft_cdf.png"
)

// WritePlots writes two PNGs into dir (created if missing): output
// throughput against load, one line per run and group of phases; and the
// TTFT CDF, one line per run and kind of traffic. It returns their paths.
func WritePlots(dir string, runs []Named) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	tp, err := throughputPlot(runs)
	if err != nil {
		return nil, err
	}
	cp, err := ttftCDFPlot(runs)
	if err != nil {
		return nil, err
	}
	var paths []string
	for name, p := range map[string]*plot.Plot{ThroughputPlot: tp, TTFTCDFPlot: cp} {
		path := filepath.Join(dir, name)
		if err := savePNG(p, path); err != nil {
			return nil, err
		}
		paths = append(paths, path)
	}
	sort.Strings(paths)
	return paths, nil
}

func savePNG(p *plot.Plot, path string) error {
	wt, err := p.WriterTo(8*vg.Inch, 5*vg.Inch, "png")
	if err != nil {
		return fmt.Errorf("bench: plot %s: %w", path, err)
	}
	var buf bytes.Buffer
	if _, err := wt.WriteTo(&buf); err != nil {
		return fmt.Errorf("bench: plot %s: %w", path, err)
	}
	return checkpoint.WriteFileAtomic(path, buf.Bytes(), 0o644)
}

// series is one line: a run's group or kind. Lines of one group or kind
// share a colour; each run has its own dashes and glyphs.
type series struct {
	name       string
	xys        plotter.XYs
	color, run int
}

func addLines(p *plot.Plot, all []series, points bool) error {
	for _, s := range all {
		l, err := plotter.NewLine(s.xys)
		if err != nil {
			return err
		}
		l.Color = plotutil.Color(s.color)
		l.Dashes = plotutil.Dashes(s.run)
		p.Add(l)
		p.Legend.Add(s.name, l)
		if points {
			sc, err := plotter.NewScatter(s.xys)
			if err != nil {
				return err
			}
			sc.Color = l.Color
			sc.Shape = plotutil.Shape(s.run)
			p.Add(sc)
		}
	}
	return nil
}

// colors numbers names in order of first appearance.
type colors map[string]int

func (c colors) of(name string) int {
	if i, ok := c[name]; ok {
		return i
	}
	c[name] = len(c)
	return c[name]
}

func throughputPlot(runs []Named) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = "Output throughput against load"
	p.Y.Label.Text = "output tokens/s"
	p.Y.Min = 0
	p.Legend.Top, p.Legend.Left = true, true
	var all []series
	units := map[string]bool{}
	col := colors{}
	for ri, run := range runs {
		groups := map[string]plotter.XYs{}
		var order []string
		for _, ph := range run.Result.Phases {
			if _, ok := groups[ph.Group]; !ok {
				order = append(order, ph.Group)
			}
			groups[ph.Group] = append(groups[ph.Group], plotter.XY{X: ph.Load, Y: ph.Metrics.OutputThroughput})
			units[ph.LoadUnit] = true
		}
		for _, g := range order {
			xys := groups[g]
			sort.Slice(xys, func(i, j int) bool { return xys[i].X < xys[j].X })
			all = append(all, series{name: run.Name + " " + g, xys: xys, color: col.of(g), run: ri})
		}
	}
	p.X.Label.Text = "load"
	if len(units) == 1 {
		for u := range units {
			p.X.Label.Text = u
		}
	}
	return p, addLines(p, all, true)
}

func ttftCDFPlot(runs []Named) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = "Time to first token, cumulative distribution"
	p.X.Label.Text = "TTFT (ms)"
	p.Y.Label.Text = "fraction of requests"
	p.Y.Min, p.Y.Max = 0, 1
	p.Legend.Top, p.Legend.Left = false, false
	var all []series
	col := colors{}
	for ri, run := range runs {
		byKind := map[string][]float64{}
		var order []string
		for _, ph := range run.Result.Phases {
			for _, r := range ph.Records {
				if !r.Success {
					continue
				}
				if _, ok := byKind[r.Kind]; !ok {
					order = append(order, r.Kind)
				}
				byKind[r.Kind] = append(byKind[r.Kind], r.TTFT*1000)
			}
		}
		for _, k := range order {
			s := sortedCopy(byKind[k])
			// A step function: the fraction jumps at each sample.
			xys := make(plotter.XYs, 0, 2*len(s)+1)
			xys = append(xys, plotter.XY{X: s[0], Y: 0})
			for i, v := range s {
				xys = append(xys, plotter.XY{X: v, Y: float64(i) / float64(len(s))},
					plotter.XY{X: v, Y: float64(i+1) / float64(len(s))})
			}
			all = append(all, series{name: run.Name + " " + k, xys: xys, color: col.of(k), run: ri})
		}
	}
	if len(all) == 0 {
		return nil, fmt.Errorf("bench: no successful request to plot a TTFT distribution of")
	}
	return p, addLines(p, all, false)
}
