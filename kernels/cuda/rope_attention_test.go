//go:build cgo

package cuda

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/lowbit-ai/lowbit/format"
	"github.com/lowbit-ai/lowbit/kernels"
)

// TestFlashDecodeRoPE: AttentionRoPETerms (q/k-norm with RoPE, the KV
// write and the decode attention in one launch) gives, byte for byte, the
// output, the o-projection's terms and the whole cache that QKNormRoPE
// followed by AttentionBatchTerms give, over a shuffled BF16 or FP8 cache:
// one token at a chunk's start, at position 256 and past one block's worth
// of chunks; many sequences' single tokens (several chunks a block); runs
// of 2 to 7 tokens (a tile each, some over a chunk's end); head dims 128
// and 64 (2 query heads a KV head: tiles of 8 tokens), RoPE over all dims
// or 64, with and without q/k norms, float32 and BF16 q. And it declines,
// launching nothing, where a run spans two tiles, a KV head has one query
// head, or the rotation is neither. Skips without a GPU.
func TestFlashDecodeRoPE(t *testing.T) {
	d := openOrSkip(t)
	defer func(on bool) { ropeInAttention = on }(ropeInAttention)
	ropeInAttention = true
	const bs, ctx, seqs, theta, eps = 16, 1000, 37, 1e6, 1e-6
	rng := rand.New(rand.NewPCG(8, 8))
	blocks := (ctx + bs - 1) / bs
	tables := make([]int32, seqs*blocks)
	for i, b := range rng.Perm(seqs * blocks) {
		tables[i] = int32(b)
	}
	normal := func(n int, mean, scale float64) []float32 {
		x := make([]float32, n)
		for i := range x {
			x[i] = float32(mean + scale*rng.NormFloat64())
		}
		return x
	}
	type batch struct {
		name     string
		seq, pos []int32
	}
	singles := batch{name: "37 sequences, a token each"}
	for s := range seqs {
		singles.seq, singles.pos = append(singles.seq, int32(s)), append(singles.pos, int32(ctx-1-27*s))
	}
	batches := []batch{{"position 0", []int32{0}, []int32{0}}, {"position 64", []int32{0}, []int32{64}},
		{"position 256", []int32{0}, []int32{256}}, {"position 700", []int32{0}, []int32{700}}, singles,
		{"runs of 2 to 4 tokens", []int32{0, 0, 1, 2, 2, 2, 2, 3, 3, 3}, []int32{62, 63, 500, 126, 127, 128, 129, 7, 8, 9}},
		{"a run of 7 tokens over a chunk's end", []int32{0, 0, 0, 0, 0, 0, 0, 1}, []int32{60, 61, 62, 63, 64, 65, 66, 300}}}
	for _, shape := range []struct{ H, KVH, Dh int }{{32, 8, 128}, {16, 8, 64}} {
		for _, dt := range []kernels.KVDType{kernels.KVBF16, kernels.KVFP8} {
			p := KVPool{DType: dt, KVHeads: shape.KVH, HeadDim: shape.Dh, BlockSize: bs, KScale: 1, VScale: 1}
			if dt == kernels.KVFP8 {
				p.KScale, p.VScale = 0.37, 1.7
			}
			cache := [2][]byte{randomCache(rng, dt, seqs*blocks*bs*shape.KVH*shape.Dh), randomCache(rng, dt, seqs*blocks*bs*shape.KVH*shape.Dh)}
			for _, bt := range batches {
				for _, c := range []struct {
					rot      int
					norm, q1 bool
					nt       int
					rotates  bool // a rotation the kernels take
				}{{shape.Dh, true, false, 3, true}, {shape.Dh, true, true, 1, true}, {64, false, true, 1, true}, {64, true, false, 1, true},
					{32, true, false, 3, false}} {
					H, KVH, Dh, T := shape.H, shape.KVH, shape.Dh, len(bt.seq)
					// A tile holds 16 / (H / KVH) tokens: a longer run declines.
					wantFused := c.rotates && PlanAttention(bt.seq, bt.pos, H, &p, ctx).OwnRuns
					name := fmt.Sprintf("Dh %d, %v cache, %s, rot %d, norm %v, BF16 q %v", Dh, dt, bt.name, c.rot, c.norm, c.q1)
					q, kk, v := normal(T*H*Dh, 0, 1.5), normal(T*KVH*Dh, 0, 1.5), normal(T*KVH*Dh, 0, 1.5)
					qw, kw := normal(Dh, 1, 0.3), normal(Dh, 1, 0.3)
					bf16 := 0
					if c.q1 {
						bf16 = T
					}
					// run returns the attention's output, its terms and the
					// cache, fused (one launch) or as QKNormRoPE then
					// AttentionBatchTerms, and whether it fused.
					run := func(fuse bool) (out, terms, kc, vc []byte, fused bool) {
						err := d.Run(func(k *K) error {
							b := &Batch{Stride: blocks, Plan: PlanAttentionBF16(bt.seq, bt.pos, H, &p, ctx, bf16)}
							var in [5]Buf
							for i, a := range []struct {
								dst *Buf
								src []byte
							}{{&b.Tables, asBytes(tables, len(tables))}, {&b.Seq, asBytes(bt.seq, T)}, {&b.Pos, asBytes(bt.pos, T)},
								{&b.PartOff, asBytes(b.Plan.PartOff, T)}, {&b.Work, asBytes(b.Plan.Work, len(b.Plan.Work))},
								{&in[0], asBytes(q, len(q))}, {&in[1], asBytes(kk, len(kk))}, {&in[2], asBytes(v, len(v))},
								{&in[3], asBytes(qw, Dh)}, {&in[4], asBytes(kw, Dh)}} {
								var err error
								if *a.dst, err = k.Upload(a.src); err != nil {
									return fmt.Errorf("upload %d: %w", i, err)
								}
							}
							pool := p
							var err error
							if pool.K, err = k.Upload(cache[0]); err != nil {
								return err
							}
							if pool.V, err = k.Upload(cache[1]); err != nil {
								return err
							}
							att, err := k.Scratch(4 * len(q))
							if err != nil {
								return err
							}
							tm, err := k.termsFor(T, H*Dh, c.nt)
							if err != nil {
								return err
							}
							if err := k.UploadTo(tm.buf, make([]byte, tm.buf.bytes)); err != nil {
								return err
							}
							r := QKRoPE{K: in[1], V: in[2], QNorm: in[3], KNorm: in[4], QKNorm: c.norm, Eps: eps, Rot: c.rot, Theta: theta}
							if fuse {
								if fused, err = k.AttentionRoPETerms(att, &tm, in[0], &r, &pool, b, T, H, 0.088); err != nil || !fused {
									return err
								}
							} else {
								if err := k.QKNormRoPE(in[0], in[1], in[2], in[3], in[4], c.norm, eps, &pool, b, T, H, c.rot, theta); err != nil {
									return err
								}
								if f, err := k.AttentionBatchTerms(att, &tm, in[0], &pool, b, T, H, 0.088); err != nil || !f {
									return fmt.Errorf("AttentionBatchTerms did not fuse (%v)", err)
								}
							}
							out, terms, kc, vc = make([]byte, att.bytes), make([]byte, tm.buf.bytes), make([]byte, len(cache[0])), make([]byte, len(cache[1]))
							for _, o := range []struct {
								dst []byte
								src Buf
							}{{out, att}, {terms, tm.buf}, {kc, pool.K}, {vc, pool.V}} {
								if err := k.Download(o.dst, o.src); err != nil {
									return err
								}
							}
							return nil
						})
						if err != nil {
							t.Fatalf("%s: %v", name, err)
						}
						return
					}
					out, terms, kc, vc, fused := run(true)
					if fused != wantFused {
						t.Errorf("%s: fused %v, want %v", name, fused, wantFused)
						continue
					}
					if !fused {
						continue
					}
					wout, wterms, wkc, wvc, _ := run(false)
					for i, pair := range [][2][]byte{{out, wout}, {terms, wterms}, {kc, wkc}, {vc, wvc}} {
						if !bytes.Equal(pair[0], pair[1]) {
							t.Errorf("%s: the fused %s differs from the two launches' (%s)", name, []string{"output", "terms", "k cache", "v cache"}[i], firstDiff(pair[0], pair[1]))
						}
					}
				}
			}
		}
	}
	// A run of 5 tokens spans two tiles of 4; a query head a KV head
	// leaves 16 tokens a tile: declined.
	t.Run("declines", func(t *testing.T) {
		for _, c := range []struct {
			name     string
			H        int
			seq, pos []int32
		}{{"a run over two tiles", 32, []int32{0, 0, 0, 0, 0}, []int32{10, 11, 12, 13, 14}}, {"no query groups", 8, []int32{0}, []int32{10}}} {
			p := KVPool{DType: kernels.KVBF16, KVHeads: 8, HeadDim: 128, BlockSize: bs, KScale: 1, VScale: 1}
			T := len(c.seq)
			err := d.Run(func(k *K) error {
				b := &Batch{Stride: blocks, Plan: PlanAttention(c.seq, c.pos, c.H, &p, ctx)}
				tm, err := k.termsFor(T, c.H*128, 3)
				if err != nil {
					return err
				}
				fused, err := k.AttentionRoPETerms(Buf{}, &tm, Buf{}, &QKRoPE{Rot: 128}, &p, b, T, c.H, 0.088)
				if fused || err != nil {
					return fmt.Errorf("%s: fused %v (%v), want a decline", c.name, fused, err)
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
		}
	})
}

// randomCache is n random elements of a cache of type dt: BF16 normals, or
// E4M3 codes other than NaN.
func randomCache(rng *rand.Rand, dt kernels.KVDType, n int) []byte {
	var b []byte
	for range n {
		if dt == kernels.KVFP8 {
			c := byte(rng.IntN(256))
			if c&0x7F == 0x7F {
				c--
			}
			b = append(b, c)
		} else {
			b = binary.LittleEndian.AppendUint16(b, format.BF16FromFloat32(float32(rng.NormFloat64())))
		}
	}
	return b
}
