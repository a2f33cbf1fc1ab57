//go:build cgo

package cuda

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/lowbit-ai/lowbit/format"
	"github.com/lowbit-ai/lowbit/kernels"
)

// TestQKNormRoPE: QKNormRoPE's q and k against a float64 RMSNorm and NeoX
// rotation at the batch's positions (|Δ| ≤ 1e-5·max(1, |want|): a few
// float32 roundings of values up to about 5), its cache rows the rotated k
// and the v as given (exact for a float32 cache, BF16-rounded for a BF16
// one), and, where lb_qk_norm_rope_w takes the shape, the same bytes from
// it and from lb_qk_norm_rope. Head shapes of both kernels and of the
// block kernel alone, with and without q/k norms, two sequences in a paged
// cache. Skips without a GPU.
func TestQKNormRoPE(t *testing.T) {
	d := openOrSkip(t)
	defer func(w bool) { qkNormRoPEByWarp = w }(qkNormRoPEByWarp)
	const H, KVH, bs, stride, theta = 4, 2, 4, 32, 1e6
	seq := []int32{0, 0, 0, 0, 1, 1, 1}
	pos := []int32{0, 1, 2, 3, 100, 101, 102}
	T := len(seq)
	rng := rand.New(rand.NewPCG(5, 5))
	tables := make([]int32, 2*stride)
	for i, b := range rng.Perm(2 * stride) {
		tables[i] = int32(b)
	}
	for _, c := range []struct{ Dh, rot int }{{128, 128}, {64, 64}, {256, 64}, {64, 32}, {96, 96}} {
		for _, norm := range []bool{true, false} {
			for _, dt := range []kernels.KVDType{kernels.KVFloat32, kernels.KVBF16} {
				Dh, rot := c.Dh, c.rot
				normal := func(n int, scale float64) []float32 {
					x := make([]float32, n)
					for i := range x {
						x[i] = float32(1 + scale*rng.NormFloat64())
					}
					return x
				}
				q, kk, v := normal(T*H*Dh, 2), normal(T*KVH*Dh, 2), normal(T*KVH*Dh, 2)
				qw, kw := normal(Dh, 0.3), normal(Dh, 0.3)
				elem := 4
				if dt == kernels.KVBF16 {
					elem = 2
				}
				poolBytes := 2 * stride * bs * KVH * Dh * elem
				run := func(byWarp bool) (gq, gk, kc, vc []byte) {
					qkNormRoPEByWarp = byWarp
					err := d.Run(func(k *K) error {
						var bufs [8]Buf
						for i, src := range [][]float32{q, kk, v, qw, kw} {
							var err error
							if bufs[i], err = k.Upload(asBytes(src, len(src))); err != nil {
								return err
							}
						}
						b := &Batch{Stride: stride}
						for _, a := range []struct {
							dst *Buf
							src []int32
						}{{&b.Tables, tables}, {&b.Seq, seq}, {&b.Pos, pos}} {
							var err error
							if *a.dst, err = k.Upload(asBytes(a.src, len(a.src))); err != nil {
								return err
							}
						}
						p := &KVPool{DType: dt, KVHeads: KVH, HeadDim: Dh, BlockSize: bs, KScale: 1, VScale: 1}
						var err error
						if p.K, err = k.Upload(make([]byte, poolBytes)); err != nil {
							return err
						}
						if p.V, err = k.Upload(make([]byte, poolBytes)); err != nil {
							return err
						}
						if err := k.QKNormRoPE(bufs[0], bufs[1], bufs[2], bufs[3], bufs[4], norm, 1e-6, p, b, T, H, rot, theta); err != nil {
							return err
						}
						gq, gk, kc, vc = make([]byte, 4*len(q)), make([]byte, 4*len(kk)), make([]byte, poolBytes), make([]byte, poolBytes)
						for _, o := range []struct {
							dst []byte
							src Buf
						}{{gq, bufs[0]}, {gk, bufs[1]}, {kc, p.K}, {vc, p.V}} {
							if err := k.Download(o.dst, o.src); err != nil {
								return err
							}
						}
						return nil
					})
					if err != nil {
						t.Fatal(err)
					}
					return
				}
				name := func() string { return fmt.Sprintf("Dh %d, rot %d, norm %v, %v cache", Dh, rot, norm, dt) }
				gq, gk, kc, vc := run(false)
				if qkNormRoPEWarpFits(Dh, rot) {
					wq, wk, wkc, wvc := run(true)
					for i, pair := range [][2][]byte{{gq, wq}, {gk, wk}, {kc, wkc}, {vc, wvc}} {
						if !bytes.Equal(pair[0], pair[1]) {
							t.Errorf("%s: lb_qk_norm_rope_w's %s differs from lb_qk_norm_rope's", name(), []string{"q", "k", "k cache", "v cache"}[i])
						}
					}
				}
				outQ, outK := fromBytes(gq), fromBytes(gk)
				for t0 := range T {
					for h := range H + KVH {
						var src, w, out []float32
						if h < H {
							off := (t0*H + h) * Dh
							src, w, out = q[off:], qw, outQ[off:]
						} else {
							off := (t0*KVH + h - H) * Dh
							src, w, out = kk[off:], kw, outK[off:]
						}
						want := normRoPE64(src[:Dh], w, norm, 1e-6, float64(pos[t0]), rot, theta)
						for j := range Dh {
							if diff := math.Abs(float64(out[j]) - want[j]); diff > 1e-5*max(1, math.Abs(want[j])) {
								t.Fatalf("%s: token %d head %d element %d: %v, want %v", name(), t0, h, j, out[j], want[j])
							}
						}
					}
					// The cache row of the token's position holds k and v.
					row := int(tables[int(seq[t0])*stride+int(pos[t0])/bs])*bs + int(pos[t0])%bs
					for e := range KVH * Dh {
						for i, pair := range [][2]float32{{outK[t0*KVH*Dh+e], cacheAt(kc, dt, row*KVH*Dh+e)}, {v[t0*KVH*Dh+e], cacheAt(vc, dt, row*KVH*Dh+e)}} {
							want := pair[0]
							if dt == kernels.KVBF16 {
								want = format.BF16ToFloat32(format.BF16FromFloat32(want))
							}
							if math.Float32bits(pair[1]) != math.Float32bits(want) {
								t.Fatalf("%s: token %d: %s cache element %d is %v, want %v", name(), t0, []string{"k", "v"}[i], e, pair[1], want)
							}
						}
					}
				}
			}
		}
	}
}

// normRoPE64 is a head's RMSNorm (when norm) and NeoX rotation of its first
// rot elements at position p, in float64 from the float32 cos and sin
// lb_rope_table keeps.
func normRoPE64(x, w []float32, norm bool, eps, p float64, rot int, theta float64) []float64 {
	y := make([]float64, len(x))
	var ss float64
	for _, v := range x {
		ss += float64(v) * float64(v)
	}
	r := 1 / math.Sqrt(ss/float64(len(x))+eps)
	for i, v := range x {
		y[i] = float64(v)
		if norm {
			y[i] *= r * float64(w[i])
		}
	}
	out := append([]float64(nil), y...)
	half := rot / 2
	for j := range half {
		a := p * math.Pow(theta, -2*float64(j)/float64(rot))
		c, s := float64(float32(math.Cos(a))), float64(float32(math.Sin(a)))
		out[j] = y[j]*c - y[j+half]*s
		out[j+half] = y[j+half]*c + y[j]*s
	}
	return out
}

// cacheAt is element i of a float32 or BF16 cache's bytes.
func cacheAt(b []byte, dt kernels.KVDType, i int) float32 {
	if dt == kernels.KVBF16 {
		return format.BF16ToFloat32(binary.LittleEndian.Uint16(b[2*i:]))
	}
	return math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
}

// fromBytes reads little-endian float32s.
func fromBytes(b []byte) []float32 {
	f := make([]float32, len(b)/4)
	for i := range f {
		f[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return f
}
