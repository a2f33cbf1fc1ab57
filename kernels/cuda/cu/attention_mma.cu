// attention_mma.cu: attention.cu's attention (causal, grouped-query, over a
// contiguous or paged float32, BF16 or E4M3 cache) on the tensor cores, for
// head dims 16, 32, 64 and 128 and up to 16 query heads a KV head (16 a
// multiple of the group), with float32 results.
//
// Numerics, the contract both modes and lb_flash_merge keep: position p's
// context is cut into chunks of FA_CHUNK positions at multiples of
// FA_CHUNK. For chunk c a row (token t, query head h) gets
//   s_j = q·k_j for j ≤ p in the chunk, −inf past p; r = max_j s_j;
//   m_c = r·scale, P_j = 2^fma(s_j, sl, −r·sl) (sl = scale·log2 e, each
//   product rounded once: fa_softmax), l_c = Σ_j P_j, o_c = Σ_j P_j·v_j.
// q and P are split into three BF16 terms as matmul_mma.cu splits its
// activations; k and v are their BF16 values (a BF16 cache), the values of
// their E4M3 codes (an FP8 cache: exact in BF16, the scales applied to
// what the codes sum to, see below) or are split the same way (float32). A
// product is the
// mma of the six term pairs whose weight reaches 2^-24 (hi·hi, mid·hi,
// lo·hi, hi·mid, mid·mid, hi·lo; the first three only for a BF16 cache),
// head-dim chunk of 16 by chunk (positions by 16 for o_c), accumulated in
// float32 by the tensor cores in that order. The _q1 kernels keep only q's
// and P's first term, their round-to-nearest BF16 values (l_c still sums
// the float32 P_j): the BF16-activation attention of the runtime's BF16
// prefill (the pairs hi·hi, and hi·mid, hi·lo for a cache that is not
// BF16). The chunks then fold in order from (M, L, O) = (−∞, 0, 0): M' =
// max(M, m_c), a = exp(M − M') (0 for the first chunk), b = exp(m_c − M'),
// L = fma(l_c, b, L·a), O = fma(o_c, b, O·a) (fa_weights, fa_mix); out =
// O / L.
// An FP8 cache (k = code·kscale, v = code·vscale) runs the BF16 cache's
// kernels on the codes' values: the caller passes scale·kscale (rounded
// once) as the scale, so s_j·scale is q·k_j·scale up to that rounding, and
// out = (O / L)·vscale. Against decoding each k and v to code·scale in
// float32 (attention.cu, the CPU), this moves the scales' roundings from
// each element to the sums, an error of a few float32 ulps of the result
// (kerneltest's attention tolerance), and it costs one term where the
// float32 decode costs three. vLLM and FlashAttention 3 also apply an FP8
// cache's scales to the scores and the output.
// A row's result depends only on its q and its cache up to p: neither the
// rows that share its tile, nor how chunks are spread over blocks, nor the
// batch changes a bit (masked positions give P = 0 exactly, and an mma row
// never sees another row).
//
// Layout: q, out [T, H, Dh] float32. A tile is 16 rows: 16 / G tokens × the
// G query heads of KV head blockIdx.y (G = H / KVH), row r = token r / G,
// head r % G. work[2b], work[2b + 1] are block b's first token and token
// count (one sequence, consecutive positions); its warp w takes tokens
// w·16/G onwards. Shared memory: q terms [warps][3][16][Dh + 8] (with PIPE
// [warps][QT], QT 3, or 1 for _q1), then k and v terms [KT][FA_CHUNK]
// [Dh + 8] each, two of each with PIPE (rows padded by 16 bytes so that
// ldmatrix's 8 rows fall in different banks); KT is 1 for a BF16 cache, 3
// otherwise.
//
// Two modes. Whole (gridDim.z = 1): a block runs every chunk of its tokens
// in order, its warps sharing each chunk's k and v, folds in registers and
// writes out. Split (flash-decoding, gridDim.z = Z): block z runs chunks
// z, z + Z, ... and writes each chunk's (m_c, l_c, o_c) to partials
// [part_off[t] + c, H, Dh + 2]; lb_flash_merge folds them per (t, h)
// (attention_mma_decode.cu's blocks fold their own).
#define FA_CHUNK 64

// fa_exp2 is 2^x on the special-function unit (ex2.approx, about 2 ulp):
// the attention's exps are all powers of two of an argument scaled by
// log2 e, one instruction against expf's eight. exp(0) is exactly 1,
// 2^(−∞) is +0, a subnormal result flushes to 0.
__device__ __forceinline__ float fa_exp2(float x) {
	float y;
	asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
	return y;
}

// fa_exp is the fold's exp, 2^(x·log2 e): rounding x·log2 e adds |x|·u
// relatively, which only weights with large |x|, exp(x) tiny, see.
__device__ __forceinline__ float fa_exp(float x) { return fa_exp2(__fmul_rn(x, 1.4426950408889634f)); }

// fa_log2e_scale is scale·log2 e, rounded once: the softmax's exponent is
// fma(s, scale·log2 e, −max_j s_j·scale·log2 e), so that a weight costs an
// fma and an ex2 (and the max is taken on the raw scores: scale > 0 keeps
// its place). Relative to exp(s·scale − m) each P_j errs by about
// |m·log2 e|·u, inside kerneltest's attention tolerance (its 4S term).
__device__ __forceinline__ float fa_log2e_scale(float scale) { return __fmul_rn(scale, 1.4426950408889634f); }

// fa_max is max(a, b), NaN if either is (PTX max.NaN: one instruction where
// nanmax takes three; the same values, a NaN's payload aside).
__device__ __forceinline__ float fa_max(float a, float b) {
	float y;
	asm("max.NaN.f32 %0, %1, %2;" : "=f"(y) : "f"(a), "f"(b));
	return y;
}

// fa_weights moves the running max M to max(M, m) and returns the factors
// of the running sums (a) and of the chunk's (b).
__device__ __forceinline__ void fa_weights(float *M, float m, float *a, float *b) {
	float mn = fa_max(*M, m);
	*a = fa_exp(*M - mn);
	*b = fa_exp(m - mn);
	*M = mn;
}

// fa_mix is X·a + x·b as fma(x, b, X·a), the same two roundings in every
// kernel that folds, so that they get the same bits.
__device__ __forceinline__ float fa_mix(float X, float a, float x, float b) {
	return __fmaf_rn(x, b, __fmul_rn(X, a));
}

// fa_copy starts copying the BF16 cache rows rows[j] (−1: zeros), j0 ≤ j
// < j1, into shared memory by cp.async (uncommitted: the caller commits
// and waits).
template <int DH>
__device__ __forceinline__ void fa_copy(u16 *ks, u16 *vs, const u8 *kp, const u8 *vp, const i64 *rows, int j0 = 0,
                                        int j1 = FA_CHUNK) {
	constexpr int LD = DH + 8, U = DH / 8;
	for (int i = j0 * U + threadIdx.x; i < j1 * U; i += blockDim.x) {
		int j = i / U, u = i % U;
		u16 *kd = ks + j * LD + u * 8, *vd = vs + j * LD + u * 8;
		if (rows[j] >= 0) {
			i64 off = (rows[j] + u * 8) * 2;
			cp_async16(kd, kp + off);
			cp_async16(vd, vp + off);
		} else {
			uint4 z;
			z.x = z.y = z.z = z.w = 0u;
			*(uint4 *)kd = z;
			*(uint4 *)vd = z;
		}
	}
}

// fa_copy8 starts copying the E4M3 cache rows rows[j] (−1: zeros), j0 ≤ j
// < j1, into shared memory, [FA_CHUNK][DH] bytes each of k and v, by
// cp.async (uncommitted); fa_widen8 then writes them as BF16 [FA_CHUNK]
// [DH + 8], the layout fa_copy gives a BF16 cache, for the same fragment
// loads.
template <int DH>
__device__ __forceinline__ void fa_copy8(u8 *ks, u8 *vs, const u8 *kp, const u8 *vp, const i64 *rows, int j0 = 0,
                                         int j1 = FA_CHUNK) {
	constexpr int U = DH / 16;
	for (int i = j0 * U + threadIdx.x; i < j1 * U; i += blockDim.x) {
		int j = i / U, u = i % U;
		u8 *kd = ks + j * DH + u * 16, *vd = vs + j * DH + u * 16;
		if (rows[j] >= 0) {
			cp_async16(kd, kp + rows[j] + u * 16);
			cp_async16(vd, vp + rows[j] + u * 16);
		} else {
			uint4 z;
			z.x = z.y = z.z = z.w = 0u;
			*(uint4 *)kd = z;
			*(uint4 *)vd = z;
		}
	}
}

// fa_widen16 writes the 16 codes of row j from column d of a chunk of
// codes (c8, [FA_CHUNK][DH] bytes) as BF16 into dst ([FA_CHUNK][DH + 8]).
template <int DH>
__device__ __forceinline__ void fa_widen16(u16 *dst, const u8 *c8, int j, int d) {
	uint4 c = *(const uint4 *)(c8 + j * DH + d);
	u32 w[4] = {c.x, c.y, c.z, c.w}, o[8];
#pragma unroll
	for (int k = 0; k < 4; k++) o[2 * k] = e4m3x2_bf16x2(w[k]), o[2 * k + 1] = e4m3x2_bf16x2(w[k] >> 16);
	u16 *t = dst + j * (DH + 8) + d;
	*(uint4 *)t = make_uint4(o[0], o[1], o[2], o[3]);
	*(uint4 *)(t + 8) = make_uint4(o[4], o[5], o[6], o[7]);
}

template <int DH>
__device__ __forceinline__ void fa_widen8(u16 *ks, u16 *vs, const u8 *k8, const u8 *v8) {
	constexpr int U = DH / 16, N = FA_CHUNK * U;
	for (int i = threadIdx.x; i < 2 * N; i += blockDim.x) {
		int r = i % N;
		fa_widen16<DH>(i < N ? ks : vs, i < N ? k8 : v8, r / U, 16 * (r % U));
	}
}

// fa_rows looks up the pool rows of chunk positions p0 .. p0 + FA_CHUNK − 1
// of KV head kh (−1 past pmax: a table entry past the sequence may be
// anything), all table reads in flight together.
__device__ __forceinline__ void fa_rows(i64 *rows, const int *blocks, int bs, int KVH, int kh, int DH, int p0, int pmax) {
	for (int j = threadIdx.x; j < FA_CHUNK; j += blockDim.x) {
		int p = p0 + j;
		rows[j] = p <= pmax ? (kv_row(blocks, bs, p) * KVH + kh) * DH : -1;
	}
}

// fa_entry reads position p's block-table entry (0 past pmax or without a
// table) early, so that fa_row_of can use it after other work has hidden
// the read's latency.
__device__ __forceinline__ int fa_entry(const int *blocks, int bs, int p, int pmax) {
	return (p <= pmax && blocks) ? blocks[p / bs] : 0;
}

// fa_row_of is position p's pool row of KV head kh (in elements; −1 past
// pmax) from its table entry, as fa_rows computes it.
__device__ __forceinline__ i64 fa_row_of(int entry, const int *blocks, int bs, int p, int pmax, int KVH, int kh,
                                         int DH) {
	return p <= pmax ? ((blocks ? (i64)entry * bs + p % bs : (i64)p) * KVH + kh) * DH : -1;
}

// fa_load puts chunk positions p0 .. p0 + FA_CHUNK − 1 of KV head kh into
// shared memory as terms, zeros past pmax (never read from the cache: a
// table entry past the sequence may be anything).
template <int DH, int KT>
__device__ __forceinline__ void fa_load(u16 *ks, u16 *vs, const u8 *kp, const u8 *vp, int dtype, float kscale,
                                        float vscale, const int *blocks, int bs, int KVH, int kh, int p0, int pmax,
                                        i64 *rows) {
	constexpr int LD = DH + 8;
	// Each position's pool row once (not one table read's latency a copy).
	fa_rows(rows, blocks, bs, KVH, kh, DH, p0, pmax);
	__syncthreads();
	if (KT == 1 && dtype == 2) { // E4M3 rows as their codes' BF16 values
		for (int i = threadIdx.x; i < FA_CHUNK * DH / 2; i += blockDim.x) {
			int j = i / (DH / 2), d = 2 * (i % (DH / 2));
			u32 kc = 0u, vc = 0u;
			if (rows[j] >= 0) {
				kc = *(const unsigned short *)(kp + rows[j] + d);
				vc = *(const unsigned short *)(vp + rows[j] + d);
			}
			*(u32 *)(ks + j * LD + d) = e4m3x2_bf16x2(kc);
			*(u32 *)(vs + j * LD + d) = e4m3x2_bf16x2(vc);
		}
		return;
	}
	if (KT == 1) { // BF16 rows copied as they are
		fa_copy<DH>(ks, vs, kp, vp, rows);
		cp_async_commit();
		cp_async_wait0();
		return;
	}
	for (int i = threadIdx.x; i < FA_CHUNK * DH / 2; i += blockDim.x) {
		int j = i / (DH / 2), d = 2 * (i % (DH / 2));
		float k0 = 0.0f, k1 = 0.0f, v0 = 0.0f, v1 = 0.0f;
		if (rows[j] >= 0) {
			i64 off = rows[j] + d;
			k0 = kv_load(kp, off, dtype, kscale);
			k1 = kv_load(kp, off + 1, dtype, kscale);
			v0 = kv_load(vp, off, dtype, vscale);
			v1 = kv_load(vp, off + 1, dtype, vscale);
		}
		u32 kt[3], vt[3];
		mma_terms(k0, k1, &kt[0], &kt[1], &kt[2]);
		mma_terms(v0, v1, &vt[0], &vt[1], &vt[2]);
#pragma unroll
		for (int m = 0; m < 3; m++) {
			*(u32 *)(ks + (m * FA_CHUNK + j) * LD + d) = kt[m];
			*(u32 *)(vs + (m * FA_CHUNK + j) * LD + d) = vt[m];
		}
	}
}

__device__ __forceinline__ uint4 fa_frag(const u32 *r) {
	uint4 a;
	a.x = r[0], a.y = r[1], a.z = r[2], a.w = r[3];
	return a;
}

// fa_stage_q writes the q of a 16-row tile (n tokens from t, the G query
// heads of KV head kh each) into qs as its first QS BF16 terms [QS][16]
// [DH + 8], zeros past the tokens; threads first, first + step, ... share
// the work.
template <int DH, int QS>
__device__ __forceinline__ void fa_stage_q(u16 *qs, const float *q, int t, int n, int G, int kh, int H, int first,
                                           int step) {
	constexpr int LD = DH + 8;
	for (int i = first; i < 16 * DH / 2; i += step) {
		int r = i / (DH / 2), d = 2 * (i % (DH / 2)), tt = r / G;
		float a = 0.0f, b = 0.0f;
		if (tt < n) {
			const float *qv = q + ((i64)(t + tt) * H + kh * G + r % G) * DH + d;
			a = qv[0];
			b = qv[1];
		}
		u32 tm[3];
		mma_terms(a, b, &tm[0], &tm[1], &tm[2]);
#pragma unroll
		for (int m = 0; m < QS; m++) *(u32 *)(qs + (m * 16 + r) * LD + d) = tm[m];
	}
}

// fa_mask sets the scores of positions past a row's prow to −∞ (fragment
// element e of s[j]: row g + 8·(e >> 1), position c0 + 8j + 2qd + (e & 1)).
__device__ __forceinline__ void fa_mask(float s[8][4], const int prow[2], int c0, int qd) {
	const float ninf = -__int_as_float(0x7f800000);
	int lim[2] = {prow[0] - c0 - 2 * qd, prow[1] - c0 - 2 * qd};
#pragma unroll
	for (int j = 0; j < 8; j++)
#pragma unroll
		for (int e = 0; e < 4; e++)
			if (8 * j + (e & 1) > lim[e >> 1]) s[j][e] = ninf;
}

// fa_softmax turns a 16-row tile's raw scores q·k of chunk positions c0 ..
// c0 + 63 (fa_mask's layout) into P_j = 2^(s_j·sl − max_j s_j·sl) (sl =
// fa_log2e_scale(scale)), the positions past a row's prow at −∞ first
// (when mask: a chunk some row ends inside), and gives each row's m =
// max_j s_j·scale and l = Σ P_j, every lane of a quad the same: a lane's
// own positions in order, then the lanes by xor 1 and 2.
__device__ __forceinline__ void fa_softmax(float s[8][4], const int prow[2], int c0, int qd, float scale, float sl,
                                           bool mask, float mx[2], float l[2]) {
	const float ninf = -__int_as_float(0x7f800000);
	if (mask) fa_mask(s, prow, c0, qd);
	float rm[2] = {ninf, ninf}, ml[2];
#pragma unroll
	for (int j = 0; j < 8; j++)
#pragma unroll
		for (int e = 0; e < 4; e++) rm[e >> 1] = fa_max(rm[e >> 1], s[j][e]);
#pragma unroll
	for (int e = 0; e < 2; e++) {
		rm[e] = fa_max(rm[e], __shfl_xor_sync(0xffffffffu, rm[e], 1));
		rm[e] = fa_max(rm[e], __shfl_xor_sync(0xffffffffu, rm[e], 2));
		mx[e] = __fmul_rn(rm[e], scale);
		ml[e] = __fmul_rn(rm[e], sl);
		l[e] = 0.0f;
	}
#pragma unroll
	for (int j = 0; j < 8; j++)
#pragma unroll
		for (int e = 0; e < 4; e++) {
			float pe = fa_exp2(__fmaf_rn(s[j][e], sl, -ml[e >> 1]));
			s[j][e] = pe;
			l[e >> 1] += pe;
		}
#pragma unroll
	for (int e = 0; e < 2; e++) {
		l[e] += __shfl_xor_sync(0xffffffffu, l[e], 1);
		l[e] += __shfl_xor_sync(0xffffffffu, l[e], 2);
	}
}

template <int DH, int KT, int QT, bool SPLIT, bool PIPE>
__device__ __forceinline__ void fa_run(float *out, float *partials, const float *q, const u8 *kp, const u8 *vp,
                                       int dtype, float kscale, float vscale, const int *tables, int stride,
                                       const int *seq, const int *pos, const int *part_off, const int *work, int bs,
                                       int H, int KVH, float scale) {
	constexpr int LD = DH + 8, NT = DH / 8, DC = DH / 16;
	// The term pairs in order: (q or P term, k or v term); those past QT
	// or KT terms are skipped.
	const int at[6] = {0, 1, 2, 0, 1, 0}, bt[6] = {0, 0, 0, 1, 1, 2};
	extern __shared__ uint4 fa_smem[];
	__shared__ i64 rows[PIPE ? 2 : 1][FA_CHUNK];
	int lane = threadIdx.x & 31, w = threadIdx.x >> 5, W = blockDim.x >> 5, g = lane >> 2, qd = lane & 3;
	int kh = blockIdx.y, G = H / KVH, R = 16 / G;
	int t0 = work[2 * blockIdx.x], n = work[2 * blockIdx.x + 1];
	// q's terms a warp (QS: all three, or with PIPE only the QT it reads),
	// then the chunk's k and v (two of each with PIPE: the next chunk's copy
	// runs while this one's is multiplied).
	constexpr int KV = KT * FA_CHUNK * LD, QS = PIPE ? QT : 3; // KV: one k or v chunk, in u16
	u16 *qs = (u16 *)fa_smem + w * QS * 16 * LD;
	u16 *ks0 = (u16 *)fa_smem + W * QS * 16 * LD;
	const int *blocks = tables ? tables + (i64)seq[t0] * stride : 0;
	int pmax = pos[t0 + n - 1];
	int wt = t0 + w * R, wn = min(R, n - w * R);
	// This lane's rows g and g + 8: position (−1: a row past the tile's
	// tokens) and query head.
	int prow[2], hrow[2];
#pragma unroll
	for (int e = 0; e < 2; e++) {
		int r = g + 8 * e, tt = r / G;
		prow[e] = (r < R * G && tt < wn) ? pos[wt + tt] : -1;
		hrow[e] = kh * G + r % G;
	}
	int wpmax = wn > 0 ? pos[wt + wn - 1] : -1;
	fa_stage_q<DH, QS>(qs, q, wt, wn, G, kh, H, lane, 32);
	__syncwarp();
	const float ninf = -__int_as_float(0x7f800000);
	float M[2] = {ninf, ninf}, L[2] = {0.0f, 0.0f}, oacc[SPLIT ? 1 : NT][4];
	const float sl = fa_log2e_scale(scale);
	if (!SPLIT)
#pragma unroll
		for (int nn = 0; nn < (SPLIT ? 1 : NT); nn++)
#pragma unroll
			for (int e = 0; e < 4; e++) oacc[nn][e] = 0.0f;
	const int step = SPLIT ? gridDim.z : 1;
	if (PIPE && (SPLIT ? blockIdx.z : 0) * FA_CHUNK <= pmax) {
		fa_rows(rows[0], blocks, bs, KVH, kh, DH, (SPLIT ? blockIdx.z : 0) * FA_CHUNK, pmax);
		__syncthreads();
		fa_copy<DH>(ks0, ks0 + 2 * KV, kp, vp, rows[0]);
		cp_async_commit();
	}
	for (int c = SPLIT ? blockIdx.z : 0, it = 0; c * FA_CHUNK <= pmax; c += step, it++) {
		u16 *ks = ks0, *vs = ks0 + (PIPE ? 2 : 1) * KV;
		if (PIPE) {
			// Chunk c's copy was started the round before; start the
			// next's into the other buffers, then wait for c's alone.
			int b = it & 1, cn = c + step;
			ks += b * KV, vs += b * KV;
			__syncthreads(); // every warp is done with the buffers and rows of chunk c − step
			if (cn * FA_CHUNK <= pmax) {
				fa_rows(rows[b ^ 1], blocks, bs, KVH, kh, DH, cn * FA_CHUNK, pmax);
				__syncthreads();
				fa_copy<DH>(ks0 + (b ^ 1) * KV, ks0 + (2 + (b ^ 1)) * KV, kp, vp, rows[b ^ 1]);
			}
			cp_async_commit();
			cp_async_wait1();
			__syncthreads();
		} else {
			__syncthreads(); // every warp is done with the previous chunk
			fa_load<DH, KT>(ks, vs, kp, vp, dtype, kscale, vscale, blocks, bs, KVH, kh, c * FA_CHUNK, pmax, rows[0]);
			__syncthreads();
		}
		if (wpmax < c * FA_CHUNK) continue;
		float s[8][4];
#pragma unroll
		for (int j = 0; j < 8; j++)
#pragma unroll
			for (int e = 0; e < 4; e++) s[j][e] = 0.0f;
#pragma unroll
		for (int dc = 0; dc < DC; dc++) {
			u32 qa[QT][4];
#pragma unroll
			for (int m = 0; m < QT; m++) ldsm_x4(qa[m], qs + (m * 16 + (lane & 15)) * LD + dc * 16 + (lane >> 4) * 8);
#pragma unroll
			for (int i = 0; i < 4; i++) {
				u32 kb[KT][4];
#pragma unroll
				for (int m = 0; m < KT; m++)
					ldsm_x4(kb[m], ks + (m * FA_CHUNK + 16 * i + ((lane >> 4) & 1) * 8 + (lane & 7)) * LD + dc * 16 +
					                   ((lane >> 3) & 1) * 8);
#pragma unroll
				for (int pi = 0; pi < 6; pi++) {
					if (at[pi] >= QT || bt[pi] >= KT) continue;
					uint4 a = fa_frag(qa[at[pi]]);
					mma_bf16(s[2 * i], a, kb[bt[pi]][0], kb[bt[pi]][1]);
					mma_bf16(s[2 * i + 1], a, kb[bt[pi]][2], kb[bt[pi]][3]);
				}
			}
		}
		float mx[2], l[2];
		fa_softmax(s, prow, c * FA_CHUNK, qd, scale, sl, true, mx, l);
		// P's A fragments for positions 16kc .. 16kc + 15 (s[2kc] and
		// s[2kc + 1] side by side) as three BF16 terms each.
		u32 pa[4][3][4];
#pragma unroll
		for (int kc = 0; kc < 4; kc++) {
			mma_terms(s[2 * kc][0], s[2 * kc][1], &pa[kc][0][0], &pa[kc][1][0], &pa[kc][2][0]);
			mma_terms(s[2 * kc][2], s[2 * kc][3], &pa[kc][0][1], &pa[kc][1][1], &pa[kc][2][1]);
			mma_terms(s[2 * kc + 1][0], s[2 * kc + 1][1], &pa[kc][0][2], &pa[kc][1][2], &pa[kc][2][2]);
			mma_terms(s[2 * kc + 1][2], s[2 * kc + 1][3], &pa[kc][0][3], &pa[kc][1][3], &pa[kc][2][3]);
		}
		// This chunk's o, 16 dims at a time (o[0] dims 16dp + 2qd + {0, 1},
		// o[1] dims 16dp + 8 + 2qd + {0, 1}, rows g and g + 8), each folded
		// or stored as it is done: positions by 16 in order, term pairs in
		// order.
		bool mine[2] = {prow[0] >= c * FA_CHUNK, prow[1] >= c * FA_CHUNK}; // the row has positions in the chunk
		float fa[2], fb[2];
		if (!SPLIT)
#pragma unroll
			for (int e2 = 0; e2 < 2; e2++)
				if (mine[e2]) {
					fa_weights(&M[e2], mx[e2], &fa[e2], &fb[e2]);
					L[e2] = fa_mix(L[e2], fa[e2], l[e2], fb[e2]);
				}
		float *part[2];
#pragma unroll
		for (int e2 = 0; e2 < 2; e2++) {
			part[e2] = partials;
			if (SPLIT && mine[e2]) {
				part[e2] += (((i64)part_off[wt + (g + 8 * e2) / G] + c) * H + hrow[e2]) * (DH + 2);
				if (qd == 0) part[e2][0] = mx[e2], part[e2][1] = l[e2];
			}
		}
#pragma unroll
		for (int dp = 0; dp < NT / 2; dp++) {
			float o[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
#pragma unroll
			for (int kc = 0; kc < 4; kc++) {
				u32 vb[KT][4];
#pragma unroll
				for (int m = 0; m < KT; m++)
					ldsm_x4_t(vb[m], vs + (m * FA_CHUNK + 16 * kc + ((lane >> 3) & 1) * 8 + (lane & 7)) * LD +
					                     16 * dp + ((lane >> 4) & 1) * 8);
#pragma unroll
				for (int pi = 0; pi < 6; pi++) {
					if (at[pi] >= QT || bt[pi] >= KT) continue;
					uint4 a = fa_frag(pa[kc][at[pi]]);
					mma_bf16(o[0], a, vb[bt[pi]][0], vb[bt[pi]][1]);
					mma_bf16(o[1], a, vb[bt[pi]][2], vb[bt[pi]][3]);
				}
			}
#pragma unroll
			for (int h2 = 0; h2 < 2; h2++)
#pragma unroll
				for (int e = 0; e < 4; e++) {
					int e2 = e >> 1, nn = 2 * dp + h2;
					if (!mine[e2]) continue;
					if (SPLIT)
						part[e2][2 + 8 * nn + 2 * qd + (e & 1)] = o[h2][e];
					else
						oacc[SPLIT ? 0 : nn][e] = fa_mix(oacc[SPLIT ? 0 : nn][e], fa[e2], o[h2][e], fb[e2]);
				}
		}
	}
	if (SPLIT) return;
#pragma unroll
	for (int e2 = 0; e2 < 2; e2++) {
		if (prow[e2] < 0) continue;
		float *ov = out + ((i64)(wt + (g + 8 * e2) / G) * H + hrow[e2]) * DH;
		float vs = KT == 1 && dtype == 2 ? vscale : 1.0f; // an FP8 cache's v scale (x·1 is x)
#pragma unroll
		for (int nn = 0; nn < (SPLIT ? 1 : NT); nn++) {
			ov[8 * nn + 2 * qd] = __fmul_rn(__fdiv_rn(oacc[nn][2 * e2], L[e2]), vs);
			ov[8 * nn + 2 * qd + 1] = __fmul_rn(__fdiv_rn(oacc[nn][2 * e2 + 1], L[e2]), vs);
		}
	}
}

// lb_flash_merge folds the chunks lb_flash_*_split wrote, in order, for
// token blockIdx.x and query head blockIdx.y (the fold of the whole mode,
// per element; Dh ≤ blockDim.x); a token with part_off −1 ran whole and is
// left alone; out = (O / L)·vscale (an FP8 cache's v scale, 1 otherwise:
// x·1 is x). The partials of FA_MERGE chunks are read at once, so a long
// context costs few memory latencies, not one a chunk.
#define FA_MERGE 32
extern "C" __global__ void lb_flash_merge(float *out, const float *partials, const int *pos, const int *part_off, int H,
                                          int Dh, float vscale) {
	lb_pdl_wait();
	__shared__ float sm[FA_MERGE], sl[FA_MERGE];
	int t = blockIdx.x, h = blockIdx.y, n = pos[t] / FA_CHUNK + 1, d = threadIdx.x;
	if (part_off[t] < 0) return;
	i64 zs = (i64)H * (Dh + 2);
	const float *part = partials + ((i64)part_off[t] * H + h) * (Dh + 2);
	float M = -__int_as_float(0x7f800000), L = 0.0f, O = 0.0f;
	for (int z0 = 0; z0 < n; z0 += FA_MERGE) {
		int nz = min(FA_MERGE, n - z0);
		__syncthreads();
		if (d < nz) {
			sm[d] = part[(z0 + d) * zs];
			sl[d] = part[(z0 + d) * zs + 1];
		}
		__syncthreads();
		float ov[FA_MERGE];
#pragma unroll
		for (int i = 0; i < FA_MERGE; i++) ov[i] = (i < nz && d < Dh) ? part[(z0 + i) * zs + 2 + d] : 0.0f;
#pragma unroll
		for (int i = 0; i < FA_MERGE; i++) {
			if (i >= nz) break;
			float a, b;
			fa_weights(&M, sm[i], &a, &b);
			L = fa_mix(L, a, sl[i], b);
			O = fa_mix(O, a, ov[i], b);
		}
	}
	if (d < Dh) out[((i64)t * H + h) * Dh + d] = __fmul_rn(__fdiv_rn(O, L), vscale);
}

#define FA_PARAMS                                                                                                     \
	float *out, float *partials, const float *q, const u8 *kp, const u8 *vp, int dtype, float kscale, float vscale, \
	    const int *tables, int stride, const int *seq, const int *pos, const int *part_off, const int *work, int bs,  \
	    int H, int KVH, float scale
#define FA_ARGS                                                                                                      \
	out, partials, q, kp, vp, dtype, kscale, vscale, tables, stride, seq, pos, part_off, work, bs, H, KVH, scale

// lb_flash_d<head dim>_k<k and v terms>_<mode>[_q1][_p]: blocks of up to 4
// warps; _q1: q and P as one BF16 term; _p: a BF16 cache's next chunk
// copied while this one is multiplied (the same bits).
extern "C" __global__ void __launch_bounds__(128) lb_flash_d16_k1_whole(FA_PARAMS) { lb_pdl_wait(); fa_run<16, 1, 3, false, false>(FA_ARGS); }
extern "C" __global__ void __launch_bounds__(128) lb_flash_d16_k1_split(FA_PARAMS) { lb_pdl_wait(); fa_run<16, 1, 3, true, false>(FA_ARGS); }
extern "C" __global__ void __launch_bounds__(128) lb_flash_d16_k1_whole_q1(FA_PARAMS) { lb_pdl_wait(); fa_run<16, 1, 1, false, false>(FA_ARGS); }
extern "C" __global__ void __launch_bounds__(128) lb_flash_d16_k1_split_q1(FA_PARAMS) { lb_pdl_wait(); fa_run<16, 1, 1, true, false>(FA_ARGS); }
extern "C" __global__ void __launch_bounds__(128) lb_flash_d16_k3_whole(FA_PARAMS) { lb_pdl_wait(); fa_run<16, 3, 3, false, false>(FA_ARGS); }
extern "C" __global__ void __launch_bounds__(128) lb_flash_d16_k3_split(FA_PARAMS) { lb_pdl_wait(); fa_run<16, 3, 3, true, false>(FA_ARGS); }
extern "C" __global__ void __launch_bounds__(128) lb_flash_d16_k3_whole_q1(FA_PARAMS) { lb_pdl_wait(); fa_run<16, 3, 1, false, false>(FA_ARGS); }
extern "C" __global__ void __launch_bounds__(128) lb_flash_d16_k3_split_q1(FA_PARAMS) { lb_pdl_wait(); fa_run<16, 3, 1, true, false>(FA_ARGS); }
extern "C" __global__ void __launch_bounds__(128) lb_flash_d32_k1_whole(FA_PARAMS) { lb_pdl_wait(); fa_run<32, 1, 3, false, false>(FA_ARGS); }
extern "C" __global__ void __launch_bounds__(128) lb_flash_d32_k1_split(FA_PARAMS) { lb_pdl_wait(); fa_run<32, 1, 3, true, false>(FA_ARGS); }
extern "C" __global__ void __launch_bounds__(128) lb_flash_d32_k1_whole_q1(FA_PARAMS) { lb_pdl_wait(); fa_run<32, 1, 1, false, false>(FA_ARGS); }
extern "C" __global__ void __launch_bounds__(128) lb_flash_d32_k1_split_q1(FA_PARAMS) { lb_pdl_wait(); fa_run<32, 1, 1, true, false>(FA_ARGS); }
extern "C" __global__ void __launch_bounds__(128) lb_flash_d32_k3_whole(FA_PARAMS) { lb_pdl_wait(); fa_run<32, 3, 3, false, false>(FA_ARGS); }
extern "C" __global__ void __launch_bounds__(128) lb_flash_d32_k3_split(FA_PARAMS) { lb_pdl_wait(); fa_run<32, 3, 3, true, false>(FA_ARGS); }
extern "C" __global__ void __launch_bounds__(128) lb_flash_d32_k3_whole_q1(FA_PARAMS) { lb_pdl_wait(); fa_run<32, 3, 1, false, false>(FA_ARGS); }
extern "C" __global__ void __launch_bounds__(128) lb_flash_d32_k3_split_q1(FA_PARAMS) { lb_pdl_wait(); fa_run<32, 3, 1, true, false>(FA_ARGS); }
extern "C" __global__ void __launch_bounds__(128) lb_flash_d64_k1_whole(FA_PARAMS) { lb_pdl_wait(); fa_run<64, 1, 3, false, false>(FA_ARGS); }
extern "C" __global__ void __launch_bounds__(128) lb_flash_d64_k1_split(FA_PARAMS) { lb_pdl_wait(); fa_run<64, 1, 3, true, false>(FA_ARGS); }
extern "C" __global__ void __launch_bounds__(128) lb_flash_d64_k1_whole_q1(FA_PARAMS) { lb_pdl_wait(); fa_run<64, 1, 1, false, false>(FA_ARGS); }
extern "C" __global__ void __launch_bounds__(128) lb_flash_d64_k1_split_q1(FA_PARAMS) { lb_pdl_wait(); fa_run<64, 1, 1, true, false>(FA_ARGS); }
extern "C" __global__ void __launch_bounds__(128) lb_flash_d64_k3_whole(FA_PARAMS) { lb_pdl_wait(); fa_run<64, 3, 3, false, false>(FA_ARGS); }
extern "C" __global__ void __launch_bounds__(128) lb_flash_d64_k3_split(FA_PARAMS) { lb_pdl_wait(); fa_run<64, 3, 3, true, false>(FA_ARGS); }
extern "C" __global__ void __launch_bounds__(128) lb_flash_d64_k3_whole_q1(FA_PARAMS) { lb_pdl_wait(); fa_run<64, 3, 1, false, false>(FA_ARGS); }
extern "C" __global__ void __launch_bounds__(128) lb_flash_d64_k3_split_q1(FA_PARAMS) { lb_pdl_wait(); fa_run<64, 3, 1, true, false>(FA_ARGS); }
extern "C" __global__ void __launch_bounds__(128) lb_flash_d128_k1_whole(FA_PARAMS) { lb_pdl_wait(); fa_run<128, 1, 3, false, false>(FA_ARGS); }
extern "C" __global__ void __launch_bounds__(128) lb_flash_d128_k1_split(FA_PARAMS) { lb_pdl_wait(); fa_run<128, 1, 3, true, false>(FA_ARGS); }
extern "C" __global__ void __launch_bounds__(128) lb_flash_d128_k1_whole_q1(FA_PARAMS) { lb_pdl_wait(); fa_run<128, 1, 1, false, false>(FA_ARGS); }
extern "C" __global__ void __launch_bounds__(128) lb_flash_d128_k1_split_q1(FA_PARAMS) { lb_pdl_wait(); fa_run<128, 1, 1, true, false>(FA_ARGS); }
extern "C" __global__ void __launch_bounds__(128) lb_flash_d128_k3_whole(FA_PARAMS) { lb_pdl_wait(); fa_run<128, 3, 3, false, false>(FA_ARGS); }
extern "C" __global__ void __launch_bounds__(128) lb_flash_d128_k3_split(FA_PARAMS) { lb_pdl_wait(); fa_run<128, 3, 3, true, false>(FA_ARGS); }
extern "C" __global__ void __launch_bounds__(128) lb_flash_d128_k3_whole_q1(FA_PARAMS) { lb_pdl_wait(); fa_run<128, 3, 1, false, false>(FA_ARGS); }
extern "C" __global__ void __launch_bounds__(128) lb_flash_d128_k3_split_q1(FA_PARAMS) { lb_pdl_wait(); fa_run<128, 3, 1, true, false>(FA_ARGS); }
extern "C" __global__ void __launch_bounds__(128) lb_flash_d64_k1_whole_p(FA_PARAMS) { lb_pdl_wait(); fa_run<64, 1, 3, false, true>(FA_ARGS); }
extern "C" __global__ void __launch_bounds__(128) lb_flash_d64_k1_split_p(FA_PARAMS) { lb_pdl_wait(); fa_run<64, 1, 3, true, true>(FA_ARGS); }
extern "C" __global__ void __launch_bounds__(128) lb_flash_d64_k1_whole_q1_p(FA_PARAMS) { lb_pdl_wait(); fa_run<64, 1, 1, false, true>(FA_ARGS); }
extern "C" __global__ void __launch_bounds__(128) lb_flash_d64_k1_split_q1_p(FA_PARAMS) { lb_pdl_wait(); fa_run<64, 1, 1, true, true>(FA_ARGS); }
extern "C" __global__ void __launch_bounds__(128) lb_flash_d128_k1_whole_p(FA_PARAMS) { lb_pdl_wait(); fa_run<128, 1, 3, false, true>(FA_ARGS); }
extern "C" __global__ void __launch_bounds__(128) lb_flash_d128_k1_split_p(FA_PARAMS) { lb_pdl_wait(); fa_run<128, 1, 3, true, true>(FA_ARGS); }
extern "C" __global__ void __launch_bounds__(128) lb_flash_d128_k1_whole_q1_p(FA_PARAMS) { lb_pdl_wait(); fa_run<128, 1, 1, false, true>(FA_ARGS); }
extern "C" __global__ void __launch_bounds__(128) lb_flash_d128_k1_split_q1_p(FA_PARAMS) { lb_pdl_wait(); fa_run<128, 1, 1, true, true>(FA_ARGS); }
