//go:build cgo

package cpu

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/lowbit-ai/lowbit/format"
)

func TestRMSNorm(t *testing.T) {
	const T, D = 5, 1000
	rng := rand.New(rand.NewPCG(7, 8))
	x, w := randn(rng, T*D, 3), randn(rng, D, 1)
	forEachISA(t, func(t *testing.T, ops *Ops) {
		for _, zc := range []bool{false, true} {
			y := make([]float32, T*D)
			ops.RMSNorm(y, x, w, T, D, 1e-6, zc)
			for tt := range T {
				var ss float64
				for _, v := range x[tt*D : (tt+1)*D] {
					ss += float64(v) * float64(v)
				}
				rms := math.Sqrt(ss/D + 1e-6)
				for i := range D {
					g := float64(w[i])
					if zc {
						g = float64(1 + w[i])
					}
					want := float64(x[tt*D+i]) / rms * g
					if got := float64(y[tt*D+i]); math.Abs(got-want) > ulpTol(want, 2) {
						t.Fatalf("zeroCentered=%v: y[%d,%d] = %g, want %g", zc, tt, i, got, want)
					}
				}
			}
			// In place.
			z := append([]float32(nil), x...)
			ops.RMSNorm(z, z, w, T, D, 1e-6, zc)
			for i := range z {
				if z[i] != y[i] {
					t.Fatalf("in place: y[%d] = %g, want %g", i, z[i], y[i])
				}
			}
		}
	})
}

func TestRoPE(t *testing.T) {
	const T, heads, headDim, rot = 4, 3, 80, 64
	const theta = 1e6
	rng := rand.New(rand.NewPCG(9, 10))
	x := randn(rng, T*heads*headDim, 1)
	pos := []int32{0, 1, 4095, 40000}
	forEachISA(t, func(t *testing.T, ops *Ops) {
		y := append([]float32(nil), x...)
		ops.RoPE(y, T, heads, headDim, rot, pos, theta)
		for tt := range T {
			for h := range heads {
				p := (tt*heads + h) * headDim
				for j := range rot / 2 {
					angle := float64(pos[tt]) * math.Pow(theta, -float64(2*j)/rot)
					c, s := float32(math.Cos(angle)), float32(math.Sin(angle))
					x0, x1 := x[p+j], x[p+j+rot/2]
					w0, w1 := x0*c-x1*s, x1*c+x0*s
					g0, g1 := y[p+j], y[p+j+rot/2]
					if math.Abs(float64(g0-w0)) > ulpTol(float64(w0), 1) || math.Abs(float64(g1-w1)) > ulpTol(float64(w1), 1) {
						t.Fatalf("pos %d head %d pair %d: got (%g, %g), want (%g, %g)", pos[tt], h, j, g0, g1, w0, w1)
					}
				}
				for j := rot; j < headDim; j++ {
					if y[p+j] != x[p+j] {
						t.Fatalf("pos %d head %d: dimension %d beyond rotaryDim changed", pos[tt], h, j)
					}
				}
			}
		}
	})
}

// refAttention is the float64 reference of one (token, head), with the
// sum of |weights·v| per dimension as an error scale.
func refAttention(q, k, v []float32, t, h, start, H, KVH, Dh int, scale float64) (out, mag []float64) {
	p, kh := start+t, h/(H/KVH)
	s := make([]float64, p+1)
	m := math.Inf(-1)
	for j := range s {
		for d := range Dh {
			s[j] += float64(q[(t*H+h)*Dh+d]) * float64(k[(j*KVH+kh)*Dh+d])
		}
		s[j] *= scale
		m = max(m, s[j])
	}
	var sum float64
	for j := range s {
		s[j] = math.Exp(s[j] - m)
		sum += s[j]
	}
	out, mag = make([]float64, Dh), make([]float64, Dh)
	for j := range s {
		for d := range Dh {
			vv := float64(v[(j*KVH+kh)*Dh+d])
			out[d] += s[j] / sum * vv
			mag[d] += s[j] / sum * math.Abs(vv)
		}
	}
	return out, mag
}

func TestAttention(t *testing.T) {
	cases := []struct{ T, start, H, KVH, Dh int }{
		{1, 0, 4, 2, 64},   // first token
		{1, 37, 4, 1, 128}, // decode, MQA
		{7, 0, 8, 2, 64},   // prefill
		{5, 11, 6, 3, 20},  // prefill after a prefix; Dh with a tail
	}
	rng := rand.New(rand.NewPCG(11, 12))
	forEachISA(t, func(t *testing.T, ops *Ops) {
		for _, c := range cases {
			n := c.start + c.T
			q := randn(rng, c.T*c.H*c.Dh, 1)
			k, v := randn(rng, n*c.KVH*c.Dh, 1), randn(rng, n*c.KVH*c.Dh, 1)
			scale := float32(1 / math.Sqrt(float64(c.Dh)))
			out := make([]float32, c.T*c.H*c.Dh)
			ops.Attention(out, q, k, v, c.T, c.start, c.H, c.KVH, c.Dh, scale)
			for tt := range c.T {
				for h := range c.H {
					want, mag := refAttention(q, k, v, tt, h, c.start, c.H, c.KVH, c.Dh, float64(scale))
					for d := range c.Dh {
						got := float64(out[(tt*c.H+h)*c.Dh+d])
						if tol := 1e-5 * (mag[d] + 1e-3); math.Abs(got-want[d]) > tol {
							t.Fatalf("%+v: out[%d,%d,%d] = %g, want %g ± %g", c, tt, h, d, got, want[d], tol)
						}
					}
				}
			}
		}
	})
	ops := newOps(t, "", 1)
	wantPanic(t, "multiple of KVH", func() { ops.Attention(nil, nil, nil, nil, 1, 0, 3, 2, 4, 1) })
	wantPanic(t, "len(k)", func() {
		ops.Attention(make([]float32, 8), make([]float32, 8), make([]float32, 7), make([]float32, 8), 1, 1, 2, 1, 4, 1)
	})
}

func TestSiLUMul(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	const n = 1000
	g, u := randn(rng, n, 4), randn(rng, n, 1)
	g[0], g[1], g[2] = 100, -100, 0
	var first []float32
	forEachISA(t, func(t *testing.T, ops *Ops) {
		out := make([]float32, n)
		ops.SiLUMul(out, g, u, n)
		// Every path, tails included, gives the first path's bits.
		if first == nil {
			first = out
		}
		for i := range out {
			if math.Float32bits(out[i]) != math.Float32bits(first[i]) {
				t.Fatalf("SiLUMul(%g, %g) = %g on this path, %g on the first", g[i], u[i], out[i], first[i])
			}
		}
		for i := range n {
			gi := float64(g[i])
			want := gi / (1 + math.Exp(-gi)) * float64(u[i])
			// exp(100) overflows float32, so g = -100 gives 0, not a 1e-43 subnormal.
			if got := float64(out[i]); math.Abs(got-want) > ulpTol(want, 4)+1e-37 {
				t.Fatalf("SiLUMul(%g, %g) = %g, want %g", g[i], u[i], got, want)
			}
		}
		z := append([]float32(nil), g...)
		ops.SiLUMul(z, z, u, n)
		for i := range z {
			if z[i] != out[i] {
				t.Fatalf("aliased out = gate: out[%d] = %g, want %g", i, z[i], out[i])
			}
		}
	})
}

// TestExp checks the kernels' own exp (lb_exp, used by SiLUMul and
// attention) on every code path: within 2 ulp of float64's exp over a
// sweep of the float32 bit patterns of ±[0, 104) (every 251st), +Inf
// above 88.72283172607421875, 0 below -87.33654022216797 (where exp is under
// 2^-126), NaN for NaN; and the same bits on every path, vector lanes and
// scalar tails alike.
func TestExp(t *testing.T) {
	const hi, lo = float32(88.72283172607421875), float32(-87.33654022216797)
	var xs []float32
	for u := uint32(0); math.Float32frombits(u) < 104; u += 251 {
		xs = append(xs, math.Float32frombits(u), -math.Float32frombits(u))
	}
	xs = append(xs, 0, float32(math.Copysign(0, -1)), hi, math.Nextafter32(hi, 100), lo,
		math.Nextafter32(lo, -100), 1e-30, -1e-30, 1, -1, 0.5*float32(math.Ln2), float32(math.Inf(1)),
		float32(math.Inf(-1)), float32(math.NaN()), 1e30, -1e30)
	want := make([]float32, len(xs))
	expRun("generic", want, xs)
	for i, x := range xs {
		got := float64(want[i])
		switch {
		case x != x:
			if got == got {
				t.Fatalf("exp(NaN) = %g", got)
			}
		case x > hi:
			if !math.IsInf(got, 1) {
				t.Fatalf("exp(%g) = %g, want +Inf", x, got)
			}
		case x < lo:
			if got != 0 {
				t.Fatalf("exp(%g) = %g, want 0", x, got)
			}
		default:
			if e := math.Exp(float64(x)); math.Abs(got-e) > math.Max(ulpTol(e, 2), 0x1p-148) {
				t.Fatalf("exp(%g) = %g, want %g (%.2f ulp)", x, got, e, (got-e)/ulpTol(e, 1))
			}
		}
	}
	for _, isa := range ISAs() {
		// Lengths 1 and 15 put every input through the scalar tails too.
		for _, n := range []int{len(xs), 15, 1} {
			got := make([]float32, n)
			expRun(isa, got, xs[len(xs)-n:])
			for i := range got {
				w := want[len(xs)-n+i]
				if math.Float32bits(got[i]) != math.Float32bits(w) && !(got[i] != got[i] && w != w) {
					t.Fatalf("%s: exp(%g) = %g, generic gives %g", isa, xs[len(xs)-n+i], got[i], w)
				}
			}
		}
	}
}

func TestAdd(t *testing.T) {
	rng := rand.New(rand.NewPCG(15, 16))
	const n = 100003
	a, b := randn(rng, n, 1), randn(rng, n, 1)
	forEachISA(t, func(t *testing.T, ops *Ops) {
		out := make([]float32, n)
		ops.Add(out, a, b, n)
		for i := range n {
			if out[i] != a[i]+b[i] {
				t.Fatalf("Add: out[%d] = %g, want %g", i, out[i], a[i]+b[i])
			}
		}
	})
}

func TestLogSoftmax(t *testing.T) {
	const T, V = 3, 5003
	rng := rand.New(rand.NewPCG(17, 18))
	x := randn(rng, T*V, 5)
	forEachISA(t, func(t *testing.T, ops *Ops) {
		out := make([]float32, T*V)
		ops.LogSoftmax(out, x, T, V)
		for tt := range T {
			row := x[tt*V : (tt+1)*V]
			m := math.Inf(-1)
			for _, v := range row {
				m = max(m, float64(v))
			}
			var s float64
			for _, v := range row {
				s += math.Exp(float64(v) - m)
			}
			lse := m + math.Log(s)
			for i, v := range row {
				want := float64(v) - lse
				if got := float64(out[tt*V+i]); math.Abs(got-want) > ulpTol(math.Abs(want)+math.Abs(lse), 2) {
					t.Fatalf("out[%d,%d] = %g, want %g", tt, i, got, want)
				}
			}
		}
	})
}

// TestKVDecode: the attention's decode of a BF16 or E4M3 cache row, on every
// code path: every BF16 pattern to its value, and every E4M3 code times
// scales that round the product differently (1 exactly, others, one that
// makes products subnormal and one near float32's largest) to format's value
// times the scale in one float32 multiply; lengths with and without a tail.
func TestKVDecode(t *testing.T) {
	for _, isa := range ISAs() {
		t.Run(isa, func(t *testing.T) {
			bf := make([]byte, 2*65536)
			for c := range 65536 {
				bf[2*c], bf[2*c+1] = byte(c), byte(c>>8)
			}
			for _, n := range []int{65536, 65531} {
				got := make([]float32, n)
				kvDecode(isa, 1, got, bf, 1)
				for c := range n {
					if want := format.BF16ToFloat32(uint16(c)); !sameBits(got[c], want) {
						t.Fatalf("n %d: bf16 %#04x decodes to %g, want %g", n, c, got[c], want)
					}
				}
			}
			f8 := make([]byte, 256)
			for c := range f8 {
				f8[c] = byte(c)
			}
			for _, sc := range []float32{1, 0.37, 3.3e-3, 1e-40, 1.7e-38, 6.1e35, 3} {
				for _, n := range []int{256, 203} {
					got := make([]float32, n)
					kvDecode(isa, 2, got, f8, sc)
					for c := range n {
						if want := format.E4M3ToFloat32(uint8(c)) * sc; !sameBits(got[c], want) {
							t.Fatalf("n %d: e4m3 %#02x × %g decodes to %g, want %g", n, c, sc, got[c], want)
						}
					}
				}
			}
		})
	}
}
