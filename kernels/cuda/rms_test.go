//go:build cgo

package cuda

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// rmsTileRef is common.cuh's rms_tile in plain Go: the 16 squares added
// as a balanced pairwise tree, neighbours first. (Each float32(·) rounds,
// so that no multiply-add is fused.)
func rmsTileRef(v []float32) float32 {
	var a [8]float32
	for i := range a {
		a[i] = float32(v[2*i]*v[2*i]) + float32(v[2*i+1]*v[2*i+1])
	}
	for w := 4; w > 0; w >>= 1 {
		for i := range w {
			a[i] = a[2*i] + a[2*i+1]
		}
	}
	return a[0]
}

// rmsTilesRef returns a row's RMS tile sums (zeros past the row).
func rmsTilesRef(x []float32) []float32 {
	tiles := make([]float32, (len(x)+15)/16)
	for m := range tiles {
		var v [16]float32
		copy(v[:], x[16*m:min(len(x), 16*m+16)])
		tiles[m] = rmsTileRef(v[:])
	}
	return tiles
}

// rmsScaleRef is the RMS order's 1 / rms of a row in plain Go: lane l of a
// warp adds tiles l, l + 32, ... from 0, a butterfly adds the lanes
// (warp_sum), then 1 / sqrt(s / D + eps), each step rounded to float32.
func rmsScaleRef(x []float32, eps float32) float32 {
	var lanes [32]float32
	for m, s := range rmsTilesRef(x) {
		lanes[m%32] += s
	}
	for o := 16; o > 0; o >>= 1 {
		var next [32]float32
		for l := range lanes {
			next[l] = lanes[l] + lanes[l^o]
		}
		lanes = next
	}
	mean := lanes[0]/float32(len(x)) + eps
	return 1 / float32(math.Sqrt(float64(mean)))
}

// rmsNormRef is RMSNorm of the rows of x [T, D] in plain Go, in the RMS
// order: the bits every norm kernel must give.
func rmsNormRef(x, w []float32, D int, eps float32, zeroCentered bool) []float32 {
	y := make([]float32, len(x))
	for t := 0; t < len(x)/D; t++ {
		row := x[t*D : (t+1)*D]
		r := rmsScaleRef(row, eps)
		for i, v := range row {
			g := w[i]
			if zeroCentered {
				g = 1 + w[i]
			}
			y[t*D+i] = float32(v*r) * g
		}
	}
	return y
}

func floatsOf(b []byte) []float32 {
	v := make([]float32, len(b)/4)
	for i := range v {
		v[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return v
}

// TestRMSOrder: RMSNorm and AddRMSNorm (lb_rmsnorm, lb_add_rmsnorm) give
// the plain Go RMS order's values bit for bit, for widths below, at and
// off the 16-column tiles and the 32 lanes' rounds, with and without a
// zero-centred gain. Rows of mixed magnitudes, so that a different order
// of the sum would show. Skips without a GPU.
func TestRMSOrder(t *testing.T) {
	d := openOrSkip(t)
	rng := rand.New(rand.NewPCG(41, 43))
	const T = 3
	for _, D := range []int{1, 16, 33, 1000, 4096, 5120} {
		for _, zc := range []bool{false, true} {
			x, h, w := make([]float32, T*D), make([]float32, T*D), make([]float32, D)
			for i := range x {
				x[i] = float32(rng.NormFloat64() * math.Exp2(float64(rng.IntN(9)-4)))
				h[i] = float32(rng.NormFloat64())
			}
			for i := range w {
				w[i] = float32(rng.NormFloat64() * 0.1)
			}
			sum := make([]float32, len(x))
			for i := range x {
				sum[i] = x[i] + h[i]
			}
			const eps = 1e-6
			xd, hd, wd := upload32(t, d, x), upload32(t, d, h), upload32(t, d, w)
			y, y2 := upload32(t, d, make([]float32, T*D)), upload32(t, d, make([]float32, T*D))
			err := d.Run(func(k *K) error {
				if err := k.RMSNorm(y, xd, wd, T, D, eps, zc); err != nil {
					return err
				}
				return k.AddRMSNorm(xd, hd, y2, wd, T, D, eps, zc)
			})
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range []struct {
				name string
				got  Buf
				want []float32
			}{{"RMSNorm", y, rmsNormRef(x, w, D, eps, zc)}, {"AddRMSNorm", y2, rmsNormRef(sum, w, D, eps, zc)}} {
				b := make([]byte, 4*T*D)
				if err := d.Download(b, c.got); err != nil {
					t.Fatal(err)
				}
				if got := floatsOf(b); !sameFloats(got, c.want) {
					i := firstFloatDiff(got, c.want)
					t.Errorf("%s, width %d, zero-centred %v: [%d] = %g, want %g (the RMS order)", c.name, D, zc, i, got[i], c.want[i])
				}
			}
		}
	}
}

// TestRMSInGemv: a decode step's input norm inside the q/k/v GEMV gives
// the bits of the norm launch. MatMulTermsAdd with sums (the down
// projection) writes the residual the plain one writes and its RMS tile
// sums as rms_tile in Go computes them; then MatMulRMS (one to three
// weights) on that residual gives, byte for byte, RMSNormTerms into BF16
// terms followed by MatMulTerms. For 1 and 2 tokens; widths of whole spans
// and of a short last span (800: 50 chunks); the fused kernel runs right
// behind lb_spin, as behind a decode step's down projection, so that every
// early copy has landed before its release. Skips without a GPU.
func TestRMSInGemv(t *testing.T) {
	d := openOrSkip(t)
	rng := rand.New(rand.NewPCG(47, 53))
	for _, c := range []struct {
		T, D, inO int
		qkv       []int
		zc        bool
	}{
		{1, 4096, 12288, []int{4096, 1024, 1024}, false},
		{2, 1024, 3072, []int{2048, 1024, 1024}, false},
		{1, 800, 272, []int{200, 72}, true},
		{2, 800, 1040, []int{64}, false},
	} {
		name := fmt.Sprintf("%d tokens, width %d", c.T, c.D)
		wo, _ := gemvWeights(t, d, rng, []int{c.D}, c.inO, 0)
		ws, ys := gemvWeights(t, d, rng, c.qkv, c.D, 0)
		xo := normalBuf(t, d, rng, c.T*c.inO, 1)
		resid0 := make([]byte, 4*c.T*c.D)
		for i := 0; i < c.T*c.D; i++ {
			binary.LittleEndian.PutUint32(resid0[4*i:], math.Float32bits(float32(rng.NormFloat64()*2)))
		}
		gain := normalBuf(t, d, rng, c.D, 1)
		resid, err := d.Alloc(len(resid0))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Free(resid) })
		download := func(b Buf, n int) []byte {
			out := make([]byte, n)
			if err := d.Download(out, b.Slice(0, n)); err != nil {
				t.Fatal(err)
			}
			return out
		}
		// path runs the down projection into the residual, then the norm
		// and the GEMV after it, fused or not; it returns the new residual,
		// the sums (fused) and the q/k/v outputs.
		path := func(fused bool) (res, sums []byte, outs [][]byte) {
			if err := d.Upload(resid, resid0); err != nil {
				t.Fatal(err)
			}
			var sb Buf
			outs = poisonedRun(t, d, ys, func(k *K) error {
				tm, err := k.TermsBF16For(c.T, c.inO)
				if err != nil {
					return err
				}
				if err := k.Split(tm, xo); err != nil {
					return err
				}
				if fused {
					if sb, err = k.RMSSumsFor(c.T, c.D); err != nil {
						return err
					}
					if err := k.Poison(sb); err != nil {
						return err
					}
				}
				if added, err := k.MatMulTermsAdd(tm, resid, wo[0], sb); !added || err != nil {
					return fmt.Errorf("MatMulTermsAdd ran %v: %v", added, err)
				}
				if fused {
					if err := spinBefore(k); err != nil {
						return err
					}
					in := RMSInput{X: resid, Sums: sb, W: gain, T: c.T, D: c.D, Eps: 1e-6, ZeroCentered: c.zc}
					if ok, err := k.MatMulRMS(in, ys, ws); !ok || err != nil {
						return fmt.Errorf("MatMulRMS ran %v: %v", ok, err)
					}
					return nil
				}
				tn, err := k.TermsBF16For(c.T, c.D)
				if err != nil {
					return err
				}
				if err := k.RMSNormTerms(resid, tn, gain, c.D, 1e-6, c.zc); err != nil {
					return err
				}
				return k.MatMulTerms(tn, ys, ws)
			})
			res = download(resid, len(resid0))
			if fused {
				sums = download(sb, 4*c.T*(c.D/16))
			}
			return res, sums, outs
		}
		wantRes, _, wantOuts := path(false)
		res, sums, outs := path(true)
		if !bytes.Equal(res, wantRes) {
			t.Errorf("%s: the residual with sums differs from without (%s)", name, firstDiff(res, wantRes))
		}
		got := floatsOf(sums)
		for tk := range c.T {
			want := rmsTilesRef(floatsOf(res)[tk*c.D : (tk+1)*c.D])
			if row := got[tk*len(want) : (tk+1)*len(want)]; !sameFloats(row, want) {
				i := firstFloatDiff(row, want)
				t.Errorf("%s: token %d's tile sum %d = %g, want %g (rms_tile in Go)", name, tk, i, row[i], want[i])
			}
		}
		for i := range ys {
			n := 4 * c.T * c.qkv[i]
			if !bytes.Equal(outs[i][:n], wantOuts[i][:n]) {
				t.Errorf("%s: MatMulRMS output %d differs from RMSNormTerms then MatMulTerms (%s)", name, i, firstDiff(outs[i][:n], wantOuts[i][:n]))
			}
		}
	}
	// Three tokens: the fused kernel declines.
	ws, ys := gemvWeights(t, d, rng, []int{32}, 64, 0)
	x := normalBuf(t, d, rng, 3*64, 1)
	err := d.Run(func(k *K) error {
		sb, err := k.RMSSumsFor(3, 64)
		if err != nil {
			return err
		}
		in := RMSInput{X: x, Sums: sb, W: x, T: 3, D: 64, Eps: 1e-6}
		if ok, err := k.MatMulRMS(in, ys, ws); ok || err != nil {
			return fmt.Errorf("3 tokens: MatMulRMS ran %v, %v; want it to decline", ok, err)
		}
		return nil
	})
	if err != nil {
		t.Error(err)
	}
}

// upload32 uploads v, freed when the test ends.
func upload32(t *testing.T, d *Device, v []float32) Buf {
	t.Helper()
	b, err := d.Alloc(4 * len(v))
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Upload(b, asBytes(v, len(v))); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Free(b) })
	return b
}

func sameFloats(a, b []float32) bool { return firstFloatDiff(a, b) < 0 }

// firstFloatDiff returns the first index where a and b differ in bits, or
// -1.
func firstFloatDiff(a, b []float32) int {
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return i
		}
	}
	return -1
}
