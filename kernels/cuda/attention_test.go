//go:build cgo

package cuda

import (
	"slices"
	"testing"

	"github.com/lowbit-ai/lowbit/kernels"
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
