package calibrate

import (
	"bytes"
	"fmt"
	"math"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"

	"github.com/lowbit-ai/lowbit/checkpoint"
	"github.com/lowbit-ai/lowbit/quantize"
)

// plotNMSE draws each candidate's per-layer output NMSE against the layer,
// on a log scale: one color per method, one dash pattern per scheme.
func plotNMSE(path, size string, cands []*candidate) error {
	p := plot.New()
	p.Title.Text = fmt.Sprintf("Decoder layer output NMSE vs BF16, synthetic Qwen3 %s", size)
	p.X.Label.Text = "decoder layer"
	p.Y.Label.Text = "NMSE of the residual stream"
	p.Y.Scale = plot.LogScale{}
	p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	p.X.Tick.Marker = plot.TickerFunc(func(lo, hi float64) []plot.Tick {
		var ts []plot.Tick
		step := max(1, int(hi-lo)/7)
		for v := int(math.Ceil(lo)); float64(v) <= hi; v += step {
			ts = append(ts, plot.Tick{Value: float64(v), Label: fmt.Sprint(v)})
		}
		return ts
	})
	schemes := map[quantize.Scheme]int{}
	var order []quantize.Scheme
	lo := math.Inf(1)
	for _, c := range cands {
		if _, ok := schemes[c.scheme]; !ok {
			schemes[c.scheme] = len(schemes)
			order = append(order, c.scheme)
		}
		xys := make(plotter.XYs, len(c.nmse))
		for i, v := range c.nmse {
			xys[i] = plotter.XY{X: float64(i), Y: max(v, 1e-12)}
			lo = min(lo, xys[i].Y)
		}
		l, err := plotter.NewLine(xys)
		if err != nil {
			return err
		}
		l.Color = plotutil.Color(int(c.method))
		l.Dashes = plotutil.Dashes(schemes[c.scheme])
		l.Width = vg.Points(1.5)
		p.Add(l)
	}
	// The legend names colors and dash patterns once each, in the space
	// below the lowest line.
	for _, m := range []quantize.Method{quantize.RTN, quantize.MSE, quantize.GPTQ} {
		l := &plotter.Line{LineStyle: plotter.DefaultLineStyle}
		l.Color, l.Width = plotutil.Color(int(m)), vg.Points(1.5)
		p.Legend.Add(m.String(), l)
	}
	for _, sc := range order {
		l := &plotter.Line{LineStyle: plotter.DefaultLineStyle}
		l.Dashes = plotutil.Dashes(schemes[sc])
		p.Legend.Add(sc.String(), l)
	}
	p.Legend.Left = false
	p.Legend.Top = false
	p.Y.Min = lo / 40
	wt, err := p.WriterTo(8*vg.Inch, 5*vg.Inch, "png")
	if err != nil {
		return err
	}
	var buf bytes.Buffer
	if _, err := wt.WriteTo(&buf); err != nil {
		return err
	}
	return checkpoint.WriteFileAtomic(path, buf.Bytes(), 0o644)
}
