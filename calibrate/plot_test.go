package calibrate

import (
	"bytes"
	"fmt"

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
	p.Legend.Top = true
	p.Legend.Left = true
	schemes := map[quantize.Scheme]int{}
	for _, c := range cands {
		if _, ok := schemes[c.scheme]; !ok {
			schemes[c.scheme] = len(schemes)
		}
		xys := make(plotter.XYs, len(c.nmse))
		for i, v := range c.nmse {
			xys[i] = plotter.XY{X: float64(i), Y: max(v, 1e-12)}
		}
		l, err := plotter.NewLine(xys)
		if err != nil {
			return err
		}
		l.Color = plotutil.Color(int(c.method))
		l.Dashes = plotutil.Dashes(schemes[c.scheme])
		l.Width = vg.Points(1.5)
		p.Add(l)
		p.Legend.Add(c.scheme.String()+" "+c.method.String(), l)
	}
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
