package ref

import (
	"math"
	"math/cmplx"
	"math/rand/v2"
	"testing"

	"github.com/lowbit-ai/lowbit/format"
	"github.com/lowbit-ai/lowbit/kernels"
)

// Small cases computed by hand (or by a formula independent of the code
// under test).

func bf16Bytes(vs ...float32) []byte {
	b := make([]byte, 2*len(vs))
	format.EncodeBF16(b, vs)
	return b
}

func closeTo(got, want, rel float64) bool {
	return math.Abs(got-want) <= rel*math.Max(math.Abs(want), 1e-30)
}

func TestMatMulBF16(t *testing.T) {
	// W = [[1 2 3] [4 5 6]]; x rows [1 -1 0.5] and [2 0 -1].
	w := &kernels.Weight{Format: kernels.WeightBF16, Out: 2, In: 3, Data: bf16Bytes(1, 2, 3, 4, 5, 6)}
	x := []float32{1, -1, 0.5, 2, 0, -1}
	y := make([]float32, 4)
	Ops{}.MatMul(y, x, 2, w)
	want := []float32{0.5, 2, -1, 2}
	for i := range want {
		if y[i] != want[i] {
			t.Errorf("y[%d] = %v, want %v", i, y[i], want[i])
		}
	}
	// 1 + 2^-8 is not a BF16 value: the weight rounds to even (1).
	w.Data = bf16Bytes(1+0x1p-8, 0, 0, 0, 0, 0)
	Ops{}.MatMul(y[:2], x[:3], 1, w)
	if y[0] != 1 || y[1] != 0 {
		t.Errorf("y = %v, want [1 0]", y[:2])
	}
}

func TestMatMulFP8Channel(t *testing.T) {
	// Codes 0x38 = 1, 0x40 = 2, 0xB8 = -1, 0x7E = 448, 0x01 = 2^-9; row
	// scales 0.5 and 3.
	w := &kernels.Weight{
		Format: kernels.WeightFP8Channel, Out: 2, In: 3,
		Data:   []byte{0x38, 0x40, 0xB8, 0x7E, 0x01, 0x38},
		Scales: []float32{0.5, 3},
	}
	got := Dequantize(w)
	want := []float32{0.5, 1, -0.5, 1344, 3 * 0x1p-9, 3}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("Dequantize[%d] = %v, want %v", i, got[i], want[i])
		}
	}
	y := make([]float32, 2)
	Ops{}.MatMul(y, []float32{2, 3, 4}, 1, w)
	if y[0] != 1+3-2 || y[1] != 2688+9*0x1p-9+12 {
		t.Errorf("y = %v, want [2 %v]", y, 2688+9*0x1p-9+12)
	}
}

func TestMatMulFP8TokenTies(t *testing.T) {
	// amax 448 gives s = 1; 1.0625 is the midpoint of 1 and 1.125 (rounds
	// to even 1), 1.1875 that of 1.125 and 1.25 (to even 1.25); 1000 cannot
	// occur with s = amax/448, so use -3.3 (→ -3.25). w = 1.
	w := &kernels.Weight{
		Format: kernels.WeightBF16, Out: 1, In: 4, Data: bf16Bytes(1, 1, 1, 1),
		Act: kernels.ActFP8Token,
	}
	y := make([]float32, 1)
	Ops{}.MatMul(y, []float32{448, 1.0625, 1.1875, -3.3}, 1, w)
	if want := float32(448 + 1 + 1.25 - 3.25); y[0] != want {
		t.Errorf("fp8-token: y = %v, want %v", y[0], want)
	}
	// Static s = 2: 1000/2 saturates to 448, 2.125/2 = 1.0625 rounds to 1.
	w.Act, w.InputScale = kernels.ActFP8Tensor, 2
	Ops{}.MatMul(y, []float32{1000, 2.125, 0, 0}, 1, w)
	if want := float32(2 * (448 + 1)); y[0] != want {
		t.Errorf("fp8-tensor: y = %v, want %v", y[0], want)
	}
	// An all-zero row: s = 1, y = 0.
	w.Act = kernels.ActFP8Token
	Ops{}.MatMul(y, []float32{0, 0, 0, 0}, 1, w)
	if y[0] != 0 {
		t.Errorf("fp8-token zero row: y = %v, want 0", y[0])
	}
}

func TestMatMulFP8Group128(t *testing.T) {
	// Two groups: group 0 has amax 448·4 (s = 4), group 1 amax 448/2 (s = 1/2).
	in := 256
	x := make([]float32, in)
	x[0], x[5] = 448*4, 4*1.0625 // 1.0625 ties to 1
	x[128], x[200] = -224, 0.5*1.1875
	w := &kernels.Weight{Format: kernels.WeightBF16, Out: 1, In: in, Act: kernels.ActFP8Group128}
	ones := make([]float32, in)
	for i := range ones {
		ones[i] = 1
	}
	w.Data = bf16Bytes(ones...)
	y := make([]float32, 1)
	Ops{}.MatMul(y, x, 1, w)
	if want := float32(4*(448+1) + 0.5*(-448+1.25)); y[0] != want {
		t.Errorf("y = %v, want %v", y[0], want)
	}
}

func TestNVFP4Block(t *testing.T) {
	// One 16-element row with codes 0..15: values 0 .5 1 1.5 2 3 4 6 and
	// their negatives; block scale 2 and global scale 0.25 multiply by 0.5.
	data := []byte{0x10, 0x32, 0x54, 0x76, 0x98, 0xBA, 0xDC, 0xFE}
	w := &kernels.Weight{
		Format: kernels.WeightNVFP4, Out: 1, In: 16, Data: data,
		Scales: []float32{2}, GlobalScale: 0.25,
	}
	vals := []float32{0, 0.5, 1, 1.5, 2, 3, 4, 6}
	got := Dequantize(w)
	for i := range 16 {
		want := vals[i%8] * 0.5
		if i >= 8 {
			want = -want
		}
		if got[i] != want || math.Signbit(float64(got[i])) != (i >= 8) {
			t.Errorf("Dequantize[%d] = %v, want %v", i, got[i], want)
		}
	}
	x := make([]float32, 16)
	for i := range x {
		x[i] = 1
		if i >= 8 {
			x[i] = 2
		}
	}
	y := make([]float32, 1)
	Ops{}.MatMul(y, x, 1, w)
	if y[0] != 0.5*18-2*0.5*18 {
		t.Errorf("y = %v, want -9", y[0])
	}
}

func TestQuantizeNVFP4Activations(t *testing.T) {
	// G = 1, amax 6: b = E4M3(6/6·1) = 1, s = 1; x/s rounds to nearest even
	// E2M1: 0.25 → 0, 0.75 → 1, 1.25 → 1, 1.75 → 2, 2.5 → 2, 3.5 → 4, 5 → 4,
	// -0.3 → -0.5, 0.7 → 0.5.
	x := []float32{6, 0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5, -6, -0.3, 0.7, 0, 0, 0, 0, 0.1}
	want := []float32{6, 0, 1, 1, 2, 2, 4, 4, -6, -0.5, 0.5, 0, 0, 0, 0, 0}
	q, s := make([]float32, 16), make([]float32, 1)
	QuantizeActivations(q, s, x, kernels.ActNVFP4, 1)
	if s[0] != 1 {
		t.Errorf("scale = %v, want 1", s[0])
	}
	for i := range want {
		if q[i] != want[i] {
			t.Errorf("q[%d] = E2M1(%v) = %v, want %v", i, x[i], q[i], want[i])
		}
	}
	// amax 3, G = 1: b = 0.5 exactly, s = 0.5; 1 → 2, 0.2/0.5 = 0.4 → 0.5.
	x = []float32{3, 1, 0.2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}
	QuantizeActivations(q, s, x, kernels.ActNVFP4, 1)
	if s[0] != 0.5 || q[0] != 6 || q[1] != 2 || q[2] != 0.5 {
		t.Errorf("amax 3: s = %v, q = %v, want 0.5 and [6 2 0.5 ...]", s[0], q[:3])
	}
	// amax 1e-4, G = 1: amax/6 rounds to E4M3 0, so b = 0.125 and s = 0.125.
	x[0], x[1], x[2] = 1e-4, -1e-4, 0
	QuantizeActivations(q, s, x, kernels.ActNVFP4, 1)
	if s[0] != 0.125 || q[0] != 0 {
		t.Errorf("tiny block: s = %v, q[0] = %v, want 0.125 and 0", s[0], q[0])
	}
	// G = 100, amax 60: b = E4M3(1000) saturates to 448, s = 4.48; 60/4.48
	// clamps to 6.
	x[0], x[1] = 60, 4.48*2
	QuantizeActivations(q, s, x, kernels.ActNVFP4, 100)
	if s[0] != float32(448)/100 || q[0] != 6 || q[1] != 2 {
		t.Errorf("saturated block: s = %v, q = %v, want 4.48 and [6 2 ...]", s[0], q[:2])
	}
}

func TestDequantizeFP8Block(t *testing.T) {
	// [130, 260]: 2 x 3 blocks of 128x128 (edges partial); every code 1.0,
	// block (r, c) scaled by 10r + c + 1.
	out, in := 130, 260
	data := make([]byte, out*in)
	for i := range data {
		data[i] = 0x38
	}
	scales := []float32{1, 2, 3, 11, 12, 13}
	w := &kernels.Weight{Format: kernels.WeightFP8Block, Out: out, In: in, Data: data, Scales: scales}
	got := Dequantize(w)
	for _, p := range [][3]int{{0, 0, 1}, {127, 127, 1}, {0, 128, 2}, {127, 259, 3}, {128, 0, 11}, {129, 255, 12}, {129, 256, 13}} {
		if v := got[p[0]*in+p[1]]; v != float32(p[2]) {
			t.Errorf("w[%d,%d] = %v, want %v", p[0], p[1], v, p[2])
		}
	}
}

func TestRMSNormHand(t *testing.T) {
	// x = [3 4]: mean(x²) = 12.5; g = [1 2] (or 1 + [0 1] zero-centered).
	for _, zc := range []bool{false, true} {
		weight := []float32{1, 2}
		if zc {
			weight = []float32{0, 1}
		}
		y := make([]float32, 2)
		Ops{}.RMSNorm(y, []float32{3, 4}, weight, 1, 2, 0, zc)
		r := 1 / math.Sqrt(12.5)
		if y[0] != float32(3*r) || y[1] != float32(8*r) {
			t.Errorf("zeroCentered=%v: y = %v, want [%v %v]", zc, y, float32(3*r), float32(8*r))
		}
	}
	// eps dominates a tiny row; aliasing.
	x := []float32{1e-4, -1e-4}
	Ops{}.RMSNorm(x, x, []float32{1, 1}, 1, 2, 1e-2, false)
	x4 := float64(float32(1e-4))
	if want := x4 / math.Sqrt(x4*x4+float64(float32(1e-2))); !closeTo(float64(x[0]), want, 1e-7) || x[1] != -x[0] {
		t.Errorf("eps row: y = %v, want ±%v", x, want)
	}
}

func TestRoPEComplex(t *testing.T) {
	// NeoX RoPE multiplies z_j = x[j] + i·x[j+r/2] by e^{i·pos·θ^(-2j/r)}.
	rng := rand.New(rand.NewPCG(1, 2))
	T, heads, headDim, rotaryDim := 3, 2, 16, 8
	x := make([]float32, T*heads*headDim)
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	pos := []int32{0, 7, 100000}
	got := append([]float32(nil), x...)
	Ops{}.RoPE(got, T, heads, headDim, rotaryDim, pos, 10000)
	half := rotaryDim / 2
	for t0 := range T {
		for h := range heads {
			b := (t0*heads + h) * headDim
			for j := range half {
				z := complex(float64(x[b+j]), float64(x[b+j+half]))
				z *= cmplx.Exp(complex(0, float64(pos[t0])*math.Pow(10000, -float64(2*j)/float64(rotaryDim))))
				if !closeTo(float64(got[b+j]), real(z), 1e-6) && math.Abs(float64(got[b+j])-real(z)) > 1e-6 {
					t.Errorf("t=%d h=%d j=%d: re = %v, want %v", t0, h, j, got[b+j], real(z))
				}
				if !closeTo(float64(got[b+j+half]), imag(z), 1e-6) && math.Abs(float64(got[b+j+half])-imag(z)) > 1e-6 {
					t.Errorf("t=%d h=%d j=%d: im = %v, want %v", t0, h, j, got[b+j+half], imag(z))
				}
			}
			for d := rotaryDim; d < headDim; d++ {
				if got[b+d] != x[b+d] {
					t.Errorf("t=%d h=%d: dim %d beyond rotaryDim changed", t0, h, d)
				}
			}
			if t0 == 0 {
				for d := range headDim {
					if got[b+d] != x[b+d] {
						t.Errorf("pos 0: dim %d changed", d)
					}
				}
			}
		}
	}
}

func TestAttentionHand(t *testing.T) {
	// One head, Dh = 1, start = 1: the new token sees scores q·k = [0, ln 2],
	// so weights [1/3, 2/3], and v = [3, 6] gives 1 + 4 = 5.
	out := make([]float32, 1)
	Ops{}.Attention(out, []float32{1}, []float32{0, float32(math.Ln2)}, []float32{3, 6}, 1, 1, 1, 1, 1, 1)
	if !closeTo(float64(out[0]), 5, 1e-6) {
		t.Errorf("out = %v, want 5", out[0])
	}
}

func TestAttentionNaive(t *testing.T) {
	// Against a float64 attention over the whole cache with an explicit
	// causal mask matrix and no max subtraction (scores are small here).
	rng := rand.New(rand.NewPCG(3, 4))
	T, start, H, KVH, Dh := 5, 3, 4, 2, 8
	L := start + T
	rnd := func(n int) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(rng.NormFloat64())
		}
		return v
	}
	q, k, v := rnd(T*H*Dh), rnd(L*KVH*Dh), rnd(L*KVH*Dh)
	scale := float32(1 / math.Sqrt(float64(Dh)))
	got := make([]float32, T*H*Dh)
	Ops{}.Attention(got, q, k, v, T, start, H, KVH, Dh, scale)

	mask := make([][]bool, T) // mask[t][p]: token t (position start+t) sees p
	for t0 := range T {
		mask[t0] = make([]bool, L)
		for p := range L {
			mask[t0][p] = p <= start+t0
		}
	}
	for t0 := range T {
		for h := range H {
			kh := h / (H / KVH) // heads 0,1 → KV 0; 2,3 → KV 1
			w := make([]float64, L)
			var sum float64
			for p := range L {
				if !mask[t0][p] {
					continue
				}
				var s float64
				for d := range Dh {
					s += float64(q[(t0*H+h)*Dh+d]) * float64(k[(p*KVH+kh)*Dh+d])
				}
				w[p] = math.Exp(s * float64(scale))
				sum += w[p]
			}
			for d := range Dh {
				var o float64
				for p := range L {
					o += w[p] / sum * float64(v[(p*KVH+kh)*Dh+d])
				}
				if g := got[(t0*H+h)*Dh+d]; math.Abs(float64(g)-o) > 1e-6*(1+math.Abs(o)) {
					t.Errorf("out[t=%d,h=%d,d=%d] = %v, want %v", t0, h, d, g, o)
				}
			}
		}
	}
}

func TestSiLUMulHand(t *testing.T) {
	gate := []float32{0, 2, -2, 20, -30}
	up := []float32{5, 1, 3, 0.5, 1}
	out := make([]float32, 5)
	Ops{}.SiLUMul(out, gate, up, 5)
	for i, g := range gate {
		want := float64(g) / (1 + math.Exp(-float64(g))) * float64(up[i])
		if !closeTo(float64(out[i]), want, 1e-7) {
			t.Errorf("silu(%v)·%v = %v, want %v", g, up[i], out[i], want)
		}
	}
	if out[1] != float32(2/(1+math.Exp(-2))) {
		t.Errorf("silu(2) = %v, want 1.7615942", out[1])
	}
}

func TestLogSoftmaxHand(t *testing.T) {
	// [0, ln 3]: probabilities 1/4 and 3/4.
	out := make([]float32, 2)
	Ops{}.LogSoftmax(out, []float32{0, float32(math.Log(3))}, 1, 2)
	if !closeTo(float64(out[0]), -math.Log(4), 1e-7) || !closeTo(float64(out[1]), math.Log(0.75), 1e-6) {
		t.Errorf("out = %v, want [%v %v]", out, -math.Log(4), math.Log(0.75))
	}
	// Random rows, some far from 0, sum to 1 in probability; in place.
	rng := rand.New(rand.NewPCG(5, 6))
	T, V := 4, 1000
	x := make([]float32, T*V)
	for i := range x {
		x[i] = float32(rng.NormFloat64()*10 + float64(i/V)*1000 - 2000)
	}
	Ops{}.LogSoftmax(x, x, T, V)
	for t0 := range T {
		var p float64
		for _, v := range x[t0*V : (t0+1)*V] {
			p += math.Exp(float64(v))
		}
		if math.Abs(p-1) > 1e-5 {
			t.Errorf("row %d: Σ exp(out) = %v, want 1", t0, p)
		}
	}
}

func TestAdd(t *testing.T) {
	a, b := []float32{1, 0x1p24, -2}, []float32{0x1p-30, 1, 2}
	Ops{}.Add(a, a, b, 3)
	if a[0] != 1 || a[1] != 0x1p24 || a[2] != 0 {
		t.Errorf("a + b = %v, want [1 16777216 0]", a)
	}
}
