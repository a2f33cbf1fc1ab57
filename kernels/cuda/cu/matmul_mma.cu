// matmul_mma.cu: y[t,o] = Σ_i x[t,i]·w[o,i] for BF16 weights and float32
// activations (ActNone) on the tensor cores: mma.sync m16n8k16, BF16 in,
// float32 accumulate. The float32 activations stay float32 in effect: each x
// is split into three BF16 terms, x = hi + mid + lo with |x − hi − mid − lo|
// ≤ 2^-24·|x| (each term the round-to-nearest BF16 of the remainder, every
// remainder exact in float32), and each weight tile meets all three, so the
// products are those of float32 activations (kernels.Ops' contract); the
// sums round as the tensor cores' float32 accumulation does.
//
// Layouts:
//   - weights in "mma tiles" (lb_mma_tile writes them): w [out, in] BF16 as
//     tiles of 16 rows × 16 columns, tile (m, c) at elements ((m·nc) + c)·256
//     with nc = ceil(in / 16); rows padded with zeros to a multiple of
//     MMA_ROW_PAD, columns to 16. Inside a tile, lane l = 4g + q holds its A
//     fragment, elements (g, 2q), (g, 2q+1), (g+8, 2q), (g+8, 2q+1),
//     (g, 2q+8), (g, 2q+9), (g+8, 2q+8), (g+8, 2q+9): one 16-byte load a
//     lane, 512 contiguous bytes a warp.
//   - activations in "mma terms" (lb_mma_split, or the producers through
//     mma_put_terms in common.cuh): for each
//     group n of 8 tokens, column chunk c and term (hi, mid, lo), 32 lanes
//     × 2 words: lane 4g + q holds token 8n + g's columns (16c + 2q, +1) and
//     (16c + 2q + 8, +9) as BF16 pairs, the lower column in the low half.
//     lb_mma_gemm reads groups padded to a multiple of MMA_TOK_PAD tokens
//     (what the padding tokens hold only reaches their own, unstored,
//     output columns); columns past in must be zeros.
//   - x [T, in] and y [T, out] float32, row-major.
//
// Reduction order, which makes results batch invariant: the columns form
// spans of MMA_SPAN chunks of 16; within a span, chunk by chunk in order,
// the hi, mid and lo products accumulate in that order into a float32
// fragment that starts at 0; the spans' sums are then added in order to 0.
// lb_mma_gemv (up to 8 tokens: one block a row tile, its warps taking
// spans in turn, the spans added from shared memory), lb_mma_gemv_wide
// (matmul_mma_wide.cu, 9 to 32 tokens: a cluster of 8 blocks a 128-row
// block, the spans split over the blocks and added through distributed
// shared memory) and lb_mma_gemm (more tokens: one warp a 32-row ×
// 32-token tile over every span, the spans added in registers) all follow
// it, so y[t, o] depends only on x[t], w[o] and in: not on T, the batch,
// or which kernel ran.
#define MMA_SPAN 16
#define MMA_ROW_PAD 128
#define MMA_TOK_PAD 128
#define MMA_GEMV_GROUPS 4 // token groups of 8 one gemv block carries at most

// mma_load_x returns x[t, col] or 0 outside [T, in].
__device__ __forceinline__ float mma_load_x(const float *x, int T, int in, int t, int col) {
	return (t < T && col < in) ? x[(i64)t * in + col] : 0.0f;
}

// lb_mma_tile rearranges w [out, in] BF16 into mma tiles (dst holds
// ceil(out / MMA_ROW_PAD)·MMA_ROW_PAD/16 · nc tiles): one thread a (tile, lane).
extern "C" __global__ void lb_mma_tile(uint4 *dst, const u16 *w, int out, int in) {
	lb_pdl_wait();
	int nc = (in + 15) / 16, rows = (out + MMA_ROW_PAD - 1) / MMA_ROW_PAD * MMA_ROW_PAD;
	i64 id = (i64)blockIdx.x * blockDim.x + threadIdx.x;
	if (id >= (i64)(rows / 16) * nc * 32) return;
	int lane = (int)(id & 31);
	i64 tile = id >> 5;
	int m = (int)(tile / nc), c = (int)(tile % nc), g = lane >> 2, q = lane & 3;
	u32 v[8];
#pragma unroll
	for (int j = 0; j < 8; j++) {
		int r = 16 * m + g + ((j >> 1) & 1) * 8, col = 16 * c + 2 * q + (j & 1) + (j >> 2) * 8;
		v[j] = (r < out && col < in) ? w[(i64)r * in + col] : 0u;
	}
	uint4 p;
	p.x = v[0] | v[1] << 16;
	p.y = v[2] | v[3] << 16;
	p.z = v[4] | v[5] << 16;
	p.w = v[6] | v[7] << 16;
	dst[id] = p;
}

// lb_mma_split writes x [T, in] as mma terms for groups token groups of 8
// (zeros past T), nt terms (3, or 1 for BF16 activations: mma_terms_n):
// one thread a (group, chunk, lane).
extern "C" __global__ void lb_mma_split(uint2 *xs, const float *x, int T, int in, int groups, int nt) {
	lb_pdl_wait();
	int nc = (in + 15) / 16;
	i64 id = (i64)blockIdx.x * blockDim.x + threadIdx.x;
	if (id >= (i64)groups * nc * 32) return;
	int lane = (int)(id & 31);
	i64 rest = id >> 5;
	int c = (int)(rest % nc), n = (int)(rest / nc), g = lane >> 2, q = lane & 3;
	int t = 8 * n + g, col = 16 * c + 2 * q;
	u32 b0[3], b1[3]; // columns 2q, 2q+1 and 2q+8, 2q+9 of each term
	mma_terms_n(mma_load_x(x, T, in, t, col), mma_load_x(x, T, in, t, col + 1), &b0[0], &b0[1], &b0[2], nt);
	mma_terms_n(mma_load_x(x, T, in, t, col + 8), mma_load_x(x, T, in, t, col + 9), &b1[0], &b1[1], &b1[2], nt);
	uint2 *p = xs + ((rest * 3) << 5) + lane; // (group, chunk) then term then lane
#pragma unroll
	for (int j = 0; j < 3; j++) {
		uint2 v;
		v.x = b0[j];
		v.y = b1[j];
		p[j * 32] = v;
	}
}

// mma_span sums one span of a 16-row tile in the reduction order every
// kernel keeps: from 0, chunk by chunk, the hi, mid and lo products in
// that order. The span's nch weight fragments come from a shared-memory
// slot (each lane its own 16 bytes a tile); b(i, j) gives chunk i's term j
// as a B fragment. HOLD reads all the fragments before the chain of mma,
// so that it waits on no load (64 registers); else each is read by its
// chunk, for kernels that trade that latency for occupancy. TERMS 1 takes
// hi alone (BF16 activations, whose mid and lo are zeros: the same sums).
// regs, where given, holds the span's fragments in registers already
// (mma_bulk_spans's first span), read instead of the slot.
// mma_span_load reads a span's nch weight fragments into a: each lane its
// 16 bytes a tile from the slot, or from regs where given.
__device__ __forceinline__ void mma_span_load(uint4 *a, const uint4 *slot, int nch, int lane, const uint4 *regs = 0) {
#pragma unroll
	for (int i = 0; i < MMA_SPAN; i++)
		if (i < nch) a[i] = regs ? regs[i] : slot[i * 32 + lane];
}

template <bool HOLD = true, int TERMS = 3, typename BFrag>
__device__ __forceinline__ void mma_span(float *acc, const uint4 *slot, int nch, int lane, BFrag b,
                                         const uint4 *regs = 0) {
	uint4 a[HOLD ? MMA_SPAN : 1];
	if (HOLD) mma_span_load(a, slot, nch, lane, regs);
	acc[0] = acc[1] = acc[2] = acc[3] = 0.0f;
#pragma unroll
	for (int i = 0; i < MMA_SPAN; i++) {
		if (i < nch) {
			if (!HOLD) a[0] = regs ? regs[i] : slot[i * 32 + lane];
#pragma unroll
			for (int j = 0; j < TERMS; j++) {
				uint2 v = b(i, j);
				mma_bf16(acc, a[HOLD ? i : 0], v.x, v.y);
			}
		}
	}
}

// mma_pick finds which of up to three weights of the same input (their
// blocks of rows rows one after the other along blockIdx.x) block *m
// belongs to, and makes *m its block within that weight.
__device__ __forceinline__ void mma_pick(int *m, int rows, float **y, const uint4 **w, int *out, float *y0,
                                         const uint4 *w0, int out0, float *y1, const uint4 *w1, int out1, float *y2,
                                         const uint4 *w2, int out2) {
	*y = y0, *w = w0, *out = out0;
	if (*m >= (out0 + rows - 1) / rows) {
		*m -= (out0 + rows - 1) / rows;
		*y = y1, *w = w1, *out = out1;
		if (*m >= (out1 + rows - 1) / rows) {
			*m -= (out1 + rows - 1) / rows;
			*y = y2, *w = w2, *out = out2;
		}
	}
}

// mma_part_put stores a lane's fragment acc of span s's sums for token
// group n (of ng) into part [spans][ng][16 rows][8 tokens]: element e is
// row g + 8·(e >> 1), token 2q + (e & 1).
__device__ __forceinline__ void mma_part_put(float *part, const float *acc, int s, int ng, int n, int lane) {
	int g = lane >> 2, q = lane & 3;
#pragma unroll
	for (int e = 0; e < 4; e++) part[((s * ng + n) * 16 + g + 8 * (e >> 1)) * 8 + 2 * q + (e & 1)] = acc[e];
}

// mma_gemv_span multiplies span s's weight tiles (in slot) by ng token
// groups from n0, writing each group's sums of the span to part [spans]
// [ng][16 rows][8 tokens]. A token group at a time: its 48 activation
// loads of the span issued at once (one latency, not one a chunk; the
// first group's before wait(), which returns once the slot's tiles have
// landed), then the span's 48 mma; TERMS 1 loads and multiplies hi alone
// (16 of each). regs: as mma_span's.
template <bool HOLD = true, int TERMS = 3, typename Wait>
__device__ __forceinline__ void mma_gemv_span(float *part, const uint4 *slot, const uint2 *xs, int nc, int s, int n0,
                                              int ng, int T, int lane, Wait wait, const uint4 *regs = 0) {
	int g = lane >> 2, c0 = s * MMA_SPAN, nch = min(MMA_SPAN, nc - c0);
	for (int n = 0; n < ng; n++) {
		const uint2 *bp = xs + (((i64)(n0 + n) * nc + c0) * 3 << 5) + lane;
		// Lane 4g + q carries token 8(n0 + n) + g: past T it reads
		// nothing and multiplies zeros, which reach only that token's
		// unstored column (a decode step's single token leaves 28 of
		// the 32 lanes without loads: 8x less activation traffic; 0.61
		// of the copy rate against 0.59 loading every lane, 4096², on
		// the H200).
		bool live = 8 * (n0 + n) + g < T;
		uint2 b[MMA_SPAN][TERMS];
#pragma unroll
		for (int i = 0; i < MMA_SPAN; i++)
			if (i < nch)
#pragma unroll
				for (int j = 0; j < TERMS; j++) {
					b[i][j].x = b[i][j].y = 0u;
					if (live) b[i][j] = __ldg(bp + (i * 3 + j) * 32);
				}
		if (n == 0) wait();
		float acc[4];
		mma_span<HOLD, TERMS>(acc, slot, nch, lane, [&](int i, int j) { return b[i][j]; }, regs);
		mma_part_put(part, acc, s, ng, n, lane);
	}
}

#define MMA_ADD_HELD 2 // the outputs a thread adds whose old y mma_gemv_held loads

// mma_gemv_held loads the old y that mma_gemv_add with acc adds to, for
// the first MMA_ADD_HELD of this thread's outputs (i = threadIdx.x,
// + blockDim.x, ...), into held: a kernel may load them before it waits,
// so that the load's latency leaves the tail of its last block (y must
// then not be written by the kernel launched just before; read from L2,
// which the kernels before it have flushed to by then).
__device__ __forceinline__ void mma_gemv_held(float *held, const float *y, int m, int out, int n0, int ng, int T) {
#pragma unroll
	for (int k = 0; k < MMA_ADD_HELD; k++) {
		int i = threadIdx.x + k * blockDim.x, n = i >> 7, r = (i >> 3) & 15, tk = i & 7;
		int row = 16 * m + r, t = 8 * (n0 + n) + tk;
		held[k] = (i < ng * 128 && row < out && t < T) ? __ldcg(y + (i64)t * out + row) : 0.0f;
	}
}

// mma_gemv_add writes y for row tile m and ng token groups from n0: each
// output the sum of its spans' sums in part, in span order from 0 (after
// the block's barrier); with acc, y + that sum (the residual add of
// lb_add_rmsnorm_terms, the same float32 addition), y's old values taken
// from held (mma_gemv_held) where given. Where rows is given (shared
// memory, ng · 128 floats in part's order), each output's new value goes
// there too, zeros past out: mma_gemv_sums reads them.
__device__ __forceinline__ void mma_gemv_add(float *y, const float *part, int m, int out, int n0, int ng, int spans,
                                             int T, int acc = 0, const float *held = 0, float *rows = 0) {
	// Output i, with its old y in *old where held (else read here).
	auto add = [&](int i, const float *old) {
		int n = i >> 7, r = (i >> 3) & 15, tk = i & 7;
		int row = 16 * m + r, t = 8 * (n0 + n) + tk;
		float v = 0.0f;
		if (row < out && t < T) {
			float sum = 0.0f;
			for (int s = 0; s < spans; s++) sum += part[((s * ng + n) * 16 + r) * 8 + tk];
			float *yo = y + (i64)t * out + row;
			v = acc ? (old ? *old : *yo) + sum : sum;
			*yo = v;
		}
		if (rows) rows[i] = v;
	};
	int i = threadIdx.x;
	if (held) { // unrolled, so that held stays in registers
#pragma unroll
		for (int k = 0; k < MMA_ADD_HELD; k++, i += blockDim.x)
			if (i < ng * 128) add(i, &held[k]);
	}
	for (; i < ng * 128; i += blockDim.x) add(i, 0);
}

// mma_gemv_sums writes row tile m's RMS tile sums (rms_tile: the first
// step of the RMS order, common.cuh) of the new y that mma_gemv_add left
// in rows, for each token t of the ng groups from n0 below T, to sums[t ·
// ⌈out / 16⌉ + m]; a GEMV that normalizes y then adds them up
// (lb_mma_gemv_bulk1_rms). The caller's barrier comes first.
__device__ __forceinline__ void mma_gemv_sums(float *sums, const float *rows, int m, int out, int n0, int ng, int T) {
	for (int j = threadIdx.x; j < ng * 8; j += blockDim.x) {
		int n = j >> 3, tk = j & 7, t = 8 * (n0 + n) + tk;
		if (t >= T) continue;
		float v[16];
#pragma unroll
		for (int r = 0; r < 16; r++) v[r] = rows[(n * 16 + r) * 8 + tk];
		sums[(i64)t * ((out + 15) / 16) + m] = rms_tile(v);
	}
}

#define MMA_GEMV_WARPS 4

// lb_mma_gemv: one block of MMA_GEMV_WARPS warps a row tile m (blockIdx.x,
// over up to three weights)
// and gpb ≤ MMA_GEMV_GROUPS token groups (blockIdx.y). Warp wi takes spans
// wi, wi + warps, ...; a span's 16 weight tiles (8 KB) stream into shared
// memory by cp.async while the warp multiplies the previous span's (two
// slots a warp), and each span's sums go to shared memory (part [spans]
// [groups][16 rows][8 tokens]); then the spans are added in order.
// Dynamic shared memory: MMA_GEMV_WARPS·16 KB + spans·gpb·512 bytes.
extern "C" __global__ void __launch_bounds__(128) lb_mma_gemv(float *y0, const uint4 *w0, int out0, float *y1,
                                                              const uint4 *w1, int out1, float *y2, const uint4 *w2,
                                                              int out2, const uint2 *xs, int T, int in, int gpb) {
	extern __shared__ uint4 smem[];
	int lane = threadIdx.x & 31, wi = threadIdx.x >> 5;
	int nc = (in + 15) / 16, spans = (nc + MMA_SPAN - 1) / MMA_SPAN, m = blockIdx.x, out;
	float *y;
	const uint4 *w;
	mma_pick(&m, 16, &y, &w, &out, y0, w0, out0, y1, w1, out1, y2, w2, out2);
	int n0 = blockIdx.y * gpb, ng = min(gpb, (T + 7) / 8 - n0);
	uint4 *slots = smem + wi * 2 * MMA_SPAN * 32;
	float *part = (float *)(smem + MMA_GEMV_WARPS * 2 * MMA_SPAN * 32);
	const uint4 *wr = w + (i64)m * nc * 32 + lane;
	if (wi < spans) {
		for (int i = 0; i < min(MMA_SPAN, nc - wi * MMA_SPAN); i++)
			cp_async16(slots + i * 32 + lane, wr + (i64)(wi * MMA_SPAN + i) * 32);
	}
	cp_async_commit();
	// The weights never change: their first span streams in while the
	// kernel before finishes (programmatic dependent launch); the
	// activations only after it has.
	lb_pdl_wait();
	for (int s = wi, k = 0; s < spans; s += MMA_GEMV_WARPS, k ^= 1) {
		int sn = s + MMA_GEMV_WARPS;
		if (sn < spans)
			for (int i = 0; i < min(MMA_SPAN, nc - sn * MMA_SPAN); i++)
				cp_async16(slots + ((k ^ 1) * MMA_SPAN + i) * 32 + lane, wr + (i64)(sn * MMA_SPAN + i) * 32);
		cp_async_commit();
		mma_gemv_span(part, slots + k * MMA_SPAN * 32, xs, nc, s, n0, ng, T, lane, [] { cp_async_wait1(); });
	}
	__syncthreads();
	mma_gemv_add(y, part, m, out, n0, ng, spans, T);
}

// mma_gemm: blocks of WRW × WCW warps, each warp on WR row tiles × WC
// token groups (a block on BR = 16·WR·WRW rows × BT = 8·WC·WCW tokens, BR
// and BT dividing MMA_ROW_PAD and MMA_TOK_PAD). Each stage of KC column
// chunks (BR/16 · KC weight tiles, BT/8 · KC chunks of activation terms)
// streams into shared memory by cp.async, STAGES − 1 stages ahead of the
// one being multiplied; a warp issues 3·WR·WC mma a chunk, a term's WR·WC
// independent ones back to back, and sums the spans in registers. Both
// layouts are fragment-native, so a lane reads its fragments from shared
// memory as whole 16- and 8-byte words, without bank conflicts. Dynamic
// shared memory: STAGES · KC · (BR/16 · 512 + BT/8 · 768) bytes.
// lb_mma_gemm runs 16 warps of 2×4 tiles on 128 × 128 with 4 chunks a
// stage: on the H200 it measured 89.8-93.6 TFLOP/s at T=1024 against
// 78.8-81.0 for 8 warps of 4×4 tiles (4 chunks a stage), 72-76 (2 chunks)
// and 71-72 for 64-row blocks two a SM (BENCHMARKS.md, 2026-12-01 night).
#define MMA_GEMM_STAGES 3
template <int WR, int WC, int WRW, int WCW, int KC>
__device__ __forceinline__ void mma_gemm(float *y, const uint4 *w, const uint2 *xs, int T, int out, int in) {
	extern __shared__ uint4 smem[];
	constexpr int NT = 32 * WRW * WCW, BRT = WR * WRW, BG = WC * WCW; // threads, row tiles, token groups
	constexpr int A_U4 = KC * BRT * 32;                               // a stage's weight tiles, in uint4
	constexpr int B_U4 = KC * BG * 3 * 16;                            // its activation terms, in uint4
	constexpr int STAGE = A_U4 + B_U4;
	int lane = threadIdx.x & 31, wi = threadIdx.x >> 5, g = lane >> 2, q = lane & 3;
	int nc = (in + 15) / 16, nk = (nc + KC - 1) / KC;
	int mb = blockIdx.x * BRT, nb = blockIdx.y * BG, wr = wi % WRW, wc = wi / WRW;
	auto load = [&](int kt) {
		uint4 *sa = smem + (kt % MMA_GEMM_STAGES) * STAGE, *sb = sa + A_U4;
		for (int i = threadIdx.x; i < A_U4; i += NT) {
			int cc = i / (BRT * 32), tile = (i >> 5) % BRT, c = kt * KC + cc;
			if (c < nc) cp_async16(sa + i, w + ((i64)(mb + tile) * nc + c) * 32 + (i & 31));
		}
		for (int i = threadIdx.x; i < B_U4; i += NT) {
			int cc = i / (BG * 48), grp = (i / 48) % BG, c = kt * KC + cc;
			if (c < nc) cp_async16(sb + i, (const uint4 *)(xs + ((i64)(nb + grp) * nc + c) * 96) + i % 48);
		}
	};
	float acc[WR][WC][4], tot[WR][WC][4];
#pragma unroll
	for (int r = 0; r < WR; r++)
#pragma unroll
		for (int n = 0; n < WC; n++)
#pragma unroll
			for (int e = 0; e < 4; e++) acc[r][n][e] = tot[r][n][e] = 0.0f;
#pragma unroll
	for (int s = 0; s < MMA_GEMM_STAGES - 1; s++) {
		if (s < nk) load(s);
		cp_async_commit();
	}
	for (int kt = 0; kt < nk; kt++) {
		cp_async_wait<MMA_GEMM_STAGES - 2>(); // stage kt has landed
		__syncthreads(); // and every warp is done with the stage the next load overwrites
		if (kt + MMA_GEMM_STAGES - 1 < nk) load(kt + MMA_GEMM_STAGES - 1);
		cp_async_commit();
		const uint4 *sa = smem + (kt % MMA_GEMM_STAGES) * STAGE;
		const uint2 *sb = (const uint2 *)(sa + A_U4);
#pragma unroll
		for (int cc = 0; cc < KC; cc++) {
			int c = kt * KC + cc;
			if (c >= nc) break;
			uint4 a[WR];
			uint2 b[WC][3];
#pragma unroll
			for (int r = 0; r < WR; r++) a[r] = sa[(cc * BRT + wr * WR + r) * 32 + lane];
#pragma unroll
			for (int n = 0; n < WC; n++)
#pragma unroll
				for (int j = 0; j < 3; j++) b[n][j] = sb[((cc * BG + wc * WC + n) * 3 + j) * 32 + lane];
			// A term's WR·WC mma are independent: each accumulator sees hi,
			// mid and lo in order with the others between them.
#pragma unroll
			for (int j = 0; j < 3; j++)
#pragma unroll
				for (int r = 0; r < WR; r++)
#pragma unroll
					for (int n = 0; n < WC; n++) mma_bf16(acc[r][n], a[r], b[n][j].x, b[n][j].y);
			if ((c + 1) % MMA_SPAN == 0 || c + 1 == nc) {
#pragma unroll
				for (int r = 0; r < WR; r++)
#pragma unroll
					for (int n = 0; n < WC; n++)
#pragma unroll
						for (int e = 0; e < 4; e++) {
							tot[r][n][e] += acc[r][n][e];
							acc[r][n][e] = 0.0f;
						}
			}
		}
	}
#pragma unroll
	for (int r = 0; r < WR; r++)
#pragma unroll
		for (int n = 0; n < WC; n++)
#pragma unroll
			for (int e = 0; e < 4; e++) {
				int row = 16 * (mb + wr * WR + r) + g + 8 * (e >> 1), t = 8 * (nb + wc * WC + n) + 2 * q + (e & 1);
				if (row < out && t < T) y[(i64)t * out + row] = tot[r][n][e];
			}
}

extern "C" __global__ void __launch_bounds__(512) lb_mma_gemm(float *y, const uint4 *w, const uint2 *xs, int T, int out, int in) {
	lb_pdl_wait();
	mma_gemm<2, 4, 4, 4, 4>(y, w, xs, T, out, in);
}
