// attention_mma_decode.cu: attention_mma.cu's split mode (flash-decoding)
// for a BF16 or FP8 cache and head dims 64 and 128, with the four warps of a
// block sharing each chunk, for decode steps of many sequences at long
// contexts. The same numerics, bit for bit, as attention_mma.cu: each
// chunk's (m_c, l_c, o_c) is computed by the same mma chains (head-dim
// chunks of 16 in order, term pairs in order, from 0), the same max, mask,
// exponent (fa_softmax's) and P split, and l_c summed in the same order; lb_flash_merge
// folds the partials.
//
// Why: lb_flash_d*_split runs a chunk in one warp (its 2 × 8 mma chains
// one after the other, about 3 µs a chunk) and loads the next only after,
// with 4 one-warp blocks a SM for shared memory: 0.21 of the copy rate on
// 32 sequences at 8,192 positions on the H200 (BenchmarkCUDAServeSteps).
// Here warp w computes s for positions 16w .. 16w + 15 of the chunk and o
// for a quarter of the head dims, and chunk c + Z streams in by cp.async
// while chunk c is multiplied; a block runs chunks z, z + Z, ... of one
// tile (16 rows: 16 / G tokens × the G query heads of KV head blockIdx.y).
//
// An FP8 cache (F8, the _fp8 kernels) streams its codes into two stages of
// bytes instead and widens each chunk's to BF16 in shared memory
// (fa_widen8) before the multiplies: attention_mma.cu's FP8 numerics, the
// same bits as its one-warp kernels. (Each warp widening only what it
// reads, with a warp sync for the block barrier, measured the same on the
// H200: BENCHMARKS.md.)
//
// No lb_flash_merge follows: the last of a tile's blocks to finish (an
// atomic count a tile and KV head in arrive, back to 0 after) folds the
// tile's partials (fd_merge, lb_flash_merge's order and bits) into out
// and, with xs, into the o-projection's mma terms, so that a decode step
// of a batch-1 8B model saves two launches a layer (the merge and the
// split).
//
// Layout and arguments: attention_mma.cu's (FA_PARAMS), then out, arrive,
// xs, nc, nt, vscale (fd_merge's). Shared memory,
// dynamic, in u16: q terms [QT][16][Dh + 8], then two stages of k and v
// [2][2][FA_CHUNK][Dh + 8] (F8: one), then P terms [QT][16][FA_CHUNK + 8]
// (F8: then the codes, two stages of k and v [2][2][FA_CHUNK][Dh] bytes).
#define FD_LDP (FA_CHUNK + 8)

// fd_merge folds, for each row of the tile (token t, head h), its chunks'
// partials in order as lb_flash_merge does, bit for bit, and writes out
// [T, H, Dh] and, with xs, the same values as mma terms of a [T, H·Dh]
// matrix (mma_put_terms: nc column chunks, nt terms), the o-projection's
// input. Warp w takes rows w, w + 4, ...; lane l head dims l, l + 32, ....
// The partials come from other blocks: read through L2 (__ldcg).
template <int DH>
__device__ __forceinline__ void fd_merge(float *out, u32 *xs, int nc, int nt, const float *partials, const int *pos,
                                         const int *part_off, int t0, int n, int G, int kh, int H, float vscale) {
	constexpr int DL = DH / 32, U = 8; // head dims a lane; chunks whose loads go out together
	int lane = threadIdx.x & 31, w = threadIdx.x >> 5, R = 16 / G;
	i64 zs = (i64)H * (DH + 2);
	for (int r = w; r < R * G; r += blockDim.x >> 5) {
		int tt = r / G;
		if (tt >= n) break;
		int t = t0 + tt, h = kh * G + r % G, nch = pos[t] / FA_CHUNK + 1;
		const float *part = partials + ((i64)part_off[t] * H + h) * (DH + 2);
		float M = -__int_as_float(0x7f800000), L = 0.0f, O[DL];
#pragma unroll
		for (int j = 0; j < DL; j++) O[j] = 0.0f;
		for (int i0 = 0; i0 < nch; i0 += U) {
			float m[U], l[U], o[U][DL];
#pragma unroll
			for (int u = 0; u < U; u++) {
				const float *pc = part + (i0 + u) * zs;
				bool in = i0 + u < nch;
				m[u] = in ? __ldcg(pc) : 0.0f;
				l[u] = in ? __ldcg(pc + 1) : 0.0f;
#pragma unroll
				for (int j = 0; j < DL; j++) o[u][j] = in ? __ldcg(pc + 2 + lane + 32 * j) : 0.0f;
			}
#pragma unroll
			for (int u = 0; u < U; u++) {
				if (i0 + u >= nch) break;
				float a, b;
				fa_weights(&M, m[u], &a, &b);
				L = fa_mix(L, a, l[u], b);
#pragma unroll
				for (int j = 0; j < DL; j++) O[j] = fa_mix(O[j], a, o[u][j], b);
			}
		}
#pragma unroll
		for (int j = 0; j < DL; j++) {
			float v = __fmul_rn(__fdiv_rn(O[j], L), vscale), v1 = __shfl_down_sync(0xffffffffu, v, 1);
			int col = h * DH + lane + 32 * j;
			out[(i64)t * H * DH + col] = v;
			if (xs && (lane & 1) == 0) mma_put_terms(xs, nc, t, col, v, v1, nt);
		}
	}
}

template <int DH, int QT, bool F8>
__device__ __forceinline__ void fd_run(float *partials, const float *q, const u8 *kp, const u8 *vp, const int *tables,
                                       int stride, const int *seq, const int *pos, const int *part_off, const int *work,
                                       int bs, int H, int KVH, float scale, float *out, int *arrive, u32 *xs, int nc,
                                       int nt, float vscale) {
	constexpr int LD = DH + 8, DC = DH / 16, DPW = DH / 64; // DPW: 16-dim groups of o a warp
	constexpr int KV = FA_CHUNK * LD;                        // one k or v chunk, in u16
	const int at[6] = {0, 1, 2, 0, 1, 0};
	extern __shared__ uint4 fd_smem[];
	__shared__ float sf[16][FA_CHUNK + 4]; // s, then P, of the chunk: row, position
	__shared__ float smx[4][16];           // each warp's row maxima
	__shared__ i64 rows[2][FA_CHUNK];
	constexpr int K8 = FA_CHUNK * DH; // one k or v chunk of codes, in bytes
	u16 *qs = (u16 *)fd_smem, *kv0 = qs + QT * 16 * LD, *ps = kv0 + (F8 ? 2 : 4) * KV;
	u8 *st8 = (u8 *)(ps + QT * 16 * FD_LDP);
	int tid = threadIdx.x, lane = tid & 31, w = tid >> 5, g = lane >> 2, qd = lane & 3;
	int kh = blockIdx.y, G = H / KVH, R = 16 / G, Z = gridDim.z;
	int t0 = work[2 * blockIdx.x], n = work[2 * blockIdx.x + 1];
	const int *blocks = tables ? tables + (i64)seq[t0] * stride : 0;
	int pmax = pos[t0 + n - 1];
	// Rows g and g + 8 of the tile: position (−1: past the tile's tokens).
	int prow[2], hrow[2];
#pragma unroll
	for (int e = 0; e < 2; e++) {
		int r = g + 8 * e, tt = r / G;
		prow[e] = (r < R * G && tt < n) ? pos[t0 + tt] : -1;
		hrow[e] = kh * G + r % G;
	}
	int c = blockIdx.z;
	if (c * FA_CHUNK > pmax) return;
	// Chunk c's rows and copy, chunk c + Z's rows; q's terms meanwhile.
	// The rows earlier steps wrote start copying before the wait, while
	// the kernels before (this step's KV write among them) still run: the
	// positions before the tile's first token when that token is its
	// sequence's first in the batch (a run split over tiles has its
	// earlier tiles' rows written by this step: none early then). The
	// batch's tables, sequences and positions come before the step.
	fa_rows(rows[0], blocks, bs, KVH, kh, DH, c * FA_CHUNK, pmax);
	__syncthreads();
	bool first = t0 == 0 || (seq && seq[t0 - 1] != seq[t0]);
	int older = first ? min(max(pos[t0] - c * FA_CHUNK, 0), FA_CHUNK) : 0;
	if (F8)
		fa_copy8<DH>(st8, st8 + K8, kp, vp, rows[0], 0, older);
	else
		fa_copy<DH>(kv0, kv0 + KV, kp, vp, rows[0], 0, older);
	lb_pdl_wait();
	if (F8)
		fa_copy8<DH>(st8, st8 + K8, kp, vp, rows[0], older);
	else
		fa_copy<DH>(kv0, kv0 + KV, kp, vp, rows[0], older);
	cp_async_commit();
	fa_rows(rows[1], blocks, bs, KVH, kh, DH, (c + Z) * FA_CHUNK, pmax);
	fa_stage_q<DH, QT>(qs, q, t0, n, G, kh, H, tid, blockDim.x);
	const float ninf = -__int_as_float(0x7f800000), sl = fa_log2e_scale(scale);
	for (int it = 0; c * FA_CHUNK <= pmax; c += Z, it++) {
		int b = it & 1;
		u16 *ks = kv0 + (F8 ? 0 : 2 * b * KV), *vs = ks + KV;
		// Every warp is done with chunk c − Z's buffers, and rows[b ^ 1]
		// (chunk c + Z's) is written: start its copy, then wait for c's.
		__syncthreads();
		if ((c + Z) * FA_CHUNK <= pmax) {
			if (F8)
				fa_copy8<DH>(st8 + 2 * (b ^ 1) * K8, st8 + (2 * (b ^ 1) + 1) * K8, kp, vp, rows[b ^ 1]);
			else
				fa_copy<DH>(kv0 + 2 * (b ^ 1) * KV, kv0 + (2 * (b ^ 1) + 1) * KV, kp, vp, rows[b ^ 1]);
		}
		cp_async_commit();
		// Chunk c + 2Z's table entry, read now, used after the multiply.
		int pn = (c + 2 * Z) * FA_CHUNK + tid, tb = tid < FA_CHUNK ? fa_entry(blocks, bs, pn, pmax) : 0;
		cp_async_wait1();
		__syncthreads();
		if (F8) { // chunk c's codes to BF16 (every warp is done with chunk c − Z's)
			fa_widen8<DH>(ks, vs, st8 + 2 * b * K8, st8 + (2 * b + 1) * K8);
			__syncthreads();
		}
		// s for positions 16w .. 16w + 15: fragment element e of s[jj] is
		// row g + 8·(e >> 1), position c·FA_CHUNK + 8(2w + jj) + 2qd + (e & 1).
		float s[2][4];
#pragma unroll
		for (int jj = 0; jj < 2; jj++)
#pragma unroll
			for (int e = 0; e < 4; e++) s[jj][e] = 0.0f;
#pragma unroll
		for (int dc = 0; dc < DC; dc++) {
			u32 qa[QT][4], kb[4];
#pragma unroll
			for (int m = 0; m < QT; m++) ldsm_x4(qa[m], qs + (m * 16 + (lane & 15)) * LD + dc * 16 + (lane >> 4) * 8);
			ldsm_x4(kb, ks + (16 * w + ((lane >> 4) & 1) * 8 + (lane & 7)) * LD + dc * 16 + ((lane >> 3) & 1) * 8);
#pragma unroll
			for (int pi = 0; pi < QT; pi++) { // the pairs (q term, k's one term) in order
				uint4 a = fa_frag(qa[at[pi]]);
				mma_bf16(s[0], a, kb[0], kb[1]);
				mma_bf16(s[1], a, kb[2], kb[3]);
			}
		}
		float mx[2] = {ninf, ninf};
#pragma unroll
		for (int jj = 0; jj < 2; jj++)
#pragma unroll
			for (int e = 0; e < 4; e++) {
				int col = 8 * (2 * w + jj) + 2 * qd + (e & 1);
				float v = s[jj][e]; // raw q·k: fa_softmax's max, scaled after
				if (c * FA_CHUNK + col > prow[e >> 1]) v = ninf;
				s[jj][e] = v;
				mx[e >> 1] = fa_max(mx[e >> 1], v);
			}
#pragma unroll
		for (int e = 0; e < 2; e++) {
			mx[e] = fa_max(mx[e], __shfl_xor_sync(0xffffffffu, mx[e], 1));
			mx[e] = fa_max(mx[e], __shfl_xor_sync(0xffffffffu, mx[e], 2));
			if (qd == 0) smx[w][g + 8 * e] = mx[e];
		}
		__syncthreads();
		// The chunk's row maxima (the max of maxima is the max, in any order),
		// then P for this warp's positions: as float for l_c and as terms.
		float ml[2];
#pragma unroll
		for (int e = 0; e < 2; e++) {
			int r = g + 8 * e;
			float rm = fa_max(fa_max(fa_max(smx[0][r], smx[1][r]), smx[2][r]), smx[3][r]);
			mx[e] = __fmul_rn(rm, scale);
			ml[e] = __fmul_rn(rm, sl);
		}
#pragma unroll
		for (int jj = 0; jj < 2; jj++)
#pragma unroll
			for (int e2 = 0; e2 < 2; e2++) {
				int r = g + 8 * e2, col = 8 * (2 * w + jj) + 2 * qd;
				float p0 = fa_exp2(__fmaf_rn(s[jj][2 * e2], sl, -ml[e2]));
				float p1 = fa_exp2(__fmaf_rn(s[jj][2 * e2 + 1], sl, -ml[e2]));
				sf[r][col] = p0;
				sf[r][col + 1] = p1;
				u32 tm[3];
				mma_terms(p0, p1, &tm[0], &tm[1], &tm[2]);
#pragma unroll
				for (int m = 0; m < QT; m++) *(u32 *)(ps + (m * 16 + r) * FD_LDP + col) = tm[m];
			}
		__syncthreads();
		bool mine[2] = {prow[0] >= c * FA_CHUNK, prow[1] >= c * FA_CHUNK}; // the row has positions in the chunk
		float *part[2];
#pragma unroll
		for (int e2 = 0; e2 < 2; e2++) {
			part[e2] = partials;
			if (prow[e2] >= 0) part[e2] += (((i64)part_off[t0 + (g + 8 * e2) / G] + c) * H + hrow[e2]) * (DH + 2);
		}
		if (w == 0) {
			// l_c in attention_mma.cu's order: a lane sums its positions
			// 8j + 2qd, 8j + 2qd + 1 for j in order, then lanes by xor 1, 2.
			float l[2] = {0.0f, 0.0f};
#pragma unroll
			for (int j = 0; j < 8; j++)
#pragma unroll
				for (int e = 0; e < 4; e++) l[e >> 1] += sf[g + 8 * (e >> 1)][8 * j + 2 * qd + (e & 1)];
#pragma unroll
			for (int e = 0; e < 2; e++) {
				l[e] += __shfl_xor_sync(0xffffffffu, l[e], 1);
				l[e] += __shfl_xor_sync(0xffffffffu, l[e], 2);
				if (mine[e] && qd == 0) part[e][0] = mx[e], part[e][1] = l[e];
			}
		}
		// o_c for this warp's quarter of the head dims (16-dim groups DPW·w ..).
#pragma unroll
		for (int i = 0; i < DPW; i++) {
			int dp = DPW * w + i;
			float o[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
#pragma unroll
			for (int kc = 0; kc < 4; kc++) {
				u32 pa[QT][4], vb[4];
#pragma unroll
				for (int m = 0; m < QT; m++) ldsm_x4(pa[m], ps + (m * 16 + (lane & 15)) * FD_LDP + kc * 16 + (lane >> 4) * 8);
				ldsm_x4_t(vb, vs + (16 * kc + ((lane >> 3) & 1) * 8 + (lane & 7)) * LD + 16 * dp + ((lane >> 4) & 1) * 8);
#pragma unroll
				for (int pi = 0; pi < QT; pi++) {
					uint4 a = fa_frag(pa[at[pi]]);
					mma_bf16(o[0], a, vb[0], vb[1]);
					mma_bf16(o[1], a, vb[2], vb[3]);
				}
			}
#pragma unroll
			for (int h2 = 0; h2 < 2; h2++)
#pragma unroll
				for (int e = 0; e < 4; e++)
					if (mine[e >> 1]) part[e >> 1][2 + 8 * (2 * dp + h2) + 2 * qd + (e & 1)] = o[h2][e];
		}
		// Chunk c + 2Z's rows into rows[b]: its last reader, chunk c's copy,
		// was issued before this round's first barrier.
		if (tid < FA_CHUNK) rows[b][tid] = fa_row_of(tb, blocks, bs, pn, pmax, KVH, kh, DH);
	}
	// The tile's last block to finish merges its chunks (the tile's blocks
	// with chunks: those of z ≤ pmax / FA_CHUNK), so that no lb_flash_merge
	// launch follows. The arrival is one acquire-release atomic at GPU
	// scope: its release orders the block's partials (written before the
	// barrier) before the count, its acquire the last block's reads of the
	// others' partials (after the next barrier) after it, with no full
	// fence on either side. The counter is left at 0 for the next launch.
	__shared__ int s_last;
	__syncthreads();
	if (tid == 0) {
		int *cnt = arrive + blockIdx.x * KVH + kh, before;
		int active = min(Z, pmax / FA_CHUNK + 1);
		asm volatile("atom.acq_rel.gpu.global.add.s32 %0, [%1], 1;" : "=r"(before) : "l"(cnt) : "memory");
		s_last = before == active - 1;
		if (s_last) *cnt = 0;
	}
	__syncthreads();
	if (!s_last) return;
	fd_merge<DH>(out, xs, nc, nt, partials, pos, part_off, t0, n, G, kh, H, vscale);
}

#define FD_PARAMS                                                                                                     \
	float *partials, const float *q, const u8 *kp, const u8 *vp, const int *tables, int stride, const int *seq,       \
	    const int *pos, const int *part_off, const int *work, int bs, int H, int KVH, float scale, float *out,        \
	    int *arrive, u32 *xs, int nc, int nt, float vscale
#define FD_ARGS partials, q, kp, vp, tables, stride, seq, pos, part_off, work, bs, H, KVH, scale, out, arrive, xs, nc, nt, vscale

// lb_flash_decode_d<head dim>[_q1][_fp8]: 4 warps; _q1: q and P as one
// BF16 term (attention_mma.cu's _q1 numerics); _fp8: an FP8 cache. fd_run
// waits for the kernel before (lb_pdl_wait) once its older rows are
// copying.
extern "C" __global__ void __launch_bounds__(128) lb_flash_decode_d64(FD_PARAMS) { fd_run<64, 3, false>(FD_ARGS); }
extern "C" __global__ void __launch_bounds__(128) lb_flash_decode_d64_q1(FD_PARAMS) { fd_run<64, 1, false>(FD_ARGS); }
extern "C" __global__ void __launch_bounds__(128) lb_flash_decode_d128(FD_PARAMS) { fd_run<128, 3, false>(FD_ARGS); }
extern "C" __global__ void __launch_bounds__(128) lb_flash_decode_d128_q1(FD_PARAMS) { fd_run<128, 1, false>(FD_ARGS); }
extern "C" __global__ void __launch_bounds__(128) lb_flash_decode_d64_fp8(FD_PARAMS) { fd_run<64, 3, true>(FD_ARGS); }
extern "C" __global__ void __launch_bounds__(128) lb_flash_decode_d64_q1_fp8(FD_PARAMS) { fd_run<64, 1, true>(FD_ARGS); }
extern "C" __global__ void __launch_bounds__(128) lb_flash_decode_d128_fp8(FD_PARAMS) { fd_run<128, 3, true>(FD_ARGS); }
extern "C" __global__ void __launch_bounds__(128) lb_flash_decode_d128_q1_fp8(FD_PARAMS) { fd_run<128, 1, true>(FD_ARGS); }
