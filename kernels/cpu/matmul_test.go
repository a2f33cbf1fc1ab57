//go:build cgo

package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/lowbit-ai/lowbit/format"
	"github.com/lowbit-ai/lowbit/kernels"
)

var (
	allFormats = []kernels.WeightFormat{kernels.WeightBF16, kernels.WeightFP8Channel,
		kernels.WeightFP8Tensor, kernels.WeightFP8Block, kernels.WeightNVFP4}
	allActs = []kernels.ActQuant{kernels.ActNone, kernels.ActFP8Token, kernels.ActFP8Tensor,
		kernels.ActFP8Group128, kernels.ActNVFP4}
)

// randWeight returns a valid random weight, or nil when the format and
// activation quantization do not allow the shape.
func randWeight(rng *rand.Rand, f kernels.WeightFormat, act kernels.ActQuant, out, in int) *kernels.Weight {
	w := &kernels.Weight{Format: f, Out: out, In: in, Act: act}
	n := out * in
	switch f {
	case kernels.WeightBF16:
		w.Data = make([]byte, 2*n)
		for i := range n {
			b := format.BF16FromFloat32(float32(rng.NormFloat64() * 0.05))
			w.Data[2*i], w.Data[2*i+1] = byte(b), byte(b>>8)
		}
	case kernels.WeightFP8Channel, kernels.WeightFP8Tensor, kernels.WeightFP8Block:
		w.Data = make([]byte, n)
		for i := range w.Data {
			w.Data[i] = format.E4M3FromFloat32(float32(rng.NormFloat64() * 100))
		}
		ns := map[kernels.WeightFormat]int{kernels.WeightFP8Channel: out, kernels.WeightFP8Tensor: 1,
			kernels.WeightFP8Block: ((out + 127) / 128) * ((in + 127) / 128)}[f]
		w.Scales = make([]float32, ns)
		for i := range w.Scales {
			w.Scales[i] = float32(0.0002 * (1 + rng.Float64()))
		}
	case kernels.WeightNVFP4:
		if in%16 != 0 {
			return nil
		}
		w.Data = make([]byte, n/2)
		for i := range w.Data {
			w.Data[i] = byte(rng.IntN(256))
		}
		w.Scales = make([]float32, n/16)
		for i := range w.Scales {
			w.Scales[i] = format.E4M3ToFloat32(uint8(0x20 + rng.IntN(0x50)))
		}
		w.GlobalScale = 0.003
	}
	switch act {
	case kernels.ActFP8Tensor:
		w.InputScale = 0.01
	case kernels.ActNVFP4:
		w.InputScale = 448 * 6 / 3.5
	}
	if w.Check() != nil {
		return nil
	}
	return w
}

// refWeight returns w[o,i] exactly, in float64.
func refWeight(w *kernels.Weight, o, i int) float64 {
	k := o*w.In + i
	switch w.Format {
	case kernels.WeightBF16:
		return float64(format.BF16ToFloat32(uint16(w.Data[2*k]) | uint16(w.Data[2*k+1])<<8))
	case kernels.WeightFP8Channel:
		return float64(format.E4M3ToFloat32(w.Data[k])) * float64(w.Scales[o])
	case kernels.WeightFP8Tensor:
		return float64(format.E4M3ToFloat32(w.Data[k])) * float64(w.Scales[0])
	case kernels.WeightFP8Block:
		s := w.Scales[(o/128)*((w.In+127)/128)+i/128]
		return float64(format.E4M3ToFloat32(w.Data[k])) * float64(s)
	case kernels.WeightNVFP4:
		code := w.Data[k/2] >> (4 * (k % 2)) & 0xF
		return float64(format.E2M1ToFloat32(code)) * float64(w.Scales[k/16]) * float64(w.GlobalScale)
	}
	panic("bad format")
}

// refActs returns the effective activations of one row, exactly as the
// contract defines them: codes from the float32 formulas, then value ×
// scale in float64.
func refActs(x []float32, act kernels.ActQuant, inScale float32) []float64 {
	xe := make([]float64, len(x))
	absmax := func(xs []float32) float32 {
		var m float32
		for _, v := range xs {
			m = max(m, float32(math.Abs(float64(v))))
		}
		return m
	}
	fp8 := func(lo, hi int, s float32) {
		for i := lo; i < hi; i++ {
			xe[i] = float64(format.E4M3ToFloat32(format.E4M3FromFloat32(x[i]/s))) * float64(s)
		}
	}
	switch act {
	case kernels.ActNone:
		for i, v := range x {
			xe[i] = float64(v)
		}
	case kernels.ActFP8Token, kernels.ActFP8Group128:
		g := len(x)
		if act == kernels.ActFP8Group128 {
			g = 128
		}
		for lo := 0; lo < len(x); lo += g {
			s := float32(1)
			if a := absmax(x[lo : lo+g]); a != 0 {
				s = a / 448
			}
			fp8(lo, lo+g, s)
		}
	case kernels.ActFP8Tensor:
		fp8(0, len(x), inScale)
	case kernels.ActNVFP4:
		for lo := 0; lo < len(x); lo += 16 {
			b := format.E4M3FromFloat32(absmax(x[lo:lo+16]) / 6 * inScale)
			if b&0x7F == 0 {
				b = 0x20
			}
			sc := format.E4M3ToFloat32(b) / inScale
			for i := lo; i < lo+16; i++ {
				xe[i] = float64(format.E2M1ToFloat32(format.E2M1FromFloat32(x[i]/sc))) * float64(sc)
			}
		}
	}
	return xe
}

// checkMatMul compares y with the float64 product of the contract's
// effective activations and weights. The tolerance covers float32
// rounding of the effective operands and products (a few ulps each) and of
// the accumulation (at most in/8 + 4 roundings on partial sums, each
// bounded by Σ|terms|).
func checkMatMul(t *testing.T, y, x []float32, T int, w *kernels.Weight) {
	t.Helper()
	bad := 0
	for tt := range T {
		xe := refActs(x[tt*w.In:(tt+1)*w.In], w.Act, w.InputScale)
		for o := range w.Out {
			var sum, abs float64
			for i := range w.In {
				p := xe[i] * refWeight(w, o, i)
				sum += p
				abs += math.Abs(p)
			}
			got := float64(y[tt*w.Out+o])
			tol := (float64(w.In)/8+8)*0x1p-24*abs + 1e-30
			if !(math.Abs(got-sum) <= tol) {
				if bad++; bad <= 5 {
					t.Errorf("y[%d,%d] = %g, want %g ± %g", tt, o, got, sum, tol)
				}
			}
		}
	}
}

func TestMatMul(t *testing.T) {
	shapes := []struct{ out, in int }{{1, 1}, {5, 17}, {7, 256}, {130, 272}, {3, 300}}
	forEachISA(t, func(t *testing.T, ops *Ops) {
		rng := rand.New(rand.NewPCG(1, 2))
		for _, f := range allFormats {
			for _, act := range allActs {
				for _, sh := range shapes {
					w := randWeight(rng, f, act, sh.out, sh.in)
					if w == nil {
						continue
					}
					for _, T := range []int{1, 6} {
						t.Run(fmt.Sprintf("%v/%v/%dx%d/T=%d", f, act, sh.out, sh.in, T), func(t *testing.T) {
							x := randn(rng, T*sh.in, 1)
							y := make([]float32, T*sh.out)
							ops.MatMul(y, x, T, w)
							checkMatMul(t, y, x, T, w)
						})
					}
				}
			}
		}
	})
}

// TestActQuantExact multiplies by the identity, so that y is the effective
// activation times the per-token scale, and compares it bit for bit with
// the contract's float32 formulas.
func TestActQuantExact(t *testing.T) {
	const n = 256
	id := &kernels.Weight{Format: kernels.WeightBF16, Out: n, In: n, Data: make([]byte, 2*n*n)}
	for i := range n {
		id.Data[2*(i*n+i)+1] = 0x3F // BF16 1.0 = 0x3F80
		id.Data[2*(i*n+i)] = 0x80
	}
	rng := rand.New(rand.NewPCG(3, 4))
	const T = 64
	x := make([]float32, T*n)
	for i := range x {
		// Magnitudes from 2^-30 to 2^12, some exact zeros, some whole zero groups.
		x[i] = float32(rng.NormFloat64() * math.Ldexp(1, rng.IntN(43)-30))
		if rng.IntN(10) == 0 {
			x[i] = 0
		}
	}
	clear(x[5*n : 6*n])     // an all-zero row
	clear(x[7*n+128 : 8*n]) // an all-zero group of 128
	for i := 9 * n; i < 10*n; i++ {
		x[i] = float32(math.Ldexp(1, -140)) * float32(i%7) // subnormals
	}
	y := make([]float32, T*n)
	forEachISA(t, func(t *testing.T, ops *Ops) {
		for _, act := range allActs[1:] {
			for _, inScale := range []float32{0.01, 448 * 6 / 3.5, 3e-7} {
				w := *id
				w.Act, w.InputScale = act, inScale
				ops.MatMul(y, x, T, &w)
				bad := 0
				for tt := range T {
					row := x[tt*n : (tt+1)*n]
					want := contractActs(row, act, inScale)
					for i := range n {
						if got := y[tt*n+i]; !sameBits(got, want[i]) {
							if bad++; bad <= 5 {
								t.Errorf("%v (InputScale %g): x[%d,%d] = %g quantizes to %g, want %g",
									act, inScale, tt, i, row[i], got, want[i])
							}
						}
					}
				}
			}
		}
	})
}

// contractActs returns value × scale of each quantized activation, the
// product rounded to float32, as the identity matmul yields it.
func contractActs(x []float32, act kernels.ActQuant, inScale float32) []float32 {
	out := make([]float32, len(x))
	absmax := func(xs []float32) float32 {
		var m float32
		for _, v := range xs {
			m = max(m, float32(math.Abs(float64(v))))
		}
		return m
	}
	e4m3 := func(v float32) float32 { return format.E4M3ToFloat32(format.E4M3FromFloat32(v)) }
	switch act {
	case kernels.ActFP8Token, kernels.ActFP8Group128:
		g := len(x)
		if act == kernels.ActFP8Group128 {
			g = 128
		}
		for lo := 0; lo < len(x); lo += g {
			s := float32(1)
			if a := absmax(x[lo : lo+g]); a != 0 {
				s = a / 448
			}
			for i := lo; i < lo+g; i++ {
				out[i] = e4m3(x[i]/s) * s
			}
		}
	case kernels.ActFP8Tensor:
		for i := range x {
			out[i] = e4m3(x[i]/inScale) * inScale
		}
	case kernels.ActNVFP4:
		for lo := 0; lo < len(x); lo += 16 {
			b := e4m3(absmax(x[lo:lo+16]) / 6 * inScale)
			if b == 0 {
				b = 0.125
			}
			sc := b / inScale
			for i := lo; i < lo+16; i++ {
				out[i] = format.E2M1ToFloat32(format.E2M1FromFloat32(x[i]/sc)) * sc
			}
		}
	}
	return out
}

// TestDecodeAllCodes reads every weight code back through a product with a
// one-hot activation: y[o] is then exactly the decoded weight.
func TestDecodeAllCodes(t *testing.T) {
	forEachISA(t, func(t *testing.T, ops *Ops) {
		// BF16: all 65536 patterns, In = 1.
		bf := &kernels.Weight{Format: kernels.WeightBF16, Out: 65536, In: 1, Data: make([]byte, 2*65536)}
		for c := range 65536 {
			bf.Data[2*c], bf.Data[2*c+1] = byte(c), byte(c>>8)
		}
		y := make([]float32, 65536)
		ops.MatMul(y, []float32{1}, 1, bf)
		for c := range 65536 {
			if want := format.BF16ToFloat32(uint16(c)); !sameBits(y[c], want) {
				t.Fatalf("bf16 code %#04x decodes to %g, want %g", c, y[c], want)
			}
		}
		// FP8: all 256 codes with per-channel scales, In = 1.
		f8 := &kernels.Weight{Format: kernels.WeightFP8Channel, Out: 256, In: 1, Data: make([]byte, 256),
			Scales: make([]float32, 256)}
		for c := range 256 {
			f8.Data[c] = byte(c)
			f8.Scales[c] = 1 + float32(c)/256
		}
		ops.MatMul(y[:256], []float32{1}, 1, f8)
		for c := range 256 {
			if want := format.E4M3ToFloat32(uint8(c)) * f8.Scales[c]; !sameBits(y[c], want) {
				t.Errorf("e4m3 code %#02x × %g decodes to %g, want %g", c, f8.Scales[c], y[c], want)
			}
		}
		// FP8 again with In = 64, which the AVX-512 VBMI variant decodes 64
		// codes at a time: row c has code c in element c mod 64, +0 elsewhere,
		// and x is all ones.
		f8w := &kernels.Weight{Format: kernels.WeightFP8Channel, Out: 256, In: 64, Data: make([]byte, 256*64),
			Scales: f8.Scales}
		ones := make([]float32, 64)
		for c := range 256 {
			f8w.Data[c*64+c%64] = byte(c)
			ones[c%64] = 1
		}
		ops.MatMul(y[:256], ones, 1, f8w)
		for c := range 256 {
			if want := format.E4M3ToFloat32(uint8(c)) * f8.Scales[c]; !sameBits(y[c], want) {
				t.Errorf("e4m3 code %#02x × %g in element %d of 64 decodes to %g, want %g", c, f8.Scales[c], c%64, y[c], want)
			}
		}
		// NVFP4: row o has code o in element 0 (low nibble) and in element 17 (high
		// nibble of byte 8), zeros elsewhere; In = 32.
		fp4 := &kernels.Weight{Format: kernels.WeightNVFP4, Out: 16, In: 32, Data: make([]byte, 16*16),
			Scales: make([]float32, 16*2), GlobalScale: 0.75}
		for o := range 16 {
			fp4.Data[o*16] = byte(o)
			fp4.Data[o*16+8] = byte(o) << 4
			fp4.Scales[2*o], fp4.Scales[2*o+1] = 2, 0.5
		}
		for _, e := range []int{0, 17} {
			x := make([]float32, 32)
			x[e] = 1
			ops.MatMul(y[:16], x, 1, fp4)
			for o := range 16 {
				want := format.E2M1ToFloat32(uint8(o)) * fp4.Scales[2*o+e/16] * fp4.GlobalScale
				if !sameBits(y[o], want) {
					t.Errorf("e2m1 code %d in element %d decodes to %g, want %g", o, e, y[o], want)
				}
			}
		}
		// NVFP4 again with In = 144, one 128-column chunk (which the AVX-512
		// kernel decodes from byte offsets and shifts) and one block more: code
		// o in element e of row o for every e, one-hot x, a scale per block.
		fp4 = &kernels.Weight{Format: kernels.WeightNVFP4, Out: 16, In: 144, Data: make([]byte, 16*72),
			Scales: make([]float32, 16*9), GlobalScale: 0.75}
		for i := range fp4.Scales {
			fp4.Scales[i] = format.E4M3ToFloat32(uint8(0x30 + i%9))
		}
		x := make([]float32, 144)
		for e := range 144 {
			clear(fp4.Data)
			for o := range 16 {
				fp4.Data[o*72+e/2] = byte(o) << (4 * (e % 2))
			}
			clear(x)
			x[e] = 1
			ops.MatMul(y[:16], x, 1, fp4)
			for o := range 16 {
				want := format.E2M1ToFloat32(uint8(o)) * fp4.Scales[9*o+e/16] * fp4.GlobalScale
				if !sameBits(y[o], want) {
					t.Errorf("e2m1 code %d in element %d of 144 decodes to %g, want %g", o, e, y[o], want)
				}
			}
		}
	})
}

// TestRoundMinifloat checks the activation quantizer's E4M3 and E2M1
// rounding of every code path against format's encoders and decoders: all
// signs and exponents, every combination of the top 10 mantissa bits with
// low bits that sit at, just below and just above each rounding point, and
// random bit patterns.
func TestRoundMinifloat(t *testing.T) {
	var src []float32
	for se := range uint32(512) {
		for hi := range uint32(1024) {
			for _, lo := range []uint32{0, 1, 0xFFF, 0x1000, 0x1001, 0x1FFF} {
				src = append(src, math.Float32frombits(se<<23|hi<<13|lo))
			}
		}
	}
	rng := rand.New(rand.NewPCG(5, 6))
	for range 1 << 20 {
		src = append(src, math.Float32frombits(rng.Uint32()))
	}
	src = append(src, 1) // an odd length leaves a tail for the SIMD paths
	want := [2][]float32{make([]float32, len(src)), make([]float32, len(src))}
	for i, f := range src {
		want[0][i] = format.E4M3ToFloat32(format.E4M3FromFloat32(f))
		want[1][i] = format.E2M1ToFloat32(format.E2M1FromFloat32(f))
	}
	got := make([]float32, len(src))
	for _, isa := range ISAs() {
		for kind, name := range []string{"E4M3", "E2M1"} {
			roundMinifloat(isa, kind, got, src)
			bad := 0
			for i, f := range src {
				g, w := got[i], want[kind][i]
				if math.Float32bits(g) != math.Float32bits(w) && !(g != g && w != w && math.Signbit(float64(g)) == math.Signbit(float64(w))) {
					if bad++; bad <= 5 {
						t.Errorf("%s %s(%g = %#08x) = %g (%#08x), want %g (%#08x)", isa, name, f,
							math.Float32bits(f), g, math.Float32bits(g), w, math.Float32bits(w))
					}
				}
			}
		}
	}
}

func TestMatMulPanics(t *testing.T) {
	ops := newOps(t, "", 1)
	w := &kernels.Weight{Format: kernels.WeightBF16, Out: 2, In: 3, Data: make([]byte, 12)}
	wantPanic(t, "len(x)", func() { ops.MatMul(make([]float32, 4), make([]float32, 5), 2, w) })
	wantPanic(t, "len(y)", func() { ops.MatMul(make([]float32, 3), make([]float32, 6), 2, w) })
	bad := *w
	bad.Data = bad.Data[:11]
	wantPanic(t, "data bytes", func() { ops.MatMul(make([]float32, 4), make([]float32, 6), 2, &bad) })
}

// TestVBMIBitIdentical checks that the AVX-512 FP8 MatMul gives the same bits
// with its VBMI variant, and with its AVX512_BF16 one where the CPU has it
// (FP8 activations), as without either: they decode to the same values and
// add the same exact products in the same order. Every FP8 format and
// activation quantization, In with and without a tail of fewer than 64
// columns, and T across the token tile and block.
func TestVBMIBitIdentical(t *testing.T) {
	if !slices.Contains(ISAs(), "avx512") || !hasVBMI() {
		t.Skip("no AVX-512 VBMI on this CPU")
	}
	variants := []string{"vbmi"}
	if hasBF16Dot() {
		variants = append(variants, "vbmi+bf16")
	} else {
		t.Log("no AVX512_BF16 on this CPU: the VBMI variant alone")
	}
	defer setBF16Dot(true)
	rng := rand.New(rand.NewPCG(27, 28))
	ops := newOps(t, "avx512", 2)
	for _, f := range []kernels.WeightFormat{kernels.WeightFP8Channel, kernels.WeightFP8Tensor, kernels.WeightFP8Block} {
		for _, act := range allActs {
			for _, in := range []int{64, 256, 272, 1000} {
				w := randWeight(rng, f, act, 37, in)
				if w == nil {
					continue
				}
				for i := range w.Data {
					if rng.IntN(50) == 0 { // zeros and subnormals among the codes
						w.Data[i] = byte(rng.IntN(8)) | byte(rng.IntN(2))<<7
					}
				}
				w.Data[5*in+3], w.Data[6*in+in-1] = 0x7F, 0xFF // NaNs in two rows
				for _, T := range []int{1, 3, 70} {
					x := randn(rng, T*in, 1)
					if T == 3 {
						x[5] = float32(math.NaN()) // a NaN activation in token 0
					}
					want, got := make([]float32, T*w.Out), make([]float32, T*w.Out)
					setVBMI(false)
					ops.MatMul(want, x, T, w)
					setVBMI(true)
					for _, v := range variants {
						setBF16Dot(v == "vbmi+bf16")
						ops.MatMul(got, x, T, w)
						if i := diffBits(got, want); i >= 0 {
							t.Errorf("%v/%v/In=%d/T=%d: output %d is %g with %s, %g without", f, act, in, T, i, got[i], v, want[i])
						}
					}
				}
			}
		}
	}
}
