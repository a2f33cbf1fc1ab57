package runtime

import (
	"github.com/lowbit-ai/lowbit/format"
	"github.com/lowbit-ai/lowbit/kernels"
)

// Quantizing activations is discontinuous: a value x/s on (or within an
// ulp of) a rounding midpoint of E4M3 or E2M1 takes one code or the next
// depending on the last bit of x and s, and that one code moves the layer's
// output by a whole quantization step, which the layers after it amplify.
// Such values are common, not rare: the RMSNorm output of layer 0 is a BF16
// embedding row times BF16 gains, whose ratios (x_i/amax, with dynamic
// scales s = amax/448) are often short binary fractions such as 3/8 (x/s =
// 168, the midpoint of 160 and 176). Two correct implementations that round
// an RMSNorm differently in the last bit then disagree from that token on:
// ref and cpu give logits 1e-6 apart for every position before the first
// such value of fp8-dynamic on the tiny model and up to 7 apart after it.
//
// fragileOps therefore marks every row of a forward that quantizes some
// activation within fragileRel (relative) of a rounding boundary, with its
// scale moved as much. A golden comparison holds the runtime to the
// tolerance only before the first marked position (attention carries a
// flip to every later one), and the greedy comparison only while no step
// is marked. fragileRel, about 8 float32 ulps, bounds how far two float32
// forwards (ref and cpu here, transformers and lowbit for the goldens)
// drift apart before any code differs: their BF16 logits agree to ~1e-6.
// The golden prompt of scripts/reference_logits.py was drawn so that no
// variant marks any position or greedy step even at 2e-6.
const fragileRel = 1e-6

// fragileOps wraps Ops and records, for each row of the MatMuls since the
// last reset, whether its activation quantization is fragile.
type fragileOps struct {
	kernels.Ops
	rows []bool
}

func (f *fragileOps) reset(T int) { f.rows = make([]bool, T) }

func (f *fragileOps) MatMul(y, x []float32, T int, w *kernels.Weight) {
	if w.Act != kernels.ActNone && len(f.rows) == T {
		for t := range T {
			if !f.rows[t] && fragileRow(x[t*w.In:(t+1)*w.In], w.Act, w.InputScale) {
				f.rows[t] = true
			}
		}
	}
	f.Ops.MatMul(y, x, T, w)
}

// fragileRow reports whether quantizing x under act puts a value (or a
// block scale) within fragileRel of a rounding boundary; dynamic scales
// count twice, since their amax may move too.
func fragileRow(x []float32, act kernels.ActQuant, inputScale float32) bool {
	e4m3 := func(v float64) uint8 { return format.E4M3FromFloat32(float32(v)) }
	e2m1 := func(v float64) uint8 { return format.E2M1FromFloat32(float32(v)) }
	near := func(code func(float64) uint8, v, rel float64) bool { return code(v*(1-rel)) != code(v*(1+rel)) }
	amax := func(g []float32) float64 {
		var m float32
		for _, v := range g {
			m = max(m, max(v, -v))
		}
		return float64(m)
	}
	switch act {
	case kernels.ActFP8Token, kernels.ActFP8Group128:
		group := len(x)
		if act == kernels.ActFP8Group128 {
			group = format.FP8BlockSize
		}
		for g := 0; g+group <= len(x); g += group {
			xs := x[g : g+group]
			a := amax(xs)
			if a == 0 {
				continue
			}
			for _, v := range xs {
				if near(e4m3, float64(v)*format.E4M3Max/a, 2*fragileRel) {
					return true
				}
			}
		}
	case kernels.ActFP8Tensor:
		for _, v := range x {
			if near(e4m3, float64(v)/float64(inputScale), fragileRel) {
				return true
			}
		}
	case kernels.ActNVFP4:
		G := float64(inputScale)
		for g := 0; g+format.NVFP4BlockSize <= len(x); g += format.NVFP4BlockSize {
			xs := x[g : g+format.NVFP4BlockSize]
			bs := amax(xs) / format.E2M1Max * G
			if near(e4m3, bs, fragileRel) {
				return true
			}
			b := float64(format.E4M3ToFloat32(e4m3(bs)))
			if b == 0 {
				b = format.E4M3ScaleEps
			}
			for _, v := range xs {
				if near(e2m1, float64(v)/(b/G), fragileRel) {
					return true
				}
			}
		}
	}
	return false
}
