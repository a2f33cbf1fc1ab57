//go:build cgo

package cuda

import (
	"bytes"
	"math/rand/v2"
	"slices"
	"testing"
	"unsafe"

	"github.com/lowbit-ai/lowbit/format"
	"github.com/lowbit-ai/lowbit/kernels"
	"github.com/lowbit-ai/lowbit/kernels/kerneltest"
)

// TestPlanAttention: which kernels a batch's attention takes and the
// arrays they read. Runs without a GPU.
func TestPlanAttention(t *testing.T) {
	pool := func(kvh, dh int) *KVPool {
		return &KVPool{DType: kernels.KVBF16, KVHeads: kvh, HeadDim: dh, BlockSize: 16}
	}
	positions := func(start, n int) []int32 {
		p := make([]int32, n)
		for i := range p {
			p[i] = int32(start + i)
		}
		return p
	}
	t.Run("decode", func(t *testing.T) {
		// Three sequences, one token each: split, a block a token, Z from
		// the tables' reach, partials a prefix sum of p/64 + 1.
		pl := PlanAttention([]int32{0, 1, 2}, []int32{0, 64, 200}, 32, pool(8, 128), 1024)
		if !pl.Flash || !pl.Split || pl.Warps != 1 || pl.Z != 16 {
			t.Fatalf("plan %+v, want flash, split, 1 warp, Z 16", pl)
		}
		if !slices.Equal(pl.Work, []int32{0, 1, 1, 1, 2, 1}) || !slices.Equal(pl.PartOff, []int32{0, 1, 3}) || pl.Parts != 7 {
			t.Fatalf("work %v, partOff %v, parts %d", pl.Work, pl.PartOff, pl.Parts)
		}
	})
	t.Run("prefill", func(t *testing.T) {
		// 150 tokens of one sequence, then 3 of another, then 2 that jump
		// a position: whole, blocks of 4 warps x 16/G tokens that never
		// cross a sequence or a gap.
		seq := append(slices.Repeat([]int32{0}, 150), 1, 1, 1, 2, 2)
		pos := append(append(positions(0, 150), positions(10, 3)...), 5, 7)
		pl := PlanAttention(seq, pos, 32, pool(8, 128), 4096)
		if !pl.Flash || pl.Split || pl.Warps != 4 || pl.Parts != 0 {
			t.Fatalf("plan %+v, want flash, whole, 4 warps, no partials", pl)
		}
		var want []int32
		for t := 0; t < 150; t += 16 {
			want = append(want, int32(t), int32(min(16, 150-t)))
		}
		want = append(want, 150, 3, 153, 1, 154, 1)
		if !slices.Equal(pl.Work, want) {
			t.Fatalf("work %v, want %v", pl.Work, want)
		}
	})
	t.Run("bf16 rows", func(t *testing.T) {
		// One sequence's 38 prompt rows (BF16) then its 5 generated rows
		// (split mode: a warp a block, 4 tokens of G = 4 heads): the run
		// breaks at 38, the BF16 blocks come first.
		seq := make([]int32, 43)
		pl := PlanAttentionBF16(seq, positions(0, 43), 32, pool(8, 128), 4096, 38)
		var want []int32
		for t := 0; t < 38; t += 4 {
			want = append(want, int32(t), int32(min(4, 38-t)))
		}
		want = append(want, 38, 4, 42, 1)
		if !slices.Equal(pl.Work, want) || pl.BF16Work != 10 {
			t.Fatalf("work %v with %d BF16 blocks, want %v with 10", pl.Work, pl.BF16Work, want)
		}
	})
	t.Run("bf16 prefill", func(t *testing.T) {
		// 300 rows, the first 200 BF16 (whole mode): BF16 blocks of 2
		// m-tiles a warp (32 tokens; attention_mma_prefill.cu), then 16.
		seq := make([]int32, 300)
		pl := PlanAttentionBF16(seq, positions(0, 300), 32, pool(8, 128), 4096, 200)
		var want []int32
		for t := 0; t < 200; t += 32 {
			want = append(want, int32(t), int32(min(32, 200-t)))
		}
		for t := 200; t < 300; t += 16 {
			want = append(want, int32(t), int32(min(16, 300-t)))
		}
		if pl.Split || !slices.Equal(pl.Work, want) || pl.BF16Work != 7 {
			t.Fatalf("work %v with %d BF16 blocks, want %v with 7", pl.Work, pl.BF16Work, want)
		}
	})
	t.Run("partials bound", func(t *testing.T) {
		// 128 decode tokens at 40k positions would need 1.3 GB of
		// partials: they run whole.
		seq, pos := make([]int32, 128), make([]int32, 128)
		for i := range seq {
			seq[i], pos[i] = int32(i), 40000
		}
		pl := PlanAttention(seq, pos, 32, pool(8, 128), 40960)
		if !pl.Flash || pl.Split || pl.Parts != 0 {
			t.Fatalf("plan split %v with %d partials, want whole", pl.Split, pl.Parts)
		}
	})
	t.Run("fallback", func(t *testing.T) {
		// Head dim 256 or a group of 3 query heads: attention.cu's kernels.
		for _, c := range []struct{ H, kvh, dh int }{{32, 8, 256}, {12, 4, 128}} {
			pl := PlanAttention([]int32{0}, []int32{100}, c.H, pool(c.kvh, c.dh), 128)
			if pl.Flash || pl.Parts != 100/attChunk(100)+1 {
				t.Errorf("H %d, KVH %d, Dh %d: plan %+v, want attention.cu's", c.H, c.kvh, c.dh, pl)
			}
		}
	})
}

// TestFlashVariants: the _p kernels (the next chunk's copy in flight while
// this one is multiplied), attention_mma_decode.cu's split kernels (four
// warps a chunk) and attention_mma_prefill.cu's (two m-tiles a warp) pass the suite's attention cases and give the one-warp
// kernels' bits on the Qwen3-8B head shape, for prefill and decode, float32
// and BF16 q, one sequence or many, over shuffled block tables.
func TestFlashVariants(t *testing.T) {
	d := openOrSkip(t)
	defer func(p, dec, pre bool) { flashPipelined, flashDecode, flashPrefill = p, dec, pre }(flashPipelined, flashDecode, flashPrefill)
	variants := []struct {
		name                      string
		pipelined, wide, twoTiles bool
	}{{"pipelined", true, false, false}, {"decode and prefill", false, true, true}}
	for _, v := range variants {
		flashPipelined, flashDecode, flashPrefill = v.pipelined, v.wide, v.twoTiles
		for _, f := range kerneltest.Check(NewOps(d), kerneltest.OpAttention, kerneltest.OpPagedAttention) {
			t.Errorf("%s: %v", v.name, f)
		}
	}
	const H, KVH, Dh, bs, ctx, seqs = 32, 8, 128, 16, 1000, 37
	rng := rand.New(rand.NewPCG(3, 3))
	p := &KVPool{DType: kernels.KVBF16, KVHeads: KVH, HeadDim: Dh, BlockSize: bs, KScale: 1, VScale: 1}
	blocks := (ctx + bs - 1) / bs
	kv := make([]uint16, seqs*blocks*bs*KVH*Dh)
	var err error
	for _, dst := range []*Buf{&p.K, &p.V} {
		for i := range kv {
			kv[i] = format.BF16FromFloat32(float32(rng.NormFloat64()))
		}
		if *dst, err = d.Alloc(2 * len(kv)); err != nil {
			t.Fatal(err)
		}
		defer d.Free(*dst)
		if err := d.Upload(*dst, unsafe.Slice((*byte)(unsafe.Pointer(&kv[0])), 2*len(kv))); err != nil {
			t.Fatal(err)
		}
	}
	tables := make([]int32, seqs*blocks)
	for i, b := range rng.Perm(seqs * blocks) {
		tables[i] = int32(b)
	}
	// T tokens of one sequence at the end of its context, or (many) one
	// token of each of seqs sequences at positions spread over the context.
	for _, c := range []struct {
		T, bf16 int
		many    bool
	}{{1, 0, false}, {3, 0, false}, {100, 0, false}, {300, 0, false}, {300, 200, false}, {100, 100, false},
		{999, 999, false}, {700, 533, false}, {seqs, 0, true}, {seqs, seqs, true}} {
		seq, pos := make([]int32, c.T), make([]int32, c.T)
		for i := range pos {
			pos[i] = int32(ctx - c.T + i)
			if c.many {
				seq[i], pos[i] = int32(i), int32(ctx-1-27*i)
			}
		}
		q := make([]float32, c.T*H*Dh)
		for i := range q {
			q[i] = float32(rng.NormFloat64())
		}
		run := func() []byte {
			var got []byte
			err := d.Run(func(k *K) error {
				b := &Batch{Stride: blocks, Plan: PlanAttentionBF16(seq, pos, H, p, ctx, c.bf16)}
				for _, a := range []struct {
					dst *Buf
					src []int32
				}{{&b.Tables, tables}, {&b.Seq, seq}, {&b.Pos, pos}, {&b.PartOff, b.Plan.PartOff}, {&b.Work, b.Plan.Work}} {
					var err error
					if *a.dst, err = k.Upload(asBytes(a.src, len(a.src))); err != nil {
						return err
					}
				}
				qd, err := k.Upload(asBytes(q, len(q)))
				if err != nil {
					return err
				}
				out, err := k.Scratch(4 * len(q))
				if err != nil {
					return err
				}
				if err := k.AttentionBatch(out, qd, p, b, c.T, H, 0.088); err != nil {
					return err
				}
				got = make([]byte, 4*len(q))
				return k.Download(got, out)
			})
			if err != nil {
				t.Fatal(err)
			}
			return got
		}
		flashPipelined, flashDecode, flashPrefill = false, false, false
		want := run()
		for _, v := range variants {
			flashPipelined, flashDecode, flashPrefill = v.pipelined, v.wide, v.twoTiles
			if got := run(); !bytes.Equal(got, want) {
				t.Errorf("%s: T=%d (%d BF16 rows, many sequences %v): output differs from the one-warp kernels'", v.name, c.T, c.bf16, c.many)
			}
		}
	}
}
