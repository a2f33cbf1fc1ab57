package kl

import (
	"bytes"
	"fmt"
	"image/color"
	"math"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"

	"github.com/lowbit-ai/lowbit/checkpoint"
)

// histFloor is the smallest value drawn on the logarithmic histogram;
// smaller ones (an exact 0 among them) are drawn at it.
const histFloor = 1e-6

// WriteHistogramPNG draws the per-position distribution of the report's
// primary metric to path (written atomically): logarithmic bins for the KL
// and the top-k estimators, which span decades, linear ones for Δ log-lik,
// which can be negative; a line marks the mean.
func (r *Report) WriteHistogramPNG(path string) error {
	logX := r.Primary != MetricDelta
	vals := make(plotter.Values, len(r.values))
	for i, v := range r.values {
		if logX {
			v = math.Log10(max(v, histFloor))
		}
		vals[i] = v
	}
	p := plot.New()
	mean := r.Union
	name := map[string]string{MetricKL: "exact KL", MetricUnion: "union+tail KL estimate",
		MetricLower: "KL lower bound", MetricDelta: "Δ log-likelihood"}[r.Primary]
	switch r.Primary {
	case MetricKL:
		mean = *r.KL
	case MetricLower:
		mean = r.Lower
	case MetricDelta:
		mean = r.Delta
	}
	p.Title.Text = fmt.Sprintf("%s per token, %s %s: mean %.4g nats [%.4g, %.4g]", name, r.Source, r.Mode, mean.Mean, mean.Lo, mean.Hi)
	p.X.Label.Text = "nats per token"
	p.Y.Label.Text = "positions"
	h, err := plotter.NewHist(vals, 50)
	if err != nil {
		return fmt.Errorf("kl: histogram: %w", err)
	}
	h.FillColor = color.RGBA{R: 70, G: 110, B: 180, A: 255}
	p.Add(h)
	top := 0.0
	for _, b := range h.Bins {
		top = max(top, b.Weight)
	}
	x := mean.Mean
	if logX {
		x = math.Log10(max(x, histFloor))
		p.X.Tick.Marker = log10Ticks{}
	}
	line, err := plotter.NewLine(plotter.XYs{{X: x, Y: 0}, {X: x, Y: top}})
	if err != nil {
		return fmt.Errorf("kl: histogram: %w", err)
	}
	line.Color = color.RGBA{R: 200, G: 40, B: 40, A: 255}
	line.Width = vg.Points(1.5)
	p.Add(line)
	p.Legend.Add("mean", line)
	p.Legend.Top = true
	return savePNG(p, path)
}

// WriteLayersPNG draws, per layer, the hidden-state NMSE each layer adds
// to what reaches it (LayerError.Added) as bars, to path (written
// atomically): the tallest bars are the layers to keep in BF16 first.
func (r *Report) WriteLayersPNG(path string) error {
	if len(r.Layers) == 0 {
		return fmt.Errorf("kl: no per-layer errors: they are measured offline only")
	}
	vals := make(plotter.Values, len(r.Layers))
	names := make([]string, len(r.Layers))
	step := max(1, len(r.Layers)/16) // label at most about 16 layers
	for i, l := range r.Layers {
		vals[i] = l.Added
		if i%step == 0 {
			names[i] = fmt.Sprint(l.Layer)
		}
	}
	p := plot.New()
	last := r.Layers[len(r.Layers)-1].NMSE
	p.Title.Text = fmt.Sprintf("hidden-state NMSE added by each layer (after the last: %.3g)", last)
	p.X.Label.Text = "layer"
	p.Y.Label.Text = "NMSE increase"
	bars, err := plotter.NewBarChart(vals, vg.Points(max(2, 360/float64(len(vals)))))
	if err != nil {
		return fmt.Errorf("kl: layers plot: %w", err)
	}
	bars.Color = color.RGBA{R: 70, G: 110, B: 180, A: 255}
	bars.LineStyle.Width = 0
	p.Add(bars, plotter.NewGrid())
	p.NominalX(names...)
	return savePNG(p, path)
}

func savePNG(p *plot.Plot, path string) error {
	wt, err := p.WriterTo(8*vg.Inch, 4.5*vg.Inch, "png")
	if err != nil {
		return fmt.Errorf("kl: %w", err)
	}
	var buf bytes.Buffer
	if _, err := wt.WriteTo(&buf); err != nil {
		return fmt.Errorf("kl: %w", err)
	}
	return checkpoint.WriteFileAtomic(path, buf.Bytes(), 0o644)
}

// log10Ticks labels an axis of log10 values with the values themselves.
type log10Ticks struct{}

func (log10Ticks) Ticks(lo, hi float64) []plot.Tick {
	var ts []plot.Tick
	for e := math.Floor(lo); e <= math.Ceil(hi); e++ {
		if e >= lo && e <= hi {
			ts = append(ts, plot.Tick{Value: e, Label: fmt.Sprintf("1e%d", int(e))})
		}
		for m := 2.0; m < 10; m++ {
			if v := e + math.Log10(m); v >= lo && v <= hi {
				ts = append(ts, plot.Tick{Value: v})
			}
		}
	}
	return ts
}
