//go:build cgo

package cuda

import (
	"fmt"
	"os"

	"github.com/lowbit-ai/lowbit/kernels"
)

// Weight is a kernels.Weight whose data and scales live on the device.
// Tiled means Data holds a BF16 weight in mma tiles (matmul_mma.cu,
// TileWeight), the layout the tensor-core kernels read.
type Weight struct {
	Format      kernels.WeightFormat
	Out, In     int
	Data        Buf
	Scales      Buf
	GlobalScale float32
	Act         kernels.ActQuant
	InputScale  float32
	Tiled       bool
	// Rows holds a tiled weight's BF16 values row-major as well, for the
	// cuBLASLt prefill matmul (MatMulLt); empty unless the runtime asks.
	Rows Buf
}

// Tensor-core matmul constants of matmul_mma.cu.
const (
	mmaSpan       = 16  // MMA_SPAN: chunks of 16 columns a span
	mmaRowPad     = 128 // MMA_ROW_PAD
	mmaTokPad     = 128 // MMA_TOK_PAD
	mmaGemvGroups = 4   // MMA_GEMV_GROUPS
	mmaGemvWarps  = 4   // MMA_GEMV_WARPS
	// mmaGemvShared bounds lb_mma_gemv's shared memory (an H100/H200 block
	// may take 227 KB).
	mmaGemvShared = 200 << 10
	// mmaGemvTokens is the most tokens the GEMVs take; more go to
	// lb_mma_gemm. Every kernel gives the same bits, so the cutoffs are a
	// matter of speed only.
	mmaGemvTokens = 32
	// lb_mma_gemv_wide (matmul_mma_wide.cu): blocks of mmaWideThreads
	// threads on mmaWideRows rows in clusters of mmaWideSplit along the
	// grid's y, a block's shared memory its stages (MMA_WIDE_STAGES ·
	// MMA_WIDE_KC chunks of 8 tiles and 4 groups' terms) plus its spans'
	// sums (4 KB a span and token group), at most what an sm_90 block may
	// take (227 KB).
	mmaWideRows      = 128
	mmaWideThreads   = 128
	mmaWideSplit     = 8
	mmaWideStages    = 3 * 2 * (8*512 + mmaGemvGroups*768)
	mmaWideMaxShared = maxBlockShared
	// maxBlockShared is the most shared memory an sm_90 block may take.
	maxBlockShared = 227 << 10
)

// mmaWideFrom is the fewest tokens lb_mma_gemv_wide takes (on sm_90 and
// later, up to mmaGemvTokens; fewer go to lb_mma_gemv). From 9 tokens (two
// groups of 8) lb_mma_gemv reads 3 or more bytes of activation terms from
// L2 a byte of weights (1.5 at one group, 0.19 at a single token, whose
// lanes past T load nothing), where lb_mma_gemv_wide reads 0.375 to 0.75.
// Measured on the H200 (of the copy rate, lb_mma_gemv / lb_mma_gemv_wide,
// 4096×4096, 12288×4096, 4096×12288): T=8 0.57/0.46, 0.56/0.62,
// 0.59/0.55; T=16 0.37/0.42, 0.38/0.48, 0.39/0.31; T=32 0.22/0.34,
// 0.23/0.41, 0.12/0.21. So lb_mma_gemv keeps 8 tokens and fewer, and
// 9-16 tokens on inputs of more than 32 spans (the down projection: 6
// spans' sums a block leave room for one block an SM). Tests and
// benchmarks set mmaWideFrom (1: lb_mma_gemv_wide for every T, whatever
// the input; above mmaGemvTokens: never).
var mmaWideFrom = 9

// mmaBulkGroups is the most token groups of 8 lb_mma_gemv_bulk takes (on
// sm_90 and later; more go to lb_mma_gemv_wide or lb_mma_gemv, as useWide
// decides). Measured on the H200 (µs, 4096×4096, 12288×4096, 4096×12288;
// lb_mma_gemv_bulk against the faster of lb_mma_gemv and
// lb_mma_gemv_wide): T=1 11.2, 32.1, 32.6 against 13.4, 40.0, 39.9; T=8
// 11.5, 35.7, 34.0 against 13.9, 39.0, 40.9; T=16 15.9, 48.8, 52.9 against
// 19.2, 49.6, 61.1; T=32 25.8, 74.9, 118.3 against 23.8, 58.3, 115.1 (the
// activation terms of 4 groups, 6 bytes of L2 reads a weight byte). Tests
// and benchmarks set it (0: never; mmaGemvTokens/8: every T).
var mmaBulkGroups = 2

// mmaBulk1Groups is the most token groups of 8 lb_mma_gemv_bulk1 takes on
// BF16 activations (Terms of one term): all four of mmaGemvTokens, since
// reading hi alone is 2 bytes of L2 a weight byte at four groups. Tests
// set it (0: never, so that the three-term kernels run those terms).
var mmaBulk1Groups = mmaGemvTokens / 8

// lb_mma_gemv_tiles1_m2 (matmul_mma_bulk.cu) runs BF16 terms of
// mmaTiles1From tokens and more (up to mmaGemvTokens) on inputs of more
// than mmaTiles1Spans spans, on sm_90, in place of lb_mma_gemv_bulk1:
// blocks of mmaTiles1MT row tiles (2; _m4 is 4) that read each activation
// fragment once for all of them, of mmaTiles1Warps warps (0: as many as
// fit, up to 8) and a ring of mmaTiles1Ring spans a warp. Measured on the
// H200 (of the copy rate, lb_mma_gemv_bulk1 / _m2 / _m4): T=32 4096×4096
// .531/.542/.277, 12288×4096 .524/.502/.347, 4096×12288 .357/.476/.299;
// T=16 .738/.736/.490, .695/.666/.569, .731/.653/.518. So only the down
// projection's 48 spans at more than 16 tokens, where lb_mma_gemv_bulk1's
// span sums fill shared memory. Tests and benchmarks set them
// (mmaTiles1From above mmaGemvTokens: never; mmaTiles1Spans 0: any input).
var (
	mmaTiles1From  = 17
	mmaTiles1Spans = 16
	mmaTiles1MT    = 2
	mmaTiles1Warps = 0
	mmaTiles1Ring  = 1
)

// lb_mma_gemv_bulk's block (warps, up to mmaBulkWarpsMax = MMA_BULK_WARPS
// in matmul_mma_bulk.cu, and no more than the input's spans) and ring
// (spans in flight a warp, up to mmaBulkRingMax = MMA_BULK_RING_MAX): one
// span a warp measured fastest on the H200 (a deeper ring only cost
// blocks an SM); benchmarks and tests set both. mmaBulkWarps 0 picks by
// the grid (bulkShape).
var (
	mmaBulkWarps = 0
	mmaBulkRing  = 1
)

const (
	mmaBulkWarpsMax = 8
	mmaBulkRingMax  = 2
)

// bulkShape returns lb_mma_gemv_bulk's warps a block and ring on an input
// of spans spans, for a launch of blocks blocks on sms SMs. Blocks of 8
// warps (128 registers a thread: two an SM) unless that takes a second,
// partial wave where blocks of 4 (four an SM) fit in one: the packed q, k
// and v projections of Qwen3-8B are 384 row tiles on 132 SMs.
func bulkShape(spans, blocks, sms int) (warps, ring int) {
	warps = mmaBulkWarps
	if warps == 0 {
		warps = mmaBulkWarpsMax
		if blocks > 2*sms && blocks <= 4*sms {
			warps = mmaBulkWarpsMax / 2
		}
	}
	warps = max(1, min(warps, mmaBulkWarpsMax, spans))
	ring = max(1, min(mmaBulkRing, mmaBulkRingMax, (spans+warps-1)/warps))
	return warps, ring
}

// useBulk reports whether lb_mma_gemv_bulk may run a batch of groups token
// groups (MatMulTerms tries it before lb_mma_gemv_wide).
func (k *K) useBulk(groups int) bool {
	return k.d.Major >= 9 && groups <= mmaBulkGroups
}

// useWide reports whether lb_mma_gemv_wide runs T tokens on an input of
// spans spans.
func (k *K) useWide(T, spans int) bool {
	if k.d.Major < 9 || T < mmaWideFrom {
		return false
	}
	return mmaWideFrom == 1 || T > 16 || spans <= 4*mmaWideSplit
}

// usesMMA reports whether a weight runs on the tensor-core kernels: BF16
// weights with float32 activations.
func usesMMA(format kernels.WeightFormat, act kernels.ActQuant) bool {
	return format == kernels.WeightBF16 && act == kernels.ActNone
}

// TiledBytes returns the size of a [out, in] BF16 weight in mma tiles.
func TiledBytes(out, in int) int {
	return (out + mmaRowPad - 1) / mmaRowPad * mmaRowPad * (in + 15) / 16 * 16 * 2
}

// TileWeight writes the [out, in] BF16 weight raw (row-major) into dst in
// mma tiles (TiledBytes(out, in) bytes).
func (k *K) TileWeight(dst, raw Buf, out, in int) error {
	if dst.bytes < TiledBytes(out, in) || raw.bytes < 2*out*in {
		return fmt.Errorf("cuda: TileWeight of %dx%d into %d bytes from %d", out, in, dst.bytes, raw.bytes)
	}
	n := TiledBytes(out, in) / 16
	return k.d.launch("lb_mma_tile", grid1(n, 256), [3]int{256, 1, 1}, 0, ptrArg(dst.ptr), ptrArg(raw.ptr), intArg(out), intArg(in))
}

var weightFormatIDs = map[kernels.WeightFormat]int{kernels.WeightBF16: 1, kernels.WeightFP8Channel: 2,
	kernels.WeightFP8Tensor: 3, kernels.WeightFP8Block: 4, kernels.WeightNVFP4: 5}

var actIDs = map[kernels.ActQuant]int{kernels.ActNone: 0, kernels.ActFP8Token: 1, kernels.ActFP8Tensor: 2,
	kernels.ActFP8Group128: 3, kernels.ActNVFP4: 4}

// MatMul: y [T, w.Out] = x [T, w.In] · wᵀ with the weight's numerics
// (act_quant.cu, matmul.cu; tiled BF16 weights: matmul_mma.cu).
func (k *K) MatMul(y, x Buf, T int, w *Weight) error {
	d := k.d
	if w.Tiled {
		return k.matmulMMA(y, x, T, w)
	}
	act := actIDs[w.Act]
	xe, xs := x, Buf{}
	if act != 0 {
		group := map[int]int{1: w.In, 2: w.In, 3: 128, 4: 16}[act]
		ng := w.In / group
		var err error
		if xe, err = d.persistent("act_quant_x", 4*T*w.In); err != nil {
			return err
		}
		if xs, err = d.persistent("act_quant_scales", 4*T*ng); err != nil {
			return err
		}
		if err := d.launch("lb_act_quant", [3]int{T * ng, 1, 1}, [3]int{min(256, max(32, (group+31)/32*32)), 1, 1}, 0,
			ptrArg(xe.ptr), ptrArg(xs.ptr), ptrArg(x.ptr), intArg(w.In), intArg(act), f32Arg(w.InputScale)); err != nil {
			return err
		}
	}
	const warps = 8
	return d.launch("lb_matmul", [3]int{(w.Out + warps - 1) / warps, T, 1}, [3]int{32 * warps, 1, 1}, 0,
		ptrArg(y.ptr), ptrArg(xe.ptr), ptrArg(xs.ptr), ptrArg(w.Data.ptr), ptrArg(w.Scales.ptr), f32Arg(w.GlobalScale),
		intArg(T), intArg(w.Out), intArg(w.In), intArg(weightFormatIDs[w.Format]), intArg(act))
}

// lb_mma_gemm's block: 128 rows, 512 threads, three stages of four chunks
// in shared memory.
const (
	gemmRows    = 128
	gemmThreads = 512
	gemmShared  = 3 * 4 * (8*512 + 16*768)
)

// matmulMMA runs a tiled BF16 weight on the tensor cores.
func (k *K) matmulMMA(y, x Buf, T int, w *Weight) error {
	return k.MatMulShared(x, T, []Buf{y}, []*Weight{w})
}

// MatMulShared runs MatMul for several weights that read the same x (a
// layer's q, k and v, or gate and up) with one split of x into mma terms
// when the weights are tiled.
func (k *K) MatMulShared(x Buf, T int, ys []Buf, ws []*Weight) error {
	return k.matMulShared(x, T, ys, ws, 3)
}

// MatMulSharedBF16 is MatMulShared with x taken as BF16 by the tiled
// weights (TermsBF16For: each value rounded to the nearest BF16); other
// weights take it as float32.
func (k *K) MatMulSharedBF16(x Buf, T int, ys []Buf, ws []*Weight) error {
	return k.matMulShared(x, T, ys, ws, 1)
}

func (k *K) matMulShared(x Buf, T int, ys []Buf, ws []*Weight, nt int) error {
	if len(ys) != len(ws) {
		return fmt.Errorf("cuda: MatMulShared of %d outputs and %d weights", len(ys), len(ws))
	}
	if T == 0 || len(ws) == 0 {
		return nil
	}
	in := ws[0].In
	for i, w := range ws {
		if !w.Tiled || w.In != in {
			if err := k.MatMul(ys[i], x, T, w); err != nil {
				return err
			}
			ws, ys = append(ws[:i:i], ws[i+1:]...), append(ys[:i:i], ys[i+1:]...)
			return k.matMulShared(x, T, ys, ws, nt)
		}
	}
	t, err := k.termsFor(T, in, nt)
	if err != nil {
		return err
	}
	if err := k.Split(t, x); err != nil {
		return err
	}
	return k.MatMulTerms(t, ys, ws)
}

// Terms is an activation matrix [T, In] held as mma terms (matmul_mma.cu),
// the tensor-core kernels' input, padded to the token groups its kernel
// reads. Every Terms of a device shares one buffer: a Terms is valid until
// the next TermsFor or TermsBF16For. nt is how many terms its producers
// write: 3 (float32 activations) or 1 (BF16 activations: the round to
// nearest BF16 of each value, its mid and lo terms zeros).
type Terms struct {
	buf               Buf
	T, In, groups, nt int
}

// TermsFor returns the terms buffer for a [T, in] float32 input.
func (k *K) TermsFor(T, in int) (Terms, error) {
	return k.termsFor(T, in, 3)
}

// TermsBF16For returns the terms buffer for a [T, in] input that the
// matmuls take as BF16: its producers round each value to the nearest BF16
// (as torch's .to(torch.bfloat16)), and lb_mma_gemv_bulk1 reads that one
// term. Every kernel gives the same bits on it.
func (k *K) TermsBF16For(T, in int) (Terms, error) {
	return k.termsFor(T, in, 1)
}

func (k *K) termsFor(T, in, nt int) (Terms, error) {
	return k.termsIn("mma_terms", T, in, nt)
}

// termsIn returns terms of nt terms for a [T, in] input in the device's
// persistent buffer name.
func (k *K) termsIn(name string, T, in, nt int) (Terms, error) {
	groups := (T + 7) / 8
	if T > mmaGemvTokens {
		groups = (T + mmaTokPad - 1) / mmaTokPad * mmaTokPad / 8
	}
	nc := (in + 15) / 16
	b, err := k.d.persistent(name, groups*nc*3*32*8)
	return Terms{b, T, in, groups, nt}, err
}

// Split writes x [T, In] float32 into t (lb_mma_split), as t's terms.
func (k *K) Split(t Terms, x Buf) error {
	nc := (t.In + 15) / 16
	return k.d.launch("lb_mma_split", grid1(t.groups*nc*32, 256), [3]int{256, 1, 1}, 0,
		ptrArg(t.buf.ptr), ptrArg(x.ptr), intArg(t.T), intArg(t.In), intArg(t.groups), intArg(t.nt))
}

// AddRMSNormTerms is AddRMSNorm writing its output into t (t.In = D)
// instead of float32; a zero h skips the add (a plain RMSNorm of x).
func (k *K) AddRMSNormTerms(x, h Buf, t Terms, w Buf, D int, eps float32, zeroCentered bool) error {
	if t.In != D {
		return fmt.Errorf("cuda: AddRMSNormTerms of width %d into terms of %d", D, t.In)
	}
	if err := rmsWidth("AddRMSNormTerms", D); err != nil {
		return err
	}
	if 8*D+4*rmsMaxWidth/16 > maxBlockShared {
		return fmt.Errorf("cuda: AddRMSNormTerms of width %d: its row and gains (8 bytes a column) exceed a block's shared memory", D)
	}
	return k.d.launch("lb_add_rmsnorm_terms", [3]int{t.T, 1, 1}, [3]int{256, 1, 1}, 8*D,
		ptrArg(x.ptr), ptrArg(h.ptr), ptrArg(t.buf.ptr), ptrArg(w.ptr), intArg(D), f32Arg(eps), flagArg(zeroCentered), intArg((D+15)/16), intArg(t.nt))
}

// SiLUMulTerms is SiLUMul over [T, D] writing into t (t.In = D).
func (k *K) SiLUMulTerms(t Terms, gate, up Buf, D int) error {
	if t.In != D {
		return fmt.Errorf("cuda: SiLUMulTerms of width %d into terms of %d", D, t.In)
	}
	nc := (D + 15) / 16
	return k.d.launch("lb_silu_mul_terms", grid1(t.T*nc*8, 256), [3]int{256, 1, 1}, 0,
		ptrArg(t.buf.ptr), ptrArg(gate.ptr), ptrArg(up.ptr), intArg(t.T), intArg(D), intArg(nc), intArg(t.nt))
}

// MatMulTerms runs tiled weights ws (In = t.In) on the input t, up to
// mmaGemvTokens tokens by a GEMV (up to three weights a launch): on sm_90
// lb_mma_gemv_bulk up to 8·mmaBulkGroups tokens (lb_mma_gemv_bulk1 up to
// 8·mmaBulk1Groups on BF16 terms), then lb_mma_gemv_wide from mmaWideFrom;
// else lb_mma_gemv; more tokens by lb_mma_gemm. Every kernel gives the
// same bits.
func (k *K) MatMulTerms(t Terms, ys []Buf, ws []*Weight) error {
	d := k.d
	if len(ys) != len(ws) {
		return fmt.Errorf("cuda: MatMulTerms of %d outputs and %d weights", len(ys), len(ws))
	}
	for _, w := range ws {
		if !w.Tiled || w.In != t.In {
			return fmt.Errorf("cuda: MatMulTerms: a %dx%d weight (tiled %v) on terms of width %d", w.Out, w.In, w.Tiled, t.In)
		}
	}
	if t.T == 0 {
		return nil
	}
	in, T := t.In, t.T
	nc := (in + 15) / 16
	spans := (nc + mmaSpan - 1) / mmaSpan
	if T > mmaGemvTokens {
		tb := (T + mmaTokPad - 1) / mmaTokPad
		for i, w := range ws {
			if err := d.launch("lb_mma_gemm", [3]int{(w.Out + gemmRows - 1) / gemmRows, tb, 1}, [3]int{gemmThreads, 1, 1}, gemmShared,
				ptrArg(ys[i].ptr), ptrArg(w.Data.ptr), ptrArg(t.buf.ptr), intArg(T), intArg(w.Out), intArg(in)); err != nil {
				return err
			}
		}
		return nil
	}
	if ok, err := k.gemvTiles1(t, ys, ws); ok {
		return err
	}
	if ok, err := k.gemvBulk(t, ys, ws, 0, Buf{}); ok {
		return err
	}
	if k.useWide(T, spans) {
		shared := mmaWideStages + (spans+mmaWideSplit-1)/mmaWideSplit*t.groups*4096
		if shared <= mmaWideMaxShared {
			return k.gemvLaunches(ys, ws, "lb_mma_gemv_wide", mmaWideRows, mmaWideThreads, mmaWideSplit, shared,
				ptrArg(t.buf.ptr), intArg(T), intArg(in))
		}
	}
	const slots = mmaGemvWarps * 2 * mmaSpan * 512
	gpb, ok := gemvGroups(t.groups, spans, slots)
	if !ok {
		return fmt.Errorf("cuda: MatMul: in = %d above the tensor-core GEMV's %d", in, (mmaGemvShared-slots)/512*mmaSpan*16)
	}
	return k.gemvLaunches(ys, ws, "lb_mma_gemv", 16, 32*mmaGemvWarps, (t.groups+gpb-1)/gpb, slots+spans*gpb*512,
		ptrArg(t.buf.ptr), intArg(T), intArg(in), intArg(gpb))
}

// gemvBulk launches lb_mma_gemv_bulk (or, on BF16 terms,
// lb_mma_gemv_bulk1) for the terms t over the tiled weights ws, and
// reports whether it could: on sm_90, up to 8·mmaBulkGroups tokens (BF16:
// 8·mmaBulk1Groups), with room in shared memory. acc and sums as
// lb_mma_gemv_bulk's (sums: a zero Buf for none).
func (k *K) gemvBulk(t Terms, ys []Buf, ws []*Weight, acc int, sums Buf) (bool, error) {
	xs, T, in := t.buf, t.T, t.In
	groups := (T + 7) / 8
	name := "lb_mma_gemv_bulk"
	if t.nt == 1 {
		name = "lb_mma_gemv_bulk1"
		if k.d.Major < 9 || groups > mmaBulk1Groups {
			return false, nil
		}
	} else if !k.useBulk(groups) {
		return false, nil
	}
	spans := ((in+15)/16 + mmaSpan - 1) / mmaSpan
	tiles := 0 // the first launch's row tiles (gemvLaunches: up to three weights)
	for _, w := range ws[:min(3, len(ws))] {
		tiles += (w.Out + 15) / 16
	}
	// The grid's rows of token groups as 8-warp blocks would have them
	// (smaller blocks may only carry more groups each).
	gpb, _ := gemvGroups(groups, spans, mmaBulkWarpsMax*mmaSpan*512)
	warps, ring := bulkShape(spans, tiles*((groups+gpb-1)/gpb), k.d.SMs)
	slots := warps * ring * mmaSpan * 512
	gpb, ok := gemvGroups(groups, spans, slots)
	if !ok {
		return false, nil
	}
	shared := slots + spans*gpb*512
	if sums.ptr != 0 {
		shared += gpb * 512 // the new y's rows, for their tile sums
		if shared > mmaGemvShared {
			return false, nil
		}
	}
	return true, k.gemvLaunches(ys, ws, name, 16, 32*warps, (groups+gpb-1)/gpb, shared,
		ptrArg(xs.ptr), intArg(T), intArg(in), intArg(gpb), intArg(ring), intArg(acc), ptrArg(sums.ptr))
}

// siluInGemv is whether MatMulSiLUTerms runs (LOWBIT_SILU_GEMV=0: the
// caller's unfused path, to measure).
var siluInGemv = os.Getenv("LOWBIT_SILU_GEMV") != "0"

// MatMulSiLUTerms writes silu(gate·x)·(up·x) into out (out.In =
// gate.Out) for the BF16 terms t of x, with lb_mma_gemv_bulk1_silu: the
// bits of MatMulTerms into gate and up then SiLUMulTerms, in one launch. It
// reports false, and does nothing, where that kernel does not run (more
// than 8 tokens, three-term activations, untiled or unequal weights,
// before sm_90); the caller then runs those two. out must not share t's
// buffer (SiLUTermsFor).
func (k *K) MatMulSiLUTerms(t, out Terms, gate, up *Weight) (bool, error) {
	if !siluInGemv || k.d.Major < 9 || t.nt != 1 || t.T == 0 || t.T > 8 || !gate.Tiled || !up.Tiled ||
		gate.Out != up.Out || gate.In != t.In || up.In != t.In || out.In != gate.Out || out.T != t.T {
		return false, nil
	}
	if out.buf.ptr == t.buf.ptr {
		return false, fmt.Errorf("cuda: MatMulSiLUTerms: the output terms share the input's buffer")
	}
	spans := ((t.In+15)/16 + mmaSpan - 1) / mmaSpan
	half := min(mmaBulkWarpsMax/2, spans)
	shared := 2*half*mmaSpan*512 + 2*spans*512
	if shared > mmaGemvShared {
		return false, nil
	}
	return true, k.d.launch("lb_mma_gemv_bulk1_silu", [3]int{(gate.Out + 15) / 16, 1, 1}, [3]int{64 * half, 1, 1}, shared,
		ptrArg(out.buf.ptr), ptrArg(gate.Data.ptr), ptrArg(up.Data.ptr), intArg(gate.Out), intArg((gate.Out+15)/16),
		intArg(out.nt), ptrArg(t.buf.ptr), intArg(t.T), intArg(t.In), intArg(1))
}

// SiLUTermsFor returns BF16 terms for a [T, in] input in a buffer of their
// own, apart from TermsFor's: MatMulSiLUTerms writes them while it still
// reads its input terms.
func (k *K) SiLUTermsFor(T, in int) (Terms, error) {
	return k.termsIn("mma_terms_silu", T, in, 1)
}

// MatMulTermsAdd is y += w·x for the terms t of x, where MatMulTerms would
// run lb_mma_gemv_bulk or _bulk1 (a decode step of a few tokens): the
// float32 sum each output gets is MatMulTerms's, added to y once, the bits
// of MatMulTerms then Add. It reports false, and does nothing, where
// another kernel would run. The kernel reads y's old values before it
// waits for the kernel launched just before it (programmatic dependent
// launch), so that one must not write y. Unless sums is a zero Buf, it
// also writes the new y's RMS tile sums there (RMSSumsFor), for an
// RMSInput of y.
func (k *K) MatMulTermsAdd(t Terms, y Buf, w *Weight, sums Buf) (bool, error) {
	if !w.Tiled || w.In != t.In {
		return false, fmt.Errorf("cuda: MatMulTermsAdd: a %dx%d weight (tiled %v) on terms of width %d", w.Out, w.In, w.Tiled, t.In)
	}
	if sums.ptr != 0 && sums.bytes < 4*t.T*((w.Out+15)/16) {
		return false, fmt.Errorf("cuda: MatMulTermsAdd: %d bytes for the sums of %d rows of %d", sums.bytes, t.T, w.Out)
	}
	if t.T == 0 || t.T > mmaGemvTokens || t.nt == 1 && t.T >= mmaTiles1From {
		return false, nil
	}
	return k.gemvBulk(t, []Buf{y}, []*Weight{w}, 1, sums)
}

// RMSNormTerms writes RMSNorm(x) [T, D] into t (t.In = D) as
// AddRMSNormTerms without h does, bit for bit, each row spread over
// ⌈D / 512⌉ blocks (lb_rmsnorm_terms_slices): for decode steps, whose few
// rows would otherwise run on as many SMs.
func (k *K) RMSNormTerms(x Buf, t Terms, w Buf, D int, eps float32, zeroCentered bool) error {
	if t.In != D {
		return fmt.Errorf("cuda: RMSNormTerms of width %d into terms of %d", D, t.In)
	}
	if err := rmsWidth("RMSNormTerms", D); err != nil {
		return err
	}
	nc := (D + 15) / 16
	return k.d.launch("lb_rmsnorm_terms_slices", [3]int{t.T, (nc*8 + 255) / 256, 1}, [3]int{256, 1, 1}, 0,
		ptrArg(x.ptr), ptrArg(t.buf.ptr), ptrArg(w.ptr), intArg(D), f32Arg(eps), flagArg(zeroCentered), intArg(nc), intArg(t.nt))
}

// gemvTiles1 launches lb_mma_gemv_tiles1_m2 or _m4 for the BF16 terms t
// over the tiled weights ws, and reports whether it could: on sm_90, from
// mmaTiles1From tokens, with room in shared memory.
func (k *K) gemvTiles1(t Terms, ys []Buf, ws []*Weight) (bool, error) {
	spans := ((t.In+15)/16 + mmaSpan - 1) / mmaSpan
	if t.nt != 1 || k.d.Major < 9 || t.T < mmaTiles1From || t.T > mmaGemvTokens || spans <= mmaTiles1Spans {
		return false, nil
	}
	mt, ring := mmaTiles1MT, max(1, min(mmaTiles1Ring, mmaBulkRingMax))
	warps, shared, ok := tiles1Shape(mt, mmaTiles1Warps, ring, (t.T+7)/8, spans)
	if !ok {
		return false, nil
	}
	name := "lb_mma_gemv_tiles1_m2" // tiles1Shape took mt: 2 or 4
	if mt == 4 {
		name = "lb_mma_gemv_tiles1_m4"
	}
	return true, k.gemvLaunches(ys, ws, name, 16*mt, 32*warps, 1, shared,
		ptrArg(t.buf.ptr), intArg(t.T), intArg(t.In), intArg(ring))
}

// tiles1Shape returns lb_mma_gemv_tiles1's warps a block and its shared
// memory for mt row tiles (2 or 4), groups token groups and a ring of
// ring spans a warp: warps as asked (0: up to mmaBulkWarpsMax, as many
// as fit a block's shared memory), no more than the spans; false if none
// fits or mt is not 2 or 4.
func tiles1Shape(mt, warps, ring, groups, spans int) (int, int, bool) {
	if mt != 2 && mt != 4 {
		return 0, 0, false
	}
	shared := func(w int) int { return w*ring*mt*mmaSpan*512 + (w+1)*groups*mt*512 }
	if warps == 0 {
		warps = mmaBulkWarpsMax
		for warps > 1 && shared(warps) > maxBlockShared-1024 {
			warps--
		}
	}
	warps = max(1, min(warps, mmaBulkWarpsMax, spans))
	return warps, shared(warps), shared(warps) <= maxBlockShared-1024
}

// gemvGroups returns the token groups a block of lb_mma_gemv or
// lb_mma_gemv_bulk carries: as many of groups as shared memory holds next
// to the weight slots (slots bytes), up to mmaGemvGroups (a span's sums
// take 512 bytes a group); false if not even one fits.
func gemvGroups(groups, spans, slots int) (int, bool) {
	gpb := min(mmaGemvGroups, groups, max(1, (mmaGemvShared-slots)/(spans*512)))
	return gpb, slots+spans*gpb*512 <= mmaGemvShared
}

// gemvLaunches launches GEMV kernel name over weights ws, up to three a
// launch (their blocks of rows rows side by side along the grid's x) in
// blocks of threads threads, with the kernel's remaining arguments rest.
func (k *K) gemvLaunches(ys []Buf, ws []*Weight, name string, rows, threads, gridY, shared int, rest ...arg) error {
	for len(ws) > 0 {
		n := min(3, len(ws))
		var args []arg
		tiles := 0
		for i := range 3 {
			if i < n {
				args = append(args, ptrArg(ys[i].ptr), ptrArg(ws[i].Data.ptr), intArg(ws[i].Out))
				tiles += (ws[i].Out + rows - 1) / rows
			} else {
				args = append(args, ptrArg(0), ptrArg(0), intArg(0))
			}
		}
		if err := k.d.launch(name, [3]int{tiles, gridY, 1}, [3]int{threads, 1, 1}, shared, append(args, rest...)...); err != nil {
			return err
		}
		ys, ws = ys[n:], ws[n:]
	}
	return nil
}
