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
	// Rope holds the batch's RoPE table (RoPETable): the first
	// QKNormRoPE of a batch writes it, the next layers' read it.
	Rope Buf
}

// AttentionPlan is the host side of a batch's attention launch. The
// tensor-core kernels (attention_mma.cu: Flash) run when the head dim and
// the query-head group allow. A token runs in one of two modes: whole (a
// block runs a tile's whole context) or split (flash-decoding: a token's
// chunks spread over blocks, then merged). Small batches (decode steps)
// run split; in large ones, the runs that fit one split tile (the decode
// rows beside a prompt chunk) run split and the rest whole. The choice
// changes no result: every mode follows the same fold.
type AttentionPlan struct {
	Flash   bool
	Split   bool    // some tokens run split
	PartOff []int32 // token t's first partial (a prefix sum of the split tokens' chunk counts); −1: a whole-mode token
	Parts   int     // partials in all (0 when nothing is split)
	// Work holds (first token, tokens) a block: the Whole blocks of the
	// whole mode (Warps warps each) first, then the split mode's tiles
	// (one warp's 16 rows each). In each, the blocks of tokens below
	// PlanAttentionBF16's bf16 come first: BF16Work whole blocks and
	// SplitBF16 split tiles (their q and P as one BF16 term: the _q1
	// kernels).
	Work                       []int32
	Whole, BF16Work, SplitBF16 int
	Warps                      int // a whole-mode block's warps
	Z                          int // Split: blocks a tile's chunks are spread over
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
	R := 16 / (H / p.KVHeads) // tokens a tile
	// Runs: a sequence's consecutive positions, broken where the BF16
	// tokens end.
	type run struct{ t, n int }
	var runs []run
	for t := 0; t < len(pos); {
		n := 1
		for t+n < len(pos) && t+n != bf16 && seq[t+n] == seq[t] && pos[t+n] == pos[t+n-1]+1 {
			n++
		}
		runs = append(runs, run{t, n})
		t += n
	}
	// Split runs: every run of a small batch (decode steps), the runs that
	// fit one tile in a large one (decode tokens beside a prompt chunk);
	// their tokens' partials are a prefix sum of their chunk counts.
	split := make([]bool, len(runs))
	small := len(pos) <= flashSplitTokens
	pl.PartOff = make([]int32, len(pos))
	for i, r := range runs {
		split[i] = small || (flashSplitRuns && r.n <= R)
		for t := r.t; t < r.t+r.n; t++ {
			pl.PartOff[t] = -1
			if split[i] {
				pl.PartOff[t] = int32(pl.Parts)
				pl.Parts += int(pos[t])/flashChunk + 1
			}
		}
	}
	// Long contexts in a large batch would need more partials than the
	// device should set aside: then every token runs whole.
	if 4*pl.Parts*H*(p.HeadDim+2) > flashMaxPartials {
		clear(split)
		pl.Parts = 0
		for t := range pl.PartOff {
			pl.PartOff[t] = -1
		}
	}
	per, perBF16 := pl.Warps*R, pl.Warps*R // tokens a whole-mode block
	if flashPrefillFits(p) {
		perBF16 *= flashPrefillTiles // attention_mma_prefill.cu's blocks
	}
	for _, splitPass := range []bool{false, true} {
		for i, r := range runs {
			if split[i] != splitPass {
				continue
			}
			n := per
			switch {
			case splitPass:
				n = R
			case r.t < bf16:
				n = perBF16
			}
			for j := 0; j < r.n; j += n {
				pl.Work = append(pl.Work, int32(r.t+j), int32(min(n, r.n-j)))
				switch {
				case r.t >= bf16:
				case splitPass:
					pl.SplitBF16++
				default:
					pl.BF16Work++
				}
			}
		}
		if !splitPass {
			pl.Whole = len(pl.Work) / 2
		}
	}
	if tiles := len(pl.Work)/2 - pl.Whole; tiles > 0 {
		pl.Split = true
		pl.Z = min(flashMaxZ, max(1, (ctx+flashChunk-1)/flashChunk)) // a block a chunk
		if flashDecodeFits(p) {
			// attention_mma_decode.cu's blocks run chunks z, z + Z, ...
			// with the next one's copy in flight: about flashDecodeBlocks
			// blocks in all, fewer chunks a block only where there are
			// few tiles.
			pl.Z = min(pl.Z, max(1, (flashDecodeBlocks+tiles*p.KVHeads-1)/(tiles*p.KVHeads)))
		}
	}
	return pl
}

// flashSplitRuns lets a large batch's runs that fit one tile (decode
// tokens beside a prompt chunk) run split; off, a large batch runs whole
// (a block of 4 warps streams such a token's context alone). The same
// bits either way (TestFlashVariants).
var flashSplitRuns = true

// flashDecode picks attention_mma_decode.cu's kernels for the split mode
// where they exist (a BF16 or FP8 cache, head dims 64 and 128): the same bits as
// the one-warp split kernels, four warps a chunk.
var flashDecode = true

// flashDecodeBlocks is the split mode's target block count with the
// decode kernels: 8 a SM of the H200's 132 at their 2 resident a SM, so
// the last wave is a small part of a long context's work.
const flashDecodeBlocks = 1024

// flashPrefill picks attention_mma_prefill.cu's kernel for the whole
// mode's BF16 rows where it exists (a BF16 or FP8 cache, head dims 64 and 128):
// the same bits as lb_flash_d*_k1_whole_q1, two m-tiles a warp.
var flashPrefill = true

// flashPrefillWG runs those rows on attention_wgmma_prefill.cu's kernel
// where it serves instead (head dim 128, sm_90a: wgmma): the same bits,
// but slower so far (150.2 against 226.3 TFLOP/s at 8,192 tokens on the
// H200), so off; tests and benchmarks turn it on. flashWGSwap is its
// descriptor test hook (the kernel's swap argument).
var (
	flashPrefillWG = false
	flashWGSwap    = 0
)

// flashPrefillWGFits says whether attention_wgmma_prefill.cu serves pool p
// on this device.
func (k *K) flashPrefillWGFits(p *KVPool) bool {
	return flashPrefillWG && flashPrefillFits(p) && p.DType == kernels.KVBF16 && p.HeadDim == 128 && k.d.Arch == "sm_90a"
}

// flashPrefillTiles is FP_MT of attention_mma_prefill.cu: m-tiles a warp.
const flashPrefillTiles = 2

// flashPrefillFits says whether attention_mma_prefill.cu serves pool p.
func flashPrefillFits(p *KVPool) bool {
	return flashPrefill && flashOneTerm(p) && (p.HeadDim == 64 || p.HeadDim == 128)
}

// flashDecodeFits says whether attention_mma_decode.cu serves pool p.
func flashDecodeFits(p *KVPool) bool {
	return flashDecode && flashOneTerm(p) && (p.HeadDim == 64 || p.HeadDim == 128)
}

// flashOneTerm: the cache's k and v are one BF16 term each in the flash
// kernels (a BF16 cache, or an FP8 one as its codes' values, the scales
// applied to the scores and the result: attention_mma.cu).
func flashOneTerm(p *KVPool) bool { return p.DType == kernels.KVBF16 || p.DType == kernels.KVFP8 }

// flashScales are the scale the flash kernels take and the factor of
// their result: for an FP8 cache scale·kscale (rounded once) and vscale,
// else scale and 1.
func flashScales(p *KVPool, scale float32) (float32, float32) {
	if p.DType == kernels.KVFP8 {
		return scale * p.KScale, p.VScale
	}
	return scale, 1
}

// flashFP8 is the kernel-name suffix of an FP8 cache's variants.
func flashFP8(p *KVPool) string {
	if p.DType == kernels.KVFP8 {
		return "_fp8"
	}
	return ""
}

// flashBF16Chunks is how many BF16 k or v chunks the decode and prefill
// kernels keep in shared memory: two stages of k and v, or for the _fp8
// kernels one (the codes' two stages are flashCodesBytes).
func flashBF16Chunks(p *KVPool) int {
	if p.DType == kernels.KVFP8 {
		return 2
	}
	return 4
}

// flashCodesBytes is the shared memory the _fp8 kernels add for two
// stages of a chunk's k and v codes.
func flashCodesBytes(p *KVPool) int {
	if p.DType == kernels.KVFP8 {
		return 4 * flashChunk * p.HeadDim
	}
	return 0
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

// ReserveAttention grows the attention's buffers for plan pl (H query and
// KVH key-value heads of headDim): its partials, and the decode kernels'
// arrival counters (a tile's last block merges it), so that a graph
// replayed afterwards finds them large enough (a growth makes older graphs
// stale: Generation).
func (d *Device) ReserveAttention(pl *AttentionPlan, H, KVH, headDim int) error {
	return d.do(func() error {
		if _, err := d.persistent("attention_partials", 4*pl.Parts*H*(headDim+2)); err != nil {
			return err
		}
		_, err := d.arrivals(pl, KVH)
		return err
	})
}

// arrivals returns the decode kernels' arrival counters for plan pl, one
// int32 a split tile and KV head, zeros where the kernels have not left
// them (locked by the caller).
func (d *Device) arrivals(pl *AttentionPlan, KVH int) (Buf, error) {
	return d.persistentZeroed("attention_arrivals", 4*(len(pl.Work)/2-pl.Whole)*KVH)
}

// AttentionBatch runs a batch's attention, T tokens, as b.Plan says
// (attention_mma.cu, or attention.cu's two launches); each token sees its
// own sequence's cache up to its position, with the bits of Attention.
func (k *K) AttentionBatch(out, q Buf, p *KVPool, b *Batch, T, H int, scale float32) error {
	_, err := k.AttentionBatchTerms(out, nil, q, p, b, T, H, scale)
	return err
}

// AttentionBatchTerms is AttentionBatch that, where every token of the
// batch runs on the decode kernels (attention_mma_decode.cu: a decode
// step), also writes the output into terms (terms.In = H·Dh) from the same
// launch, the values lb_mma_split would write from out, and reports true;
// otherwise terms is untouched. A decode step then needs no split launch
// before the o-projection.
func (k *K) AttentionBatchTerms(out Buf, terms *Terms, q Buf, p *KVPool, b *Batch, T, H int, scale float32) (bool, error) {
	pl := &b.Plan
	fused := terms != nil && pl.Flash && pl.Split && pl.Whole == 0 && flashDecodeFits(p) && terms.In == H*p.HeadDim &&
		terms.T == T && terms.In%16 == 0
	if !fused {
		terms = nil
	}
	return fused, k.attentionBatch(out, terms, q, p, b, T, H, scale)
}

func (k *K) attentionBatch(out Buf, terms *Terms, q Buf, p *KVPool, b *Batch, T, H int, scale float32) error {
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
		fscale, vscale := flashScales(p, scale)
		if err := k.flashWhole(out, q, p, b, H, fscale, vscale); err != nil {
			return err
		}
		if !pl.Split {
			return nil
		}
		if flashDecodeFits(p) { // the decode kernels merge their tiles themselves
			return k.flashSplit(out, q, parts, p, b, H, fscale, vscale, terms)
		}
		if err := k.flashSplit(out, q, parts, p, b, H, fscale, vscale, nil); err != nil {
			return err
		}
		return k.d.launch("lb_flash_merge", [3]int{T, H, 1}, [3]int{128, 1, 1}, 0,
			ptrArg(out.ptr), ptrArg(parts.ptr), ptrArg(b.Pos.ptr), ptrArg(b.PartOff.ptr), intArg(H), intArg(p.HeadDim), f32Arg(vscale))
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

// flashRange is a range [first, last) of a plan's Work blocks and the
// suffix of its kernels (_q1 for BF16 q and P).
type flashRange struct {
	suffix      string
	qterms      int
	first, last int
}

// flashWhole runs the plan's whole-mode blocks: the BF16 ones on
// attention_mma_prefill.cu's kernel where it serves, the others on
// attention_mma.cu's.
func (k *K) flashWhole(out, q Buf, p *KVPool, b *Batch, H int, scale, vscale float32) error {
	pl := &b.Plan
	for _, r := range []flashRange{{"_q1", 1, 0, pl.BF16Work}, {"", 3, pl.BF16Work, pl.Whole}} {
		if r.last == r.first {
			continue
		}
		ld := p.HeadDim + 8
		if r.suffix == "_q1" && k.flashPrefillWGFits(p) {
			// Two blocks of 4 warps an entry. Two stages of k and v (core
			// matrices, no padding), then each warp's q [16][Dh + 8].
			shmem := (4*flashChunk*p.HeadDim + 4*16*ld) * 2
			if err := k.d.launch("lb_flash_prefill_wg_d128_q1", [3]int{2 * (r.last - r.first), p.KVHeads, 1}, [3]int{128, 1, 1}, shmem,
				ptrArg(out.ptr), ptrArg(q.ptr), ptrArg(p.K.ptr), ptrArg(p.V.ptr), ptrArg(b.Tables.ptr), intArg(b.Stride), ptrArg(b.Seq.ptr),
				ptrArg(b.Pos.ptr), ptrArg(b.Work.Slice(8*r.first, b.Work.bytes).ptr), intArg(p.BlockSize), intArg(H), intArg(p.KVHeads), f32Arg(scale),
				intArg(flashWGSwap)); err != nil {
				return err
			}
			continue
		}
		if r.suffix == "_q1" && flashPrefillFits(p) {
			shmem := (4*flashPrefillTiles*16*ld+flashBF16Chunks(p)*flashChunk*ld)*2 + flashCodesBytes(p)
			if err := k.d.launch(fmt.Sprintf("lb_flash_prefill_d%d_q1%s", p.HeadDim, flashFP8(p)), [3]int{r.last - r.first, p.KVHeads, 1}, [3]int{128, 1, 1}, shmem,
				ptrArg(out.ptr), ptrArg(q.ptr), ptrArg(p.K.ptr), ptrArg(p.V.ptr), ptrArg(b.Tables.ptr), intArg(b.Stride), ptrArg(b.Seq.ptr),
				ptrArg(b.Pos.ptr), ptrArg(b.Work.Slice(8*r.first, b.Work.bytes).ptr), intArg(p.BlockSize), intArg(H), intArg(p.KVHeads), f32Arg(scale),
				f32Arg(vscale)); err != nil {
				return err
			}
			continue
		}
		if err := k.flashMMA(out, Buf{}, q, p, b, H, scale, r, "whole", pl.Warps, 1); err != nil {
			return err
		}
	}
	return nil
}

// flashSplit runs the plan's split-mode tiles into the partials: on
// attention_mma_decode.cu's kernels where they serve (four warps a chunk),
// else on attention_mma.cu's (a warp a block).
func (k *K) flashSplit(out, q, parts Buf, p *KVPool, b *Batch, H int, scale, vscale float32, terms *Terms) error {
	pl := &b.Plan
	s := pl.Whole + pl.SplitBF16
	var arrive Buf
	if flashDecodeFits(p) {
		var err error
		if arrive, err = k.d.arrivals(pl, p.KVHeads); err != nil {
			return err
		}
	}
	var xs Buf
	nc, nt := 0, 0
	if terms != nil {
		xs, nc, nt = terms.buf, (terms.In+15)/16, terms.nt
	}
	for _, r := range []flashRange{{"_q1", 1, pl.Whole, s}, {"", 3, s, len(pl.Work) / 2}} {
		if r.last == r.first {
			continue
		}
		if !flashDecodeFits(p) {
			if err := k.flashMMA(Buf{}, parts, q, p, b, H, scale, r, "split", 1, pl.Z); err != nil {
				return err
			}
			continue
		}
		ld := p.HeadDim + 8
		shmem := (r.qterms*16*ld+flashBF16Chunks(p)*flashChunk*ld+r.qterms*16*(flashChunk+8))*2 + flashCodesBytes(p)
		if err := k.d.launch(fmt.Sprintf("lb_flash_decode_d%d%s%s", p.HeadDim, r.suffix, flashFP8(p)), [3]int{r.last - r.first, p.KVHeads, pl.Z},
			[3]int{128, 1, 1}, shmem, ptrArg(parts.ptr), ptrArg(q.ptr), ptrArg(p.K.ptr), ptrArg(p.V.ptr), ptrArg(b.Tables.ptr),
			intArg(b.Stride), ptrArg(b.Seq.ptr), ptrArg(b.Pos.ptr), ptrArg(b.PartOff.ptr),
			ptrArg(b.Work.Slice(8*r.first, b.Work.bytes).ptr), intArg(p.BlockSize), intArg(H), intArg(p.KVHeads), f32Arg(scale),
			ptrArg(out.ptr), ptrArg(arrive.Slice(4*(r.first-pl.Whole)*p.KVHeads, arrive.bytes).ptr), ptrArg(xs.ptr), intArg(nc), intArg(nt),
			f32Arg(vscale)); err != nil {
			return err
		}
	}
	return nil
}

// flashMMA launches attention_mma.cu's kernel of mode ("whole" or
// "split") on Work blocks r of warps warps, z blocks a tile.
func (k *K) flashMMA(out, parts, q Buf, p *KVPool, b *Batch, H int, scale float32, r flashRange, mode string, warps, z int) error {
	terms := 3
	if flashOneTerm(p) {
		terms = 1
	}
	// Pipelined copies (_p) where the variant exists: a BF16 cache, head
	// dims 64 and 128.
	pipe, kvBufs, qterms := "", 1, 3 // the default kernels stage all three q terms
	if flashPipelined && p.DType == kernels.KVBF16 && (p.HeadDim == 64 || p.HeadDim == 128) {
		pipe, kvBufs, qterms = "_p", 2, r.qterms
	}
	shmem := (warps*qterms*16 + kvBufs*2*terms*flashChunk) * (p.HeadDim + 8) * 2
	return k.d.launch(fmt.Sprintf("lb_flash_d%d_k%d_%s%s%s", p.HeadDim, terms, mode, r.suffix, pipe), [3]int{r.last - r.first, p.KVHeads, z},
		[3]int{32 * warps, 1, 1}, shmem, ptrArg(out.ptr), ptrArg(parts.ptr), ptrArg(q.ptr), ptrArg(p.K.ptr), ptrArg(p.V.ptr),
		intArg(int(p.DType)), f32Arg(p.KScale), f32Arg(p.VScale), ptrArg(b.Tables.ptr), intArg(b.Stride), ptrArg(b.Seq.ptr),
		ptrArg(b.Pos.ptr), ptrArg(b.PartOff.ptr), ptrArg(b.Work.Slice(8*r.first, b.Work.bytes).ptr), intArg(p.BlockSize), intArg(H),
		intArg(p.KVHeads), f32Arg(scale))
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
