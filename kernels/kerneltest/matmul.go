package kerneltest

import (
	"fmt"
	"math"

	"github.com/lowbit-ai/lowbit/format"
	"github.com/lowbit-ai/lowbit/kernels"
	"github.com/lowbit-ai/lowbit/kernels/ref"
)

var (
	weightFormats = []kernels.WeightFormat{
		kernels.WeightBF16, kernels.WeightFP8Channel, kernels.WeightFP8Tensor,
		kernels.WeightFP8Block, kernels.WeightNVFP4,
	}
	actQuants = []kernels.ActQuant{
		kernels.ActNone, kernels.ActFP8Token, kernels.ActFP8Tensor,
		kernels.ActFP8Group128, kernels.ActNVFP4,
	}
	// batchSizes are the token counts T the suite tries: decode, small
	// batches, and each side of 8, 16, 32 and 64 row tiles.
	batchSizes = []int{1, 2, 3, 7, 8, 9, 16, 17, 33, 64, 65}
)

// valid reports whether a weight of format f and shape [out, in] supports
// activation quantization a (what Weight.Check accepts).
func valid(f kernels.WeightFormat, a kernels.ActQuant, in int) bool {
	if f == kernels.WeightNVFP4 && in%16 != 0 {
		return false
	}
	switch a {
	case kernels.ActFP8Group128:
		return in%128 == 0
	case kernels.ActNVFP4:
		return in%16 == 0
	}
	return true
}

// matmulCase is one MatMul case; ties builds activations on rounding
// midpoints of the quantizer.
type matmulCase struct {
	f          kernels.WeightFormat
	act        kernels.ActQuant
	T, out, in int
	ties       bool
}

func (m matmulCase) name() string {
	s := fmt.Sprintf("%v/%v/T=%d/Out=%d/In=%d", m.f, m.act, m.T, m.out, m.in)
	if m.ties {
		s += "/ties"
	}
	return s
}

func matmulCases() []testCase {
	var ms []matmulCase
	add := func(m matmulCase) {
		if valid(m.f, m.act, m.in) {
			ms = append(ms, m)
		}
	}
	// Every format × activation quantization, decode and a batch.
	k := 0
	for _, f := range weightFormats {
		for _, a := range actQuants {
			add(matmulCase{f: f, act: a, T: 1, out: 48, in: 256})
			add(matmulCase{f: f, act: a, T: batchSizes[1+k%(len(batchSizes)-1)], out: 48, in: 256})
			k++
		}
	}
	// Quantizer ties: every quantized activation lands on a rounding
	// midpoint (the weight format does not matter).
	for _, a := range actQuants[1:] {
		add(matmulCase{f: kernels.WeightBF16, act: a, T: 5, out: 32, in: 256, ties: true})
		add(matmulCase{f: kernels.WeightNVFP4, act: a, T: 3, out: 17, in: 384, ties: true})
	}
	// Every batch size, for each format.
	for i, f := range weightFormats {
		for j, T := range batchSizes {
			acts := []kernels.ActQuant{kernels.ActNone, kernels.ActFP8Token, kernels.ActFP8Tensor, kernels.ActNVFP4}
			add(matmulCase{f: f, act: acts[(i+j)%len(acts)], T: T, out: 40, in: 144})
		}
	}
	// Shapes each side of likely tile sizes, format, activation quantization
	// and batch size rotating.
	ins := []int{16, 32, 48, 64, 112, 128, 144, 256, 272, 1040}
	outs := []int{1, 3, 16, 17, 32, 48, 64, 112, 128, 144, 272}
	for i, in := range ins {
		for j, out := range outs {
			n := i*len(outs) + j
			f := weightFormats[n%len(weightFormats)]
			T := batchSizes[(n/len(weightFormats))%len(batchSizes)]
			if in*out*T > 1<<20 {
				T = 2
			}
			for try := range actQuants {
				a := actQuants[(n+try)%len(actQuants)]
				if valid(f, a, in) {
					add(matmulCase{f: f, act: a, T: T, out: out, in: in})
					break
				}
			}
		}
	}
	// Inputs that are not a multiple of 16 (no NVFP4, no groups).
	for i, in := range []int{1, 7, 33, 129, 1000} {
		for j, f := range weightFormats[:4] {
			a := actQuants[(i+j)%3]
			add(matmulCase{f: f, act: a, T: batchSizes[(i*4+j)%len(batchSizes)], out: 19 + 8*j, in: in})
		}
	}
	// Large layers.
	for i, f := range weightFormats {
		add(matmulCase{f: f, act: actQuants[(i+1)%len(actQuants)], T: 2, out: 1040, in: 1024})
	}
	add(matmulCase{f: kernels.WeightBF16, act: kernels.ActNone, T: 65, out: 16, in: 1040})
	// Several column spans and token groups with rows off every tile size
	// (the CUDA tensor-core kernels' spans of 256 columns, groups of 8
	// tokens, tiles of 16 rows, blocks of 128 rows and 128 tokens, stages
	// of 32 columns).
	add(matmulCase{f: kernels.WeightBF16, act: kernels.ActNone, T: 17, out: 200, in: 1040})
	add(matmulCase{f: kernels.WeightBF16, act: kernels.ActNone, T: 97, out: 72, in: 528})
	add(matmulCase{f: kernels.WeightBF16, act: kernels.ActNone, T: 150, out: 300, in: 272})
	add(matmulCase{f: kernels.WeightNVFP4, act: kernels.ActNVFP4, T: 33, out: 1040, in: 64})
	// Each side of the CUDA decode GEMVs' cutoffs (lb_mma_gemv up to 8
	// tokens, lb_mma_gemv_wide from 9 to 32, lb_mma_gemm from 33), with
	// token groups of 1 to 4 and spans split unevenly over lb_mma_gemv_wide's
	// cluster of 8 blocks (10 and 17 spans).
	for _, T := range []int{8, 9, 10, 16, 24, 25, 31, 32, 33, 34} {
		add(matmulCase{f: kernels.WeightBF16, act: kernels.ActNone, T: T, out: 136, in: 2320})
	}
	add(matmulCase{f: kernels.WeightBF16, act: kernels.ActNone, T: 32, out: 300, in: 4112})
	add(matmulCase{f: kernels.WeightFP8Block, act: kernels.ActFP8Group128, T: 17, out: 272, in: 1152})

	cases := make([]testCase, len(ms))
	for i, m := range ms {
		cases[i] = testCase{op: OpMatMul, name: m.name(), run: m.run}
	}
	return cases
}

func (m matmulCase) run(c *checker) {
	w := c.weight(m.f, m.out, m.in)
	w.Act = m.act
	x := c.activations(m.T, m.in, w, m.ties)
	if err := w.Check(); err != nil {
		panic("kerneltest: " + err.Error())
	}
	T, in, out := m.T, m.in, m.out

	want := make([]float32, T*out)
	c.ref.MatMul(want, x, T, w)
	tol := matmulTol(x, T, w)

	x0, data0, scales0 := clone(x), append([]byte(nil), w.Data...), clone(w.Scales)
	y := newOut(T * out)
	c.ops.MatMul(y.s(), x, T, w)
	c.checkGuard("y", y)
	c.unchanged("x", x, x0)
	c.unchanged("w.Scales", w.Scales, scales0)
	for i := range data0 {
		if w.Data[i] != data0[i] {
			c.errorf(": input w.Data[%d] modified", i)
			break
		}
	}
	at := func(i int) string { return fmt.Sprintf("[t=%d,o=%d]", i/out, i%out) }
	c.near(y.s(), want, tol, at)

	if T > 1 {
		for t := range T {
			one := newOut(out)
			c.ops.MatMul(one.s(), x[t*in:(t+1)*in], 1, w)
			c.checkGuard("y (T=1)", one)
			c.same(one.s(), y.s()[t*out:(t+1)*out], func(i int) string { return at(t*out + i) })
		}
	}
}

// matmulTol returns the tolerance of each y[t,o]: (8 + 4√In)·u·Σ_g
// |s_g|·Σ_{i∈g} |q_i|·|w_oi| (see the package doc).
func matmulTol(x []float32, T int, w *kernels.Weight) []float64 {
	wf := ref.Dequantize(w)
	in, out := w.In, w.Out
	group := ref.ActGroupSize(w.Act, in)
	q := make([]float32, in)
	scales := make([]float32, in/group)
	k := (8 + 4*sqrt(in)) * u
	tol := make([]float64, T*out)
	for t := range T {
		ref.QuantizeActivations(q, scales, x[t*in:(t+1)*in], w.Act, w.InputScale)
		for o := range out {
			wr := wf[o*in : (o+1)*in]
			var sum float64
			for g, s := range scales {
				var gs float64
				for i := g * group; i < (g+1)*group; i++ {
					gs += abs32(q[i]) * abs32(wr[i])
				}
				sum += abs32(s) * gs
			}
			tol[t*out+o] = k * sum
		}
	}
	return tol
}

// weight returns a random weight of format f: BF16 values of about 0.05,
// FP8 codes of normal values spread over E4M3's range with scales near
// 1e-3, NVFP4 with random codes, block scales of 1..448 and a global scale
// near 1/2688.
func (c *checker) weight(f kernels.WeightFormat, out, in int) *kernels.Weight {
	w := &kernels.Weight{Format: f, Out: out, In: in}
	n := out * in
	var scales int
	switch f {
	case kernels.WeightBF16:
		w.Data = make([]byte, 2*n)
		for i := range n {
			b := format.BF16FromFloat32(c.nonzero(0.05))
			w.Data[2*i], w.Data[2*i+1] = byte(b), byte(b>>8)
		}
	case kernels.WeightFP8Channel, kernels.WeightFP8Tensor, kernels.WeightFP8Block:
		w.Data = make([]byte, n)
		for i := range w.Data {
			w.Data[i] = format.E4M3FromFloat32(c.normal() * 100)
		}
		switch f {
		case kernels.WeightFP8Channel:
			scales = out
		case kernels.WeightFP8Tensor:
			scales = 1
		default:
			scales = ((out + 127) / 128) * ((in + 127) / 128)
		}
		w.Scales = make([]float32, scales)
		for i := range w.Scales {
			w.Scales[i] = float32(c.uniform(0.5, 2) * 1e-3)
		}
	case kernels.WeightNVFP4:
		w.Data = make([]byte, n/2)
		for i := range w.Data {
			w.Data[i] = byte(c.rng.Uint32())
		}
		w.Scales = make([]float32, n/16)
		for i := range w.Scales {
			w.Scales[i] = format.E4M3ToFloat32(format.E4M3FromFloat32(float32(c.uniform(1, 448))))
		}
		w.GlobalScale = float32(c.uniform(0.5, 2) / 2688)
	}
	return w
}

// activations returns T random rows of w.In activations for w.Act and sets
// w.InputScale for the static quantizations. Rows have magnitudes spread
// over 2^±3 (2^±1 under a static scale) with occasional 16x outliers. With
// T >= 3 the middle row holds the quantizers' special cases: an all-zero
// row (or group), a tiny group, a group past the static scale's range.
// With ties every row is built on rounding midpoints instead.
func (c *checker) activations(T, in int, w *kernels.Weight, ties bool) []float32 {
	static := w.Act == kernels.ActFP8Tensor || w.Act == kernels.ActNVFP4
	spread := 3.0
	if static {
		spread = 1
	}
	x := make([]float32, T*in)
	for t := range T {
		mag := math.Exp2(c.uniform(-spread, spread))
		for i := range in {
			v := c.nonzero(mag)
			if c.rng.IntN(64) == 0 {
				v *= 16
			}
			x[t*in+i] = v
		}
	}
	amax := float64(0)
	for _, v := range x {
		amax = max(amax, abs32(v))
	}
	// Static scales as if calibrated on data whose largest value was 50% to
	// 100% of this batch's, so that the largest values saturate.
	switch w.Act {
	case kernels.ActFP8Tensor:
		w.InputScale = float32(amax * c.uniform(0.5, 1) / format.E4M3Max)
	case kernels.ActNVFP4:
		w.InputScale = float32(format.E4M3Max * format.E2M1Max / (amax * c.uniform(0.5, 1)))
	}
	if ties {
		for t := range T {
			c.tieRow(x[t*in:(t+1)*in], w.Act, w.InputScale)
		}
		return x
	}
	if T < 3 {
		return x
	}
	row := x[(T/2)*in : (T/2+1)*in]
	group := ref.ActGroupSize(w.Act, in)
	switch w.Act {
	case kernels.ActNone, kernels.ActFP8Token, kernels.ActFP8Tensor:
		clear(row) // s = 1 for fp8-token
	case kernels.ActFP8Group128, kernels.ActNVFP4:
		clear(row[:group]) // an all-zero group
		if in >= 2*group {
			for i := group; i < 2*group; i++ {
				row[i] *= 1e-7 // fp8: tiny s; nvfp4: (amax/6)·G rounds to E4M3 0, b = 0.125
			}
		}
		if in >= 3*group {
			for i := 2 * group; i < 3*group; i++ {
				row[i] *= 16 // nvfp4: b saturates at 448, x/s clamps to ±6
			}
		}
	}
	return x
}

// tieRow overwrites row with activations whose quantization under act
// hits rounding midpoints: each group gets one element ±A setting its amax
// (for NVFP4, an A whose (A/6)·G is itself an E4M3 midpoint) and elements x
// with x/s exactly an E4M3 (E2M1) midpoint for the scale s the contract
// computes, so that RNE decides every code and any other float32 evaluation
// order (x·(1/s), x·G/b, amax·(1/448)...) gets some of them wrong. Under
// fp8-tensor a few elements also saturate.
func (c *checker) tieRow(row []float32, act kernels.ActQuant, inputScale float32) {
	group := ref.ActGroupSize(act, len(row))
	for g := 0; g < len(row); g += group {
		xs := row[g : g+group]
		var s, A float32
		var mids []float32
		switch act {
		case kernels.ActFP8Token, kernels.ActFP8Group128:
			A = float32(math.Exp2(c.uniform(-3, 3)) * c.uniform(1, 2))
			s = A / format.E4M3Max
			mids = e4m3Midpoints
		case kernels.ActFP8Tensor:
			s = inputScale
			A = float32(math.Inf(1))
			mids = e4m3Midpoints
		case kernels.ActNVFP4:
			G := inputScale
			// A tie of (A/6)·G at a random midpoint from 0.27 to 432; not
			// every midpoint is reachable, so try a few.
			for range 8 {
				mb := e4m3Midpoints[c.rng.IntN(len(e4m3Midpoints)-40)+40]
				var ok bool
				A, ok = solve(mb*6/G, 64, func(a float32) bool { return a/format.E2M1Max*G == mb })
				if ok {
					break
				}
			}
			b := format.E4M3ToFloat32(format.E4M3FromFloat32(A / format.E2M1Max * G))
			if b == 0 {
				b = format.E4M3ScaleEps
			}
			s = b / G
			mids = e2m1Midpoints
		default:
			return
		}
		for i := range xs {
			m := mids[c.rng.IntN(len(mids))]
			x, _ := solve(m*s, 8, func(x float32) bool { return x/s == m })
			if abs32(x) > float64(A) {
				x = A / 2
			}
			if act == kernels.ActFP8Tensor && c.rng.IntN(32) == 0 {
				x = s * 600 // saturates to 448
			}
			if c.rng.IntN(2) == 0 {
				x = -x
			}
			xs[i] = x
		}
		if !math.IsInf(float64(A), 0) {
			i := c.rng.IntN(len(xs))
			xs[i] = A
			if c.rng.IntN(2) == 0 {
				xs[i] = -A
			}
		}
	}
}

// solve returns the float32 nearest to the positive x0, within span ulps,
// for which ok holds, or x0 and false if there is none.
func solve(x0 float32, span int, ok func(float32) bool) (float32, bool) {
	b := int64(math.Float32bits(x0))
	for d := range 2*span + 1 {
		off := int64((d + 1) / 2)
		if d%2 == 1 {
			off = -off
		}
		if x := math.Float32frombits(uint32(b + off)); ok(x) {
			return x, true
		}
	}
	return x0, false
}

// e4m3Midpoints are the positive midpoints between consecutive finite E4M3
// values; e2m1Midpoints those of E2M1.
var (
	e4m3Midpoints = func() []float32 {
		var m []float32
		for code := uint8(0); code < 0x7E; code++ {
			m = append(m, (format.E4M3ToFloat32(code)+format.E4M3ToFloat32(code+1))/2)
		}
		return m
	}()
	e2m1Midpoints = []float32{0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5}
)
