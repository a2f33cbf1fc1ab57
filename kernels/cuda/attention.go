//go:build cgo

package cuda

import (
	"fmt"

	"github.com/lowbit-ai/lowbit/kernels"
)

// Batch describes the tokens of a batch for the varlen kernels: token t
// belongs to sequence Seq[t] at position Pos[t]; sequence s's block table
// is Tables[s·Stride ..]; the attention's plan (PlanAttention) says which
// kernels run, with PartOff (where token t's chunks start) and Work (the
// tensor-core kernels' blocks) uploaded beside the rest; all int32 device
// arrays.
type Batch struct {
	Tables, Seq, Pos, PartOff, Work Buf
	Stride                          int
	Plan                            AttentionPlan
}

// AttentionPlan is the host side of a batch's attention launch. The
// tensor-core kernels (attention_mma.cu: Flash) run when the head dim and
// the query-head group allow; Split spreads a token's chunks over blocks
// and merges them (flash-decoding: few tokens), otherwise a block runs a
// tile's whole context. The choice changes no result: every mode follows
// the same fold.
type AttentionPlan struct {
	Flash, Split bool
	PartOff      []int32 // token t's first partial: a prefix sum of its chunk counts
	Parts        int     // partials in all (0 when nothing is split)
	Work         []int32 // Flash: (first token, tokens) a block
	Warps        int     // Flash: warps a block
	Z            int     // Split: blocks a tile's chunks are spread over
	// BF16Work is how many of Work's first blocks hold the tokens below
	// PlanAttentionBF16's bf16 (their q and P as one BF16 term: the _q1
	// kernels).
	BF16Work int
}

// flashChunk is FA_CHUNK of attention_mma.cu.
const flashChunk = 64

// flashMaxZ bounds the blocks one tile's chunks spread over in the split
// mode (a block takes chunks z, z + Z, ...).
const flashMaxZ = 256

// flashMaxPartials bounds the bytes of the split mode's partials (a
// batch that would need more runs whole: slower, the same bits).
const flashMaxPartials = 256 << 20

// flashPipelined picks attention_mma.cu's _p kernels where they exist:
// the next chunk's k and v copied while this one's are multiplied. The same
// bits (TestFlashVariants); off: on the H200 it gained 4-7% on BF16-q
// prefill and lost 26-34% with float32 q (BenchmarkKernels times both).
var flashPipelined = false

// flashSplitTokens: batches of at most this many tokens split their
// chunks over blocks (decode steps); larger ones have blocks enough.
const flashSplitTokens = 128

// flashFits says whether the tensor-core kernels serve a pool with H
// query heads: head dims 16, 32, 64 or 128, and a query-head group that
// divides 16.
func flashFits(p *KVPool, H int) bool {
	switch p.HeadDim {
	case 16, 32, 64, 128:
	default:
		return false
	}
	if p.KVHeads <= 0 || H%p.KVHeads != 0 {
		return false
	}
	g := H / p.KVHeads
	return g <= 16 && 16%g == 0
}

// PlanAttention plans the attention of tokens at positions pos of
// sequences seq (a sequence's tokens consecutive, at consecutive
// positions), H query heads, over pool p whose tables reach ctx positions
// (the contiguous cache: the last position + 1).
func PlanAttention(seq, pos []int32, H int, p *KVPool, ctx int) AttentionPlan {
	return PlanAttentionBF16(seq, pos, H, p, ctx, 0)
}

// PlanAttentionBF16 is PlanAttention with the first bf16 tokens' q and P
// taken as BF16 (attention_mma.cu's _q1 kernels), as the runtime's BF16
// prefill computes prompt rows; no block holds tokens of both kinds. The
// fallback kernels (attention.cu) have no BF16 form: where they run, every
// token keeps float32 q and P.
func PlanAttentionBF16(seq, pos []int32, H int, p *KVPool, ctx, bf16 int) AttentionPlan {
	if !flashFits(p, H) {
		off, parts := PartOffsets(pos)
		return AttentionPlan{PartOff: off, Parts: parts}
	}
	pl := AttentionPlan{Flash: true, Warps: 4}
	pl.PartOff = make([]int32, len(pos))
	if len(pos) <= flashSplitTokens {
		for t, q := range pos {
			pl.PartOff[t] = int32(pl.Parts)
			pl.Parts += int(q)/flashChunk + 1
		}
		// Long contexts in a large batch would need more partials than
		// the device should set aside; those batches run whole.
		if 4*pl.Parts*H*(p.HeadDim+2) <= flashMaxPartials {
			pl.Split, pl.Warps = true, 1
			pl.Z = min(flashMaxZ, max(1, (ctx+flashChunk-1)/flashChunk)) // a block a chunk
		} else {
			pl.Parts = 0
			clear(pl.PartOff)
		}
	}
	per := pl.Warps * (16 / (H / p.KVHeads)) // tokens a block
	perBF16 := per
	if !pl.Split && flashPrefillFits(p) {
		perBF16 *= flashPrefillTiles // attention_mma_prefill.cu's blocks
	}
	for t := 0; t < len(pos); {
		run := 1
		for t+run < len(pos) && t+run != bf16 && seq[t+run] == seq[t] && pos[t+run] == pos[t+run-1]+1 {
			run++
		}
		per := per
		if t < bf16 {
			per = perBF16
		}
		for i := 0; i < run; i += per {
			pl.Work = append(pl.Work, int32(t+i), int32(min(per, run-i)))
			if t+i < bf16 {
				pl.BF16Work++
			}
		}
		t += run
	}
	if pl.Split && flashDecodeFits(p) {
		// attention_mma_decode.cu's blocks run chunks z, z + Z, ... with
		// the next one's copy in flight: about flashDecodeBlocks blocks
		// in all, fewer chunks a block only where the batch is small.
		tiles := len(pl.Work) / 2 * p.KVHeads
		pl.Z = min(pl.Z, max(1, (flashDecodeBlocks+tiles-1)/tiles))
	}
	return pl
}

// flashDecode picks attention_mma_decode.cu's kernels for the split mode
// where they exist (a BF16 cache, head dims 64 and 128): the same bits as
// the one-warp split kernels, four warps a chunk.
var flashDecode = true

// flashDecodeBlocks is the split mode's target block count with the
// decode kernels: 8 a SM of the H200's 132 at their 2 resident a SM, so
// the last wave is a small part of a long context's work.
const flashDecodeBlocks = 1024

// flashPrefill picks attention_mma_prefill.cu's kernel for the whole
// mode's BF16 rows where it exists (a BF16 cache, head dims 64 and 128):
// the same bits as lb_flash_d*_k1_whole_q1, two m-tiles a warp.
var flashPrefill = true

// flashPrefillTiles is FP_MT of attention_mma_prefill.cu: m-tiles a warp.
const flashPrefillTiles = 2

// flashPrefillFits says whether attention_mma_prefill.cu serves pool p.
func flashPrefillFits(p *KVPool) bool {
	return flashPrefill && p.DType == kernels.KVBF16 && (p.HeadDim == 64 || p.HeadDim == 128)
}

// flashDecodeFits says whether attention_mma_decode.cu serves pool p.
func flashDecodeFits(p *KVPool) bool {
	return flashDecode && p.DType == kernels.KVBF16 && (p.HeadDim == 64 || p.HeadDim == 128)
}

// AttentionPartialsBytes bounds the device memory a batch of up to tokens
// tokens takes for attention partials with H query heads over KVH KV heads
// of headDim: flashMaxPartials where the tensor-core kernels serve it (they run
// a batch whole rather than pass it), else attention.cu's most (attSplits
// chunks a token).
func AttentionPartialsBytes(H, KVH, headDim, tokens int) int64 {
	if flashFits(&KVPool{KVHeads: KVH, HeadDim: headDim}, H) {
		return flashMaxPartials
	}
	return 4 * int64(tokens) * attSplits * int64(H) * int64(headDim+2)
}

// PartOffsets returns, for positions pos, each token's first chunk of
// attention.cu's kernels (a prefix sum of the chunk counts
// p/attChunk(p) + 1) and the total.
func PartOffsets(pos []int32) (off []int32, total int) {
	off = make([]int32, len(pos))
	for t, p := range pos {
		off[t] = int32(total)
		total += int(p)/attChunk(int(p)) + 1
	}
	return off, total
}

// attSplits is ATT_SPLITS of attention.cu: the most chunks a token's
// context is split in.
const attSplits = 64

// attChunk is att_chunk of attention.cu: the chunk size for position p.
func attChunk(p int) int {
	per := (p + 1 + attSplits - 1) / attSplits
	return max(32, (per+31)/32*32)
}

// ReserveAttention grows the attention's partials buffer to hold parts
// chunks of H heads of headDim, so that a graph replayed afterwards finds
// it large enough (a growth makes older graphs stale: Generation).
func (d *Device) ReserveAttention(parts, H, headDim int) error {
	return d.do(func() error {
		_, err := d.persistent("attention_partials", 4*parts*H*(headDim+2))
		return err
	})
}

// AttentionBatch runs a batch's attention, T tokens, as b.Plan says
// (attention_mma.cu, or attention.cu's two launches); each token sees its
// own sequence's cache up to its position, with the bits of Attention.
func (k *K) AttentionBatch(out, q Buf, p *KVPool, b *Batch, T, H int, scale float32) error {
	if p.HeadDim > 256 {
		return fmt.Errorf("cuda: Attention: head_dim %d above the kernel's 256", p.HeadDim)
	}
	pl := &b.Plan
	var parts Buf
	if pl.Parts > 0 {
		var err error
		if parts, err = k.d.persistent("attention_partials", 4*pl.Parts*H*(p.HeadDim+2)); err != nil {
			return err
		}
	}
	if pl.Flash {
		terms, mode, z := 3, "whole", 1
		if p.DType == kernels.KVBF16 {
			terms = 1
		}
		if pl.Split {
			mode, z = "split", pl.Z
		}
		// Pipelined copies (_p) where the variant exists: a BF16 cache,
		// head dims 64 and 128.
		pipe, kvBufs := "", 1
		if flashPipelined && terms == 1 && (p.HeadDim == 64 || p.HeadDim == 128) {
			pipe, kvBufs = "_p", 2
		}
		if pl.Split && flashDecodeFits(p) {
			return k.flashDecode(out, q, parts, p, b, T, H, scale)
		}
		name := fmt.Sprintf("lb_flash_d%d_k%d_%s", p.HeadDim, terms, mode)
		// The BF16 blocks first (the _q1 kernel), then the others.
		for _, part := range []struct {
			suffix      string
			qterms      int
			first, last int
		}{{"_q1", 1, 0, pl.BF16Work}, {"", 3, pl.BF16Work, len(pl.Work) / 2}} {
			if part.last == part.first {
				continue
			}
			if part.suffix == "_q1" && !pl.Split && flashPrefillFits(p) {
				if err := k.flashPrefill(out, q, p, b, part.first, part.last, H, scale); err != nil {
					return err
				}
				continue
			}
			qterms := 3 // the default kernels stage all three
			if pipe != "" {
				qterms = part.qterms
			}
			shmem := (pl.Warps*qterms*16 + kvBufs*2*terms*flashChunk) * (p.HeadDim + 8) * 2
			if err := k.d.launch(name+part.suffix+pipe, [3]int{part.last - part.first, p.KVHeads, z}, [3]int{32 * pl.Warps, 1, 1}, shmem,
				ptrArg(out.ptr), ptrArg(parts.ptr), ptrArg(q.ptr), ptrArg(p.K.ptr), ptrArg(p.V.ptr), intArg(int(p.DType)),
				f32Arg(p.KScale), f32Arg(p.VScale), ptrArg(b.Tables.ptr), intArg(b.Stride), ptrArg(b.Seq.ptr),
				ptrArg(b.Pos.ptr), ptrArg(b.PartOff.ptr), ptrArg(b.Work.Slice(8*part.first, b.Work.bytes).ptr), intArg(p.BlockSize), intArg(H),
				intArg(p.KVHeads), f32Arg(scale)); err != nil {
				return err
			}
		}
		if !pl.Split {
			return nil
		}
		return k.d.launch("lb_flash_merge", [3]int{T, H, 1}, [3]int{128, 1, 1}, 0,
			ptrArg(out.ptr), ptrArg(parts.ptr), ptrArg(b.Pos.ptr), ptrArg(b.PartOff.ptr), intArg(H), intArg(p.HeadDim))
	}
	if err := k.d.launch("lb_attention_split", [3]int{T, H, attSplits}, [3]int{128, 1, 1}, 0,
		ptrArg(parts.ptr), ptrArg(q.ptr), ptrArg(p.K.ptr), ptrArg(p.V.ptr), intArg(int(p.DType)), f32Arg(p.KScale),
		f32Arg(p.VScale), ptrArg(b.Tables.ptr), intArg(b.Stride), ptrArg(b.Seq.ptr), ptrArg(b.Pos.ptr),
		ptrArg(b.PartOff.ptr), intArg(p.BlockSize), intArg(H), intArg(p.KVHeads), intArg(p.HeadDim), f32Arg(scale)); err != nil {
		return err
	}
	return k.d.launch("lb_attention_merge", [3]int{T, H, 1}, [3]int{128, 1, 1}, 0,
		ptrArg(out.ptr), ptrArg(parts.ptr), ptrArg(b.Pos.ptr), ptrArg(b.PartOff.ptr), intArg(H), intArg(p.HeadDim))
}

// flashPrefill runs Work blocks first .. last (BF16 rows, whole mode) on
// attention_mma_prefill.cu's kernel.
func (k *K) flashPrefill(out, q Buf, p *KVPool, b *Batch, first, last, H int, scale float32) error {
	ld := p.HeadDim + 8
	shmem := (4*flashPrefillTiles*16*ld + 4*flashChunk*ld) * 2
	return k.d.launch(fmt.Sprintf("lb_flash_prefill_d%d_q1", p.HeadDim), [3]int{last - first, p.KVHeads, 1}, [3]int{128, 1, 1}, shmem,
		ptrArg(out.ptr), ptrArg(q.ptr), ptrArg(p.K.ptr), ptrArg(p.V.ptr), ptrArg(b.Tables.ptr), intArg(b.Stride), ptrArg(b.Seq.ptr),
		ptrArg(b.Pos.ptr), ptrArg(b.Work.Slice(8*first, b.Work.bytes).ptr), intArg(p.BlockSize), intArg(H), intArg(p.KVHeads), f32Arg(scale))
}

// flashDecode runs the split mode on attention_mma_decode.cu's kernels
// (the BF16 blocks on the _q1 one), then merges.
func (k *K) flashDecode(out, q, parts Buf, p *KVPool, b *Batch, T, H int, scale float32) error {
	pl := &b.Plan
	for _, part := range []struct {
		suffix      string
		qterms      int
		first, last int
	}{{"_q1", 1, 0, pl.BF16Work}, {"", 3, pl.BF16Work, len(pl.Work) / 2}} {
		if part.last == part.first {
			continue
		}
		ld := p.HeadDim + 8
		shmem := (part.qterms*16*ld + 4*flashChunk*ld + part.qterms*16*(flashChunk+8)) * 2
		if err := k.d.launch(fmt.Sprintf("lb_flash_decode_d%d%s", p.HeadDim, part.suffix), [3]int{part.last - part.first, p.KVHeads, pl.Z},
			[3]int{128, 1, 1}, shmem, ptrArg(parts.ptr), ptrArg(q.ptr), ptrArg(p.K.ptr), ptrArg(p.V.ptr), ptrArg(b.Tables.ptr),
			intArg(b.Stride), ptrArg(b.Seq.ptr), ptrArg(b.Pos.ptr), ptrArg(b.PartOff.ptr),
			ptrArg(b.Work.Slice(8*part.first, b.Work.bytes).ptr), intArg(p.BlockSize), intArg(H), intArg(p.KVHeads), f32Arg(scale)); err != nil {
			return err
		}
	}
	return k.d.launch("lb_flash_merge", [3]int{T, H, 1}, [3]int{128, 1, 1}, 0,
		ptrArg(out.ptr), ptrArg(parts.ptr), ptrArg(b.Pos.ptr), ptrArg(b.PartOff.ptr), intArg(H), intArg(p.HeadDim))
}

// Attention: out [T, H, Dh] over positions start..start+T-1 of one
// sequence with block table blocks (null: a contiguous cache): the batch
// kernels of AttentionBatch on a batch of one sequence.
func (k *K) Attention(out, q Buf, p *KVPool, blocks Buf, T, start, H int, scale float32) error {
	seq, pos := make([]int32, T), make([]int32, T)
	for t := range pos {
		pos[t] = int32(start + t)
	}
	ctx := start + T
	if blocks.bytes > 0 {
		ctx = blocks.bytes / 4 * p.BlockSize
	}
	b := &Batch{Tables: blocks, Plan: PlanAttention(seq, pos, H, p, ctx)}
	var err error
	for _, a := range []struct {
		dst *Buf
		src []int32
	}{{&b.Seq, seq}, {&b.Pos, pos}, {&b.PartOff, b.Plan.PartOff}, {&b.Work, b.Plan.Work}} {
		if len(a.src) == 0 {
			continue
		}
		if *a.dst, err = k.Upload(asBytes(a.src, len(a.src))); err != nil {
			return err
		}
	}
	return k.AttentionBatch(out, q, p, b, T, H, scale)
}
