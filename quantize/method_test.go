package quantize

import (
	"math"
	"math/rand/v2"
	"path/filepath"
	"testing"

	"github.com/lowbit-ai/lowbit/calibrate/stats"
	"github.com/lowbit-ai/lowbit/format"
)

// methodCase is a scheme and format that MSE and GPTQ support.
type methodCase struct {
	scheme Scheme
	format Format
}

func (c methodCase) String() string { return c.scheme.String() + "/" + c.format.String() }

var methodCases = []methodCase{
	{FP8Dynamic, CompressedTensors}, {FP8Dynamic, ModelOpt},
	{FP8, CompressedTensors}, {FP8, ModelOpt},
	{FP8Block, CompressedTensors},
	{NVFP4A16, CompressedTensors}, {NVFP4, ModelOpt},
}

// quantizeWith quantizes m alone (its own fused group) and returns the
// outputs: the weight tensors first, as the output tables list them.
func quantizeWith(t *testing.T, c methodCase, method Method, m Matrix, h *hessianInv) [][]byte {
	t.Helper()
	opts := Options{Scheme: c.scheme, Format: c.format, Method: method}
	var gs float32
	var err error
	if c.scheme.FP4() {
		if c.format == ModelOpt {
			gs, err = ModelOptNVFP4WeightScale2(m.AbsMax())
		} else {
			gs, err = CTNVFP4GlobalScale(m.AbsMax())
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	outs, err := quantizeMember(opts, m, 1, gs, h)
	if err != nil {
		t.Fatalf("%v %v: %v", c, method, err)
	}
	return outs
}

// dequant decodes quantizeMember's outputs as the loaders read them, from
// format's decoders alone.
func dequant(c methodCase, outs [][]byte, rows, cols int) []float64 {
	f32 := func(b []byte, i int) float64 {
		return float64(math.Float32frombits(uint32(b[4*i]) | uint32(b[4*i+1])<<8 | uint32(b[4*i+2])<<16 | uint32(b[4*i+3])<<24))
	}
	bf := func(b []byte, i int) float64 {
		return float64(format.BF16ToFloat32(uint16(b[2*i]) | uint16(b[2*i+1])<<8))
	}
	ct := c.format != ModelOpt
	deq := make([]float64, rows*cols)
	if !c.scheme.FP4() {
		q, s := outs[0], outs[1]
		for r := range rows {
			for col := range cols {
				var scale float64
				switch {
				case c.scheme == FP8Block:
					scale = bf(s, (r/128)*(cols/128)+col/128)
				case c.scheme == FP8Dynamic && ct:
					scale = bf(s, r)
				case c.scheme == FP8Dynamic:
					scale = f32(s, r)
				case ct:
					scale = bf(s, 0)
				default:
					scale = f32(s, 0)
				}
				deq[r*cols+col] = float64(format.E4M3ToFloat32(q[r*cols+col])) * scale
			}
		}
		return deq
	}
	q, s, g := outs[0], outs[1], f32(outs[2], 0)
	for r := range rows {
		for col := range cols {
			b := q[(r*cols+col)/2]
			code := b & 0xF
			if col%2 == 1 {
				code = b >> 4
			}
			e := float64(format.E4M3ToFloat32(s[r*(cols/16)+col/16]))
			scale := e * g
			if ct {
				scale = float64(float32(e) / float32(g))
			}
			deq[r*cols+col] = float64(format.E2M1ToFloat32(code)) * scale
		}
	}
	return deq
}

// heavyMatrix returns a [rows, cols] BF16 weight like a trained model's
// where clipping pays: Gaussian rows with a heavy tail (one weight in 50 is
// 4-8 times larger) and two outlier input channels.
func heavyMatrix(seed uint64, rows, cols int) (Matrix, []float64) {
	r := rand.New(rand.NewPCG(seed, 7))
	x := make([]float32, rows*cols)
	out1, out2 := r.IntN(cols), r.IntN(cols)
	for i := range x {
		v := r.NormFloat64() * 0.02
		if r.IntN(50) == 0 {
			v *= 4 + 4*r.Float64()
		}
		if c := i % cols; c == out1 || c == out2 {
			v *= 10
		}
		x[i] = v32(v)
	}
	m := refBF16(rows, cols, x)
	w := make([]float64, len(x))
	for i, v := range refDecode(m) {
		w[i] = float64(v)
	}
	return m, w
}

func v32(v float64) float32 { return float32(v) }

// unitErr sums |deq - w|^2.4 per scale unit of scheme s.
func unitErr(s Scheme, deq, w []float64, rows, cols int) []float64 {
	unit := func(r, c int) int {
		switch {
		case s.FP4():
			return r*(cols/16) + c/16
		case s == FP8Dynamic:
			return r
		case s == FP8Block:
			return (r/128)*(cols/128) + c/128
		}
		return 0
	}
	errs := make([]float64, unit(rows-1, cols-1)+1)
	for r := range rows {
		for c := range cols {
			errs[unit(r, c)] += errPow(deq[r*cols+c] - w[r*cols+c])
		}
	}
	return errs
}

func sqErr(a, b []float64) float64 {
	var s float64
	for i := range a {
		s += (a[i] - b[i]) * (a[i] - b[i])
	}
	return s
}

// TestMSENeverWorse checks, per scale unit, that the MSE search's error
// (in its norm, |·|^2.4) is at most RTN's, and that it lowers the total
// squared error of a heavy-tailed weight; and that it only ever shrinks
// scales.
func TestMSENeverWorse(t *testing.T) {
	const rows, cols = 256, 256
	for _, c := range methodCases {
		t.Run(c.String(), func(t *testing.T) {
			for seed := range uint64(3) {
				m, w := heavyMatrix(seed, rows, cols)
				rtn := dequant(c, quantizeWith(t, c, RTN, m, nil), rows, cols)
				mse := dequant(c, quantizeWith(t, c, MSE, m, nil), rows, cols)
				er, em := unitErr(c.scheme, rtn, w, rows, cols), unitErr(c.scheme, mse, w, rows, cols)
				for u := range er {
					if em[u] > er[u]*(1+1e-9) {
						t.Fatalf("seed %d unit %d: MSE error %.6g > RTN %.6g", seed, u, em[u], er[u])
					}
				}
				sr, sm := sqErr(rtn, w), sqErr(mse, w)
				t.Logf("seed %d: squared error RTN %.4g, MSE %.4g (%.1f%%)", seed, sr, sm, 100*(sm/sr-1))
				if c.scheme != FP8 && !(sm < sr) {
					t.Errorf("seed %d: MSE squared error %.6g not below RTN's %.6g", seed, sm, sr)
				}
			}
		})
	}
	// Also on the edge cases of the RTN tests: zero rows and groups, ties,
	// subnormals. The search must not fail or make anything worse.
	for _, c := range methodCases {
		m := testMatrix(5, 256, 256)
		w := make([]float64, 256*256)
		for i, v := range refDecode(m) {
			w[i] = float64(v)
		}
		er := unitErr(c.scheme, dequant(c, quantizeWith(t, c, RTN, m, nil), 256, 256), w, 256, 256)
		em := unitErr(c.scheme, dequant(c, quantizeWith(t, c, MSE, m, nil), 256, 256), w, 256, 256)
		for u := range er {
			if em[u] > er[u]*(1+1e-9) {
				t.Errorf("%v edge cases: unit %d: MSE error %.6g > RTN %.6g", c, u, em[u], er[u])
			}
		}
	}
}

func TestSearchClip(t *testing.T) {
	grid := func(a float32) float64 { return 1 - float64(a)/100 } // the shrink of candidate a, amax 100
	for _, c := range []struct {
		name  string
		key   func(a float32) uint32
		cost  func(a float32) float64
		want  float32
		tried int
	}{
		{"minimum inside", nil, func(a float32) float64 { return math.Abs(grid(a) - 0.07) }, format.RoundBF16(93), 13},
		{"RTN best", nil, func(a float32) float64 { return grid(a) }, 100, 6},
		{"keeps shrinking", nil, func(a float32) float64 { return -grid(a) }, format.RoundBF16(81), 20},
		{"ties keep the larger range", nil, func(a float32) float64 { return 1 }, 100, 6},
		// Keys that repeat for 4 candidates at a time: repeats are not
		// tried and do not count against the patience.
		{"repeated keys skipped", func(a float32) uint32 { return uint32((100 - a) / 4) },
			func(a float32) float64 { return math.Abs(grid(a) - 0.12) }, format.RoundBF16(88), 5},
	} {
		t.Run(c.name, func(t *testing.T) {
			key := c.key
			if key == nil {
				key = func(a float32) uint32 { return math.Float32bits(a) }
			}
			tried := 0
			got := searchClip(100, key, func(a float32) float64 { tried++; return c.cost(a) })
			if got != c.want || tried != c.tried {
				t.Errorf("got %v after %d tries, want %v after %d", got, tried, c.want, c.tried)
			}
		})
	}
	if got := searchClip(0, nil, nil); got != 0 {
		t.Errorf("zero unit: %v", got)
	}
}

// hessianFile writes a statistics file holding the Hessian h ([n, n]) for
// each module and returns it opened.
func hessianFile(t *testing.T, n int, h []float64, modules ...string) *stats.Stats {
	t.Helper()
	var lins []stats.Linear
	for _, mod := range modules {
		ch := make([]float32, n)
		for i := range ch {
			ch[i] = 1
		}
		lins = append(lins, stats.Linear{Module: mod, InputAbsMax: 1, ChannelAbsMax: ch, MeanAbs: ch,
			Hessian: stats.HessianFromFloat64(h), HessianTokens: 1})
	}
	path := filepath.Join(t.TempDir(), "h.safetensors")
	meta := stats.Meta{ModelType: "x", ConfigSHA256: stats.ConfigSHA256(nil), Samples: 1, Tokens: 1, SeqLen: 1}
	if err := stats.Write(path, meta, lins, nil, stats.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	s, err := stats.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}
