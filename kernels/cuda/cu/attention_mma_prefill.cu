// attention_mma_prefill.cu: attention_mma.cu's whole mode for the BF16
// prefill (q and P as one BF16 term, the _q1 numerics) over a BF16 or FP8
// cache, head dims 64 and 128, with two m-tiles (32 rows) a warp: the same bits as
// lb_flash_d*_k1_whole_q1, row by row (each row's mma chains, softmax, P
// rounding, l_c order and fold are attention_mma.cu's; a row never meets
// another in an mma).
//
// Why: lb_flash_d128_k1_whole_q1 reached 115 TFLOP/s at 8,192 tokens on
// the H200 against SDPA's 608, and 58% of a 2,048-token prefill chunk at
// 6,144 positions (BenchmarkCUDAServeSteps). Here a warp's two m-tiles
// share each k and v fragment it loads from shared memory (half the
// ldmatrix a mma) and give the tensor cores two independent chains; the
// next chunk's k and v stream in by cp.async while this one is multiplied;
// the mask and the per-row checks of the fold apply only to chunks that
// reach past a warp's first position (fp_fold<DH, true>); fragments are
// read at immediate offsets from per-lane shared-space addresses; and
// blocks run the work list backwards, the longest contexts first, so that
// the last wave is short. It was latency-bound at 8 warps a SM (Nsight
// Compute: 1.6 instructions a cycle, the ALU the busiest pipe), so fewer
// instructions a chunk made it faster: 172.7 → 227 TFLOP/s at 8,192.
//
// An FP8 cache (F8, the _fp8 kernels) streams its codes into two stages of
// bytes instead and widens each chunk's to BF16 in shared memory
// (fa_widen8) before the multiplies: attention_mma.cu's FP8 numerics
// (scale·kscale as the scale, the result times vscale, 1 for BF16).
//
// Layout and arguments: attention_mma.cu's (FA_PARAMS; whole mode, no
// partials). A block is 4 warps; warp w takes tokens from t0 + w·2R (R =
// 16 / G), m-tile mt the R after t0 + (2w + mt)·R. Shared memory, dynamic,
// in u16: q [4][2][16][Dh + 8], then two stages of k and v
// [2][2][FA_CHUNK][Dh + 8] (F8: one, then the codes' two stages [2][2]
// [FA_CHUNK][Dh] bytes).
#define FP_MT 2

// fp_fold folds a chunk into a warp's rows: M and L by the chunk's (mx, l),
// O by o_c = P·v, 16 head dims at a time (positions by 16 in order), each
// group folded as soon as its mma chains end. CHECK: skip the rows with no
// position in the chunk (c0 past prow); without it every row folds (a
// chunk no row ends inside: each row has all 64 positions).
template <int DH, bool CHECK>
__device__ __forceinline__ void fp_fold(float oacc[FP_MT][DH / 8][4], float M[FP_MT][2], float L[FP_MT][2],
                                        const float mx[FP_MT][2], const float l[FP_MT][2], const u32 pa[FP_MT][4][4],
                                        u32 va, const int prow[FP_MT][2], int c0) {
	constexpr int LD = DH + 8, NT = DH / 8, MT = FP_MT;
	float fa[MT][2], fb[MT][2];
	bool same = true; // no row's running max moved: every a is 1
#pragma unroll
	for (int mt = 0; mt < MT; mt++)
#pragma unroll
		for (int e2 = 0; e2 < 2; e2++) {
			if (CHECK && prow[mt][e2] < c0) continue;
			fa_weights(&M[mt][e2], mx[mt][e2], &fa[mt][e2], &fb[mt][e2]);
			L[mt][e2] = fa_mix(L[mt][e2], fa[mt][e2], l[mt][e2], fb[mt][e2]);
			same = same && fa[mt][e2] == 1.0f;
		}
	// O = fma(o_c, b, O·a) is fa_mix in two steps: O·a first (skipped where
	// a is 1 for the whole warp: O·1 is O), then the fma as each group of
	// o_c is done.
	if (!__all_sync(0xffffffffu, same))
#pragma unroll
		for (int mt = 0; mt < MT; mt++)
#pragma unroll
			for (int nn = 0; nn < NT; nn++)
#pragma unroll
				for (int e = 0; e < 4; e++)
					if (!CHECK || prow[mt][e >> 1] >= c0) oacc[mt][nn][e] = __fmul_rn(oacc[mt][nn][e], fa[mt][e >> 1]);
#pragma unroll
	for (int dp = 0; dp < NT / 2; dp++) {
		float o[MT][2][4];
#pragma unroll
		for (int mt = 0; mt < MT; mt++)
#pragma unroll
			for (int h2 = 0; h2 < 2; h2++)
#pragma unroll
				for (int e = 0; e < 4; e++) o[mt][h2][e] = 0.0f;
#pragma unroll
		for (int kc = 0; kc < 4; kc++) {
			u32 vb[4];
			ldsm_x4_t_at(vb, va + 2 * (16 * kc * LD + 16 * dp));
#pragma unroll
			for (int mt = 0; mt < MT; mt++) {
				uint4 a = fa_frag(pa[mt][kc]);
				mma_bf16(o[mt][0], a, vb[0], vb[1]);
				mma_bf16(o[mt][1], a, vb[2], vb[3]);
			}
		}
#pragma unroll
		for (int mt = 0; mt < MT; mt++)
#pragma unroll
			for (int h2 = 0; h2 < 2; h2++)
#pragma unroll
				for (int e = 0; e < 4; e++) {
					int e2 = e >> 1, nn = 2 * dp + h2;
					if (CHECK && prow[mt][e2] < c0) continue;
					oacc[mt][nn][e] = __fmaf_rn(o[mt][h2][e], fb[mt][e2], oacc[mt][nn][e]);
				}
	}
}

template <int DH, bool F8>
__device__ __forceinline__ void fp_run(float *out, const float *q, const u8 *kp, const u8 *vp, const int *tables,
                                       int stride, const int *seq, const int *pos, const int *work, int bs, int H,
                                       int KVH, float scale, float vscale) {
	constexpr int LD = DH + 8, NT = DH / 8, DC = DH / 16, MT = FP_MT, KV = FA_CHUNK * LD;
	extern __shared__ uint4 fp_smem[];
	__shared__ i64 rows[2][FA_CHUNK];
	int tid = threadIdx.x, lane = tid & 31, w = tid >> 5, g = lane >> 2, qd = lane & 3;
	int kh = blockIdx.y, G = H / KVH, R = 16 / G;
	int wi = gridDim.x - 1 - blockIdx.x; // the longest contexts first
	int t0 = work[2 * wi], n = work[2 * wi + 1];
	constexpr int K8 = FA_CHUNK * DH; // one k or v chunk of codes, in bytes
	u16 *qs = (u16 *)fp_smem + w * MT * 16 * LD, *kv0 = (u16 *)fp_smem + 4 * MT * 16 * LD;
	u8 *st8 = (u8 *)(kv0 + 2 * KV);
	const int *blocks = tables ? tables + (i64)seq[t0] * stride : 0;
	int pmax = pos[t0 + n - 1];
	// Chunk 0's rows and copy, chunk 1's rows; q meanwhile.
	fa_rows(rows[0], blocks, bs, KVH, kh, DH, 0, pmax);
	__syncthreads();
	if (F8)
		fa_copy8<DH>(st8, st8 + K8, kp, vp, rows[0]);
	else
		fa_copy<DH>(kv0, kv0 + KV, kp, vp, rows[0]);
	cp_async_commit();
	fa_rows(rows[1], blocks, bs, KVH, kh, DH, FA_CHUNK, pmax);
	// Rows g and g + 8 of each m-tile: position (−1: past the tokens).
	int prow[MT][2], hrow[2];
	int wfirst = w * MT * R, wn = min(MT * R, n - wfirst); // the warp's tokens
#pragma unroll
	for (int mt = 0; mt < MT; mt++)
#pragma unroll
		for (int e = 0; e < 2; e++) {
			int r = g + 8 * e, tt = mt * R + r / G;
			prow[mt][e] = (r < R * G && tt < wn) ? pos[t0 + wfirst + tt] : -1;
			hrow[e] = kh * G + r % G;
		}
	int wpmin = wn > 0 ? pos[t0 + wfirst] : -1, wpmax = wn > 0 ? pos[t0 + wfirst + wn - 1] : -1;
#pragma unroll
	for (int mt = 0; mt < MT; mt++) fa_stage_q<DH, 1>(qs + mt * 16 * LD, q, t0 + wfirst + mt * R, wn - mt * R, G, kh, H, lane, 32);
	const float ninf = -__int_as_float(0x7f800000), sl = fa_log2e_scale(scale);
	// ldmatrix addresses (shared space, bytes): this lane's row of q's
	// tiles; of k and v in buffer 0 (fragments at immediate offsets).
	u32 qa0 = smem_u32(qs) + 2 * ((lane & 15) * LD + (lane >> 4) * 8), kv0a = smem_u32(kv0);
	u32 klane = 2 * ((((lane >> 4) & 1) * 8 + (lane & 7)) * LD + ((lane >> 3) & 1) * 8);
	u32 vlane = 2 * ((((lane >> 3) & 1) * 8 + (lane & 7)) * LD + ((lane >> 4) & 1) * 8);
	float M[MT][2], L[MT][2], oacc[MT][NT][4];
#pragma unroll
	for (int mt = 0; mt < MT; mt++) {
		M[mt][0] = M[mt][1] = ninf;
		L[mt][0] = L[mt][1] = 0.0f;
#pragma unroll
		for (int nn = 0; nn < NT; nn++)
#pragma unroll
			for (int e = 0; e < 4; e++) oacc[mt][nn][e] = 0.0f;
	}
	for (int c = 0; c * FA_CHUNK <= pmax; c++) {
		int b = c & 1, bb = F8 ? 0 : b; // bb: the BF16 buffers' stage
		// This lane's ldmatrix addresses in chunk c's k and v (shared space).
		u32 ka = kv0a + 2 * (2 * bb * KV) + klane, va = kv0a + 2 * ((2 * bb + 1) * KV) + vlane;
		__syncthreads(); // every warp is done with chunk c − 1's buffers; rows[b ^ 1] is written
		if ((c + 1) * FA_CHUNK <= pmax) {
			if (F8)
				fa_copy8<DH>(st8 + 2 * (b ^ 1) * K8, st8 + (2 * (b ^ 1) + 1) * K8, kp, vp, rows[b ^ 1]);
			else
				fa_copy<DH>(kv0 + 2 * (b ^ 1) * KV, kv0 + (2 * (b ^ 1) + 1) * KV, kp, vp, rows[b ^ 1]);
		}
		cp_async_commit();
		int pn = (c + 2) * FA_CHUNK + tid, tb = tid < FA_CHUNK ? fa_entry(blocks, bs, pn, pmax) : 0;
		cp_async_wait1();
		__syncthreads();
		if (F8) { // chunk c's codes to BF16 (every warp is done with chunk c − 1's)
			fa_widen8<DH>(kv0, kv0 + KV, st8 + 2 * b * K8, st8 + (2 * b + 1) * K8);
			__syncthreads();
		}
		if (wpmax >= c * FA_CHUNK) {
			float s[MT][8][4];
#pragma unroll
			for (int mt = 0; mt < MT; mt++)
#pragma unroll
				for (int j = 0; j < 8; j++)
#pragma unroll
					for (int e = 0; e < 4; e++) s[mt][j][e] = 0.0f;
#pragma unroll
			for (int dc = 0; dc < DC; dc++) {
				u32 qa[MT][4];
#pragma unroll
				for (int mt = 0; mt < MT; mt++) ldsm_x4_at(qa[mt], qa0 + 2 * (mt * 16 * LD + dc * 16));
#pragma unroll
				for (int i = 0; i < 4; i++) {
					u32 kb[4];
					ldsm_x4_at(kb, ka + 2 * (16 * i * LD + dc * 16));
#pragma unroll
					for (int mt = 0; mt < MT; mt++) {
						uint4 a = fa_frag(qa[mt]);
						mma_bf16(s[mt][2 * i], a, kb[0], kb[1]);
						mma_bf16(s[mt][2 * i + 1], a, kb[2], kb[3]);
					}
				}
			}
			bool masked = c * FA_CHUNK + FA_CHUNK - 1 > wpmin; // some row of the warp ends inside the chunk
			u32 pa[MT][4][4];
			float mx[MT][2], l[MT][2];
#pragma unroll
			for (int mt = 0; mt < MT; mt++) {
				fa_softmax(s[mt], prow[mt], c * FA_CHUNK, qd, scale, sl, masked, mx[mt], l[mt]);
#pragma unroll
				for (int kc = 0; kc < 4; kc++) {
					u32 t1, t2;
					mma_terms(s[mt][2 * kc][0], s[mt][2 * kc][1], &pa[mt][kc][0], &t1, &t2);
					mma_terms(s[mt][2 * kc][2], s[mt][2 * kc][3], &pa[mt][kc][1], &t1, &t2);
					mma_terms(s[mt][2 * kc + 1][0], s[mt][2 * kc + 1][1], &pa[mt][kc][2], &t1, &t2);
					mma_terms(s[mt][2 * kc + 1][2], s[mt][2 * kc + 1][3], &pa[mt][kc][3], &t1, &t2);
				}
			}
			// A chunk no row of the warp ends inside folds every row; one
			// that some row ends inside, or starts past, checks each.
			if (masked)
				fp_fold<DH, true>(oacc, M, L, mx, l, pa, va, prow, c * FA_CHUNK);
			else
				fp_fold<DH, false>(oacc, M, L, mx, l, pa, va, prow, c * FA_CHUNK);
		}
		// Chunk c + 2's rows into rows[b] (its last reader, chunk c's copy,
		// was issued before this round's first barrier).
		if (tid < FA_CHUNK) rows[b][tid] = fa_row_of(tb, blocks, bs, pn, pmax, KVH, kh, DH);

	}
#pragma unroll
	for (int mt = 0; mt < MT; mt++)
#pragma unroll
		for (int e2 = 0; e2 < 2; e2++) {
			if (prow[mt][e2] < 0) continue;
			float *ov = out + ((i64)(t0 + wfirst + mt * R + (g + 8 * e2) / G) * H + hrow[e2]) * DH;
#pragma unroll
			for (int nn = 0; nn < NT; nn++) {
				ov[8 * nn + 2 * qd] = __fmul_rn(__fdiv_rn(oacc[mt][nn][2 * e2], L[mt][e2]), vscale);
				ov[8 * nn + 2 * qd + 1] = __fmul_rn(__fdiv_rn(oacc[mt][nn][2 * e2 + 1], L[mt][e2]), vscale);
			}
		}
}

#define FP_PARAMS                                                                                                     \
	float *out, const float *q, const u8 *kp, const u8 *vp, const int *tables, int stride, const int *seq,           \
	    const int *pos, const int *work, int bs, int H, int KVH, float scale, float vscale
#define FP_ARGS out, q, kp, vp, tables, stride, seq, pos, work, bs, H, KVH, scale, vscale

// lb_flash_prefill_d<head dim>_q1[_fp8]: 4 warps of 2 m-tiles; _fp8: an
// FP8 cache.
extern "C" __global__ void __launch_bounds__(128) lb_flash_prefill_d64_q1(FP_PARAMS) { lb_pdl_wait(); fp_run<64, false>(FP_ARGS); }
extern "C" __global__ void __launch_bounds__(128) lb_flash_prefill_d128_q1(FP_PARAMS) { lb_pdl_wait(); fp_run<128, false>(FP_ARGS); }
extern "C" __global__ void __launch_bounds__(128) lb_flash_prefill_d64_q1_fp8(FP_PARAMS) { lb_pdl_wait(); fp_run<64, true>(FP_ARGS); }
extern "C" __global__ void __launch_bounds__(128) lb_flash_prefill_d128_q1_fp8(FP_PARAMS) { lb_pdl_wait(); fp_run<128, true>(FP_ARGS); }
