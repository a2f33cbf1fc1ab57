//go:build cgo

package cuda

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

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
		if !pl.Flash || !pl.Split || pl.Whole != 0 || pl.Z != 16 {
			t.Fatalf("plan %+v, want flash, all split, Z 16", pl)
		}
		if !slices.Equal(pl.Work, []int32{0, 1, 1, 1, 2, 1}) || !slices.Equal(pl.PartOff, []int32{0, 1, 3}) || pl.Parts != 7 {
			t.Fatalf("work %v, partOff %v, parts %d", pl.Work, pl.PartOff, pl.Parts)
		}
	})
	t.Run("prefill", func(t *testing.T) {
		// 150 tokens of one sequence, then 3 of another, then 2 that jump
		// a position: the long run whole, in blocks of 4 warps x 16/G
		// tokens; the runs that fit a tile (4 tokens) split, one tile each
		// (a block never crosses a sequence or a gap), with partials.
		seq := append(slices.Repeat([]int32{0}, 150), 1, 1, 1, 2, 2)
		pos := append(append(positions(0, 150), positions(10, 3)...), 5, 7)
		pl := PlanAttention(seq, pos, 32, pool(8, 128), 4096)
		if !pl.Flash || !pl.Split || pl.Warps != 4 || pl.Whole != 10 || pl.Parts != 5 {
			t.Fatalf("plan %+v, want flash, 10 whole blocks of 4 warps, 5 partials", pl)
		}
		var want []int32
		for t := 0; t < 150; t += 16 {
			want = append(want, int32(t), int32(min(16, 150-t)))
		}
		want = append(want, 150, 3, 153, 1, 154, 1)
		if !slices.Equal(pl.Work, want) {
			t.Fatalf("work %v, want %v", pl.Work, want)
		}
		wantOff := append(slices.Repeat([]int32{-1}, 150), 0, 1, 2, 3, 4)
		if !slices.Equal(pl.PartOff, wantOff) {
			t.Fatalf("partOff %v, want %v", pl.PartOff, wantOff)
		}
	})
	t.Run("mixed", func(t *testing.T) {
		// A prompt chunk of 200 BF16 tokens beside decode tokens of three
		// sequences (float32): the chunk whole on attention_mma_prefill.cu's
		// 32-token blocks, the decode tokens split, the partials theirs.
		seq := append(make([]int32, 200), 1, 2, 3)
		pos := append(positions(1000, 200), 5000, 70, 9000)
		pl := PlanAttentionBF16(seq, pos, 32, pool(8, 128), 16384, 200)
		var want []int32
		for t := 0; t < 200; t += 32 {
			want = append(want, int32(t), int32(min(32, 200-t)))
		}
		want = append(want, 200, 1, 201, 1, 202, 1)
		if !pl.Split || pl.Whole != 7 || pl.BF16Work != 7 || pl.SplitBF16 != 0 || !slices.Equal(pl.Work, want) {
			t.Fatalf("plan %+v, want 7 BF16 whole blocks then 3 split tiles %v", pl, want)
		}
		if pl.PartOff[199] != -1 || pl.PartOff[200] != 0 || pl.PartOff[201] != 79 || pl.PartOff[202] != 81 || pl.Parts != 222 {
			t.Fatalf("partOff %v (parts %d), want -1 then 0, 79, 81 of 222", pl.PartOff[199:], pl.Parts)
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
		if !slices.Equal(pl.Work, want) || pl.SplitBF16 != 10 || pl.Whole != 0 {
			t.Fatalf("work %v with %d BF16 split tiles, %d whole blocks, want %v with 10 and 0", pl.Work, pl.SplitBF16, pl.Whole, want)
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
		if pl.Split || !slices.Equal(pl.Work, want) || pl.BF16Work != 7 || pl.Whole != 14 {
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

// TestFlashCacheKernels: which kernels and scales each cache type gets.
// An FP8 cache takes the BF16 cache's one-term kernels with its _fp8
// variants, scale·k_scale as the softmax scale and v_scale on the result;
// the wgmma prefill stays BF16's alone; a float32 cache keeps the
// three-term kernels. Runs without a GPU.
func TestFlashCacheKernels(t *testing.T) {
	defer func(dec, pre, wg bool) { flashDecode, flashPrefill, flashPrefillWG = dec, pre, wg }(flashDecode, flashPrefill, flashPrefillWG)
	flashDecode, flashPrefill, flashPrefillWG = true, true, true
	k := &K{d: &Device{Arch: "sm_90a"}}
	scale, ks := float32(0.088), float32(0.37) // variables: a float32 product, rounded once
	for _, c := range []struct {
		dt            kernels.KVDType
		oneTerm, wg   bool
		suffix        string
		scale, vscale float32
	}{
		{kernels.KVBF16, true, true, "", scale, 1},
		{kernels.KVFP8, true, false, "_fp8", scale * ks, 1.7},
		{kernels.KVFloat32, false, false, "", scale, 1},
	} {
		p := &KVPool{DType: c.dt, KVHeads: 8, HeadDim: 128, KScale: ks, VScale: 1.7}
		if c.dt != kernels.KVFP8 {
			p.KScale, p.VScale = 1, 1
		}
		fs, vs := flashScales(p, scale)
		if flashOneTerm(p) != c.oneTerm || flashDecodeFits(p) != c.oneTerm || flashPrefillFits(p) != c.oneTerm ||
			k.flashPrefillWGFits(p) != c.wg || flashFP8(p) != c.suffix || fs != c.scale || vs != c.vscale {
			t.Errorf("%v: one term %v, decode %v, prefill %v, wgmma %v, suffix %q, scales %v %v; want %v, %v, %v, %v, %q, %v %v",
				c.dt, flashOneTerm(p), flashDecodeFits(p), flashPrefillFits(p), k.flashPrefillWGFits(p), flashFP8(p), fs, vs,
				c.oneTerm, c.oneTerm, c.oneTerm, c.wg, c.suffix, c.scale, c.vscale)
		}
		if got, want := flashCodesBytes(p), map[bool]int{true: 4 * 64 * 128}[c.dt == kernels.KVFP8]; got != want {
			t.Errorf("%v: %d bytes of staged codes, want %d", c.dt, got, want)
		}
	}
}

// flashVariant is a setting of the flash kernels' switches.
type flashVariant struct {
	name                                     string
	pipelined, wide, twoTiles, splitRuns, wg bool
}

// TestFlashVariants: the _p kernels (the next chunk's copy in flight while
// this one is multiplied), attention_mma_decode.cu's split kernels (four
// warps a chunk), attention_mma_prefill.cu's (two m-tiles a warp) and split
// runs in large batches pass the suite's attention cases and give the
// one-warp, one-mode kernels' bits on the Qwen3-8B head shape, for prefill,
// decode and both in one batch, float32 and BF16 q, over shuffled tables
// of a BF16 and of an FP8 cache; on the decode kernels, a decode batch's
// o-projection terms written by the attention (AttentionBatchTerms) are
// lb_mma_split's of its output, one term or three.
func TestFlashVariants(t *testing.T) {
	d := openOrSkip(t)
	defer func(p, dec, pre, runs, wg bool, swap int) {
		flashPipelined, flashDecode, flashPrefill, flashSplitRuns, flashPrefillWG, flashWGSwap = p, dec, pre, runs, wg, swap
	}(flashPipelined, flashDecode, flashPrefill, flashSplitRuns, flashPrefillWG, flashWGSwap)
	variants := []flashVariant{{"pipelined", true, false, false, false, false}, {"split runs", false, false, false, true, false},
		{"decode, prefill and split runs", false, true, true, true, false},
		{"decode, wgmma prefill and split runs", false, true, true, true, true}}
	for _, v := range variants {
		v.set()
		for _, f := range kerneltest.Check(NewOps(d), kerneltest.OpAttention, kerneltest.OpPagedAttention) {
			t.Errorf("%s: %v", v.name, f)
		}
	}
	for _, dt := range []kernels.KVDType{kernels.KVBF16, kernels.KVFP8} {
		t.Run(fmt.Sprint(dt), func(t *testing.T) { flashVariantBits(t, d, dt, variants) })
	}
}

// set turns the flash kernels' switches to v's.
func (v flashVariant) set() {
	flashPipelined, flashDecode, flashPrefill, flashSplitRuns, flashPrefillWG = v.pipelined, v.wide, v.twoTiles, v.splitRuns, v.wg
}

// flashVariantBits is TestFlashVariants's bit comparison over a cache of
// type dt (FP8: codes with scales that are not powers of two).
func flashVariantBits(t *testing.T, d *Device, dt kernels.KVDType, variants []flashVariant) {
	const H, KVH, Dh, bs, ctx, seqs = 32, 8, 128, 16, 1000, 37
	rng := rand.New(rand.NewPCG(3, 3))
	p := &KVPool{DType: dt, KVHeads: KVH, HeadDim: Dh, BlockSize: bs, KScale: 1, VScale: 1}
	if dt == kernels.KVFP8 {
		p.KScale, p.VScale = 0.37, 1.7
	}
	blocks := (ctx + bs - 1) / bs
	n := seqs * blocks * bs * KVH * Dh
	var err error
	for _, dst := range []*Buf{&p.K, &p.V} {
		kv := make([]byte, 0, 2*n)
		for range n {
			if dt == kernels.KVFP8 {
				c := byte(rng.IntN(256))
				if c&0x7F == 0x7F { // no NaNs
					c--
				}
				kv = append(kv, c)
			} else {
				kv = binary.LittleEndian.AppendUint16(kv, format.BF16FromFloat32(float32(rng.NormFloat64())))
			}
		}
		if *dst, err = d.Alloc(len(kv)); err != nil {
			t.Fatal(err)
		}
		defer d.Free(*dst)
		if err := d.Upload(*dst, kv); err != nil {
			t.Fatal(err)
		}
	}
	tables := make([]int32, seqs*blocks)
	for i, b := range rng.Perm(seqs * blocks) {
		tables[i] = int32(b)
	}
	// T tokens of sequence 0 at the end of its context, then one token of
	// each of the next singles sequences at positions spread over the
	// context (decode tokens: alone, or beside a prompt chunk); the first
	// bf16 tokens BF16.
	for _, c := range []struct{ T, bf16, singles int }{{1, 0, 0}, {3, 0, 0}, {100, 0, 0}, {300, 0, 0}, {300, 200, 0},
		{100, 100, 0}, {999, 999, 0}, {700, 533, 0}, {0, 0, seqs}, {0, seqs, seqs}, {300, 300, seqs - 1}, {200, 0, seqs - 1},
		{300, 310, seqs - 1}} {
		var seq, pos []int32
		for i := range c.T {
			seq, pos = append(seq, 0), append(pos, int32(ctx-c.T+i))
		}
		for i := range c.singles {
			s := i + min(c.T, 1)
			seq, pos = append(seq, int32(s)), append(pos, int32(ctx-1-27*s))
		}
		c.T += c.singles
		q := make([]float32, c.T*H*Dh)
		for i := range q {
			q[i] = float32(rng.NormFloat64())
		}
		// run returns the attention's output; with nt > 0 also the mma terms
		// (nt of them) that AttentionBatchTerms wrote and those lb_mma_split
		// writes from the output (both nil where it did not fuse).
		run := func(nt int) (got, fusedTerms, splitTerms []byte) {
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
				if nt == 0 {
					if err := k.AttentionBatch(out, qd, p, b, c.T, H, 0.088); err != nil {
						return err
					}
				} else {
					tm, err := k.termsFor(c.T, H*Dh, nt)
					if err != nil {
						return err
					}
					if err := k.UploadTo(tm.buf, make([]byte, tm.buf.bytes)); err != nil { // as lb_mma_split leaves padding tokens
						return err
					}
					fused, err := k.AttentionBatchTerms(out, &tm, qd, p, b, c.T, H, 0.088)
					if err != nil || !fused {
						return err
					}
					fusedTerms = make([]byte, tm.buf.bytes)
					if err := k.Download(fusedTerms, tm.buf); err != nil {
						return err
					}
					if err := k.Split(tm, out); err != nil {
						return err
					}
					splitTerms = make([]byte, tm.buf.bytes)
					if err := k.Download(splitTerms, tm.buf); err != nil {
						return err
					}
				}
				got = make([]byte, 4*len(q))
				return k.Download(got, out)
			})
			if err != nil {
				t.Fatal(err)
			}
			return got, fusedTerms, splitTerms
		}
		flashVariant{}.set()
		want, _, _ := run(0)
		for _, v := range variants {
			v.set()
			// A decode step (every token split) on the decode kernels writes
			// the o-projection's terms itself: lb_mma_split's bits.
			if v.wide && c.T <= flashSplitTokens {
				for _, nt := range []int{1, 3} {
					got, fused, split := run(nt)
					switch {
					case fused == nil:
						t.Errorf("%s: %d tokens: AttentionBatchTerms did not write terms", v.name, c.T)
					case !bytes.Equal(fused, split):
						t.Errorf("%s: %d tokens, %d terms: the attention's terms differ from lb_mma_split's of its output (%s)", v.name, c.T, nt, firstDiff(fused, split))
					case !bytes.Equal(got, want):
						t.Errorf("%s: %d tokens, %d terms: output differs from the one-warp kernels' (%s)", v.name, c.T, nt, firstDiff(got, want))
					}
				}
			}
			if got, _, _ := run(0); !bytes.Equal(got, want) {
				t.Errorf("%s: %d tokens (%d BF16, %d single tokens of other sequences): output differs from the one-warp kernels' (%s)",
					v.name, c.T, c.bf16, c.singles, firstDiff(got, want))
				if v.wg {
					// Which descriptor byte offsets would have given the bits.
					for swap := 1; swap < 4; swap++ {
						flashWGSwap = swap
						got, _, _ := run(0)
						t.Logf("wgmma prefill with descriptor swap %d: same bits %v (%s)", swap, bytes.Equal(got, want), firstDiff(got, want))
					}
					flashWGSwap = 0
				}
			}
		}
	}
}

// firstDiff describes the first float32 where got and want differ, and how
// many do.
func firstDiff(got, want []byte) string {
	first, n := -1, 0
	for i := 0; i+4 <= min(len(got), len(want)); i += 4 {
		if !bytes.Equal(got[i:i+4], want[i:i+4]) {
			if first < 0 {
				first = i / 4
			}
			n++
		}
	}
	if first < 0 {
		return "equal"
	}
	g := math.Float32frombits(binary.LittleEndian.Uint32(got[4*first:]))
	w := math.Float32frombits(binary.LittleEndian.Uint32(want[4*first:]))
	return fmt.Sprintf("%d of %d floats differ; the first, #%d: %v against %v", n, len(want)/4, first, g, w)
}
