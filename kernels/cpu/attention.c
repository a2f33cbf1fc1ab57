//go:build cgo

// attention.c: causal grouped-query attention of T new tokens over a
// sequence's KV cache, contiguous or paged, in float32, the context cut into
// chunks of LB_ATT_CHUNK positions at fixed positions.
//
// Computes, for each new token t (position p = start + t) and query head h,
// reading KV head kh = h / (H / KVH), with s_j = (q[t,h,:] · k[j,kh,:]) · scale:
//   chunk c = positions 64c .. min(64c + 63, p), for c = 0 .. p / 64:
//     m_c = max_j s_j;  P_j = exp(s_j − m_c);  l_c = Σ_j P_j;  o_c = Σ_j P_j · v[j,kh,:]
//     (float32, j in order);
//   fold in order: (M, L, O) = chunk 0's; for c > 0, M' = max(M, m_c),
//     a = exp(M − M'), b = exp(m_c − M'), L = L·a + l_c·b, O = O·a + o_c·b
//     (each product and sum rounded, no fused multiply-add); out = O / L.
// This is kernels/cuda's contract (cu/attention_mma.cu), with this file's
// own dot products and exp: lb_exp (internal.h), the same bits on every
// path, a chunk's scores 16 or 8 at a time. A context of up to 64
// positions is one chunk: the two-pass softmax of one max, one sum and one
// division.
//
// Layout: q, out [T, H, Dh]. The cache is two pools of rows [KVH, Dh] of
// float32, BF16 or E4M3 (lb_kv_dtype); position j is pool row
// blocks[j / bs]·bs + j % bs (a contiguous cache: one block, bs = start+T),
// the new tokens already written at positions start..start+T-1. BF16 and
// E4M3 rows are decoded to float32 (E4M3 times the pool's scale, one
// float32 product, as kernels.KVCache.Load) into a per-thread row before the
// dot product or the accumulation, so a cache's dtype changes its values,
// never the order of the sums. A partial (o_c, m_c, l_c) is a record of ps
// floats: o_c [Dh], m_c, l_c, padded to 16 floats.
//
// Variants: the q·k dot product and the P·v accumulation per code path:
// _avx512 (16 lanes, FMA, masked tail), _avx2 (8 lanes, FMA), _generic
// (8 scalar lanes, multiply then add), and the decode of a BF16 or E4M3
// row (kvdec: _avx512 vectorizes both, _avx2 BF16; the same values on every
// path, TestKVDecode). _avx512 decodes 16 elements at a time into
// registers inside its dot products and accumulations, once for up to four
// query heads of a KV head; the other paths decode a row into scratch
// first. The dot product sums lane i mod L in order of i and then the
// lanes pairwise, so it depends only on Dh; four positions' dot products
// run side by side (their FMA chains overlap, each in its own order). The
// fold is plain C, the same on every path.
//
// Tasks: one chunk of one token is computed by att_chunk for the query
// heads of nkv consecutive KV heads, which reads that chunk's rows position
// by position: with nkv = KVH, whole rows, a contiguous stream the hardware
// prefetchers follow within each 4 KiB page (one KV head's rows, 4 KiB
// apart at Qwen3's shapes, they do not follow, nor did software
// prefetching make that fast). Two modes. Whole (T at least LB_ATT_TASKS a
// thread, prefill): a task is one token's query heads, all KV heads, every
// chunk in order, folded as it goes. Split (fewer tokens, decode): a task
// is one chunk of one token for all KV heads, or for the most that still
// give every thread a task; it writes its partials to scratch, and a
// second pass folds each (t, h)'s chunks in order. A chunk's partial is the same bits in either mode, and the fold
// the same operations in the same order, so a (t, h) result depends only
// on q[t,h] and the cache up to p: not on T, start split, block table,
// batch, mode, grouping or thread count. The value pass adds up to four
// positions into a head's accumulator per load and store of it (axpy4),
// the same FMAs in the same order as one position at a time. Measured on
// the 2-core Xeon VM (BenchmarkAttentionDecode: Qwen3-0.6B's decode at 272
// positions, float32 cache from memory): 158 µs a call (14 GB/s) with a
// task per KV head before, 116 µs (19 GB/s) then, against about 105 µs for
// the same tasks only reading the rows; decoding in registers took the
// cached calls from 64-70 to 52-54 µs (float32), 67-68 to 53-58 (BF16) and
// 80-89 to 68-70 (E4M3), the same bits (BENCHMARKS.md).
//
// Tested by TestAttention (prefill and decode, GQA, against float64 loops),
// TestBatchInvariance and kerneltest (Attention and PagedAttention, every
// dtype, shuffled block tables).
#include <math.h>
#include <pthread.h>

#include "internal.h"

// Positions a chunk spans, at multiples of it from position 0: the fold's
// structure, shared with kernels/cuda (FA_CHUNK).
#define LB_ATT_CHUNK 64
// Positions ahead whose rows a task prefetches, and how many of their
// first cache lines (into L2): the hardware prefetchers stream the rest of
// a row, contiguous, but do not cross into the next 4 KiB page, which at
// Qwen3-0.6B's shape (8 KV heads of 128 float32) is the next position's
// row. Prefetching every line into L1 instead was 40% slower: the
// prefetches queued for the line fill buffers. 16 lines (1 KiB: a whole
// E4M3 row at that shape, half a BF16 one): on the Zen 5 VM of 2026-12-03
// (BenchmarkAttentionDecode at 272 positions from memory, alternating
// builds) the quietest of three rounds took E4M3 from 146-150 µs a call to
// 79-81 and BF16 from 129-137 to 101-112 against 8 lines, float32
// unchanged; the two noisier rounds overlap (BENCHMARKS.md). Whole rows, or
// 6 to 16 positions ahead, made float32 10-25% slower.
#define LB_ATT_PREFETCH 3
#define LB_ATT_PREFETCH_LINES 16
// Tasks per thread the whole mode needs, at least, to be chosen.
#define LB_ATT_TASKS 4

typedef struct att_job {
	float *out;
	const float *q;
	const uint8_t *k, *v;
	int dtype;
	float kscale, vscale;
	int64_t T, start, H, KVH, Dh;
	float scale;
	int64_t nkv;         // KV heads a task takes, a divisor of KVH
	int64_t ps;          // floats of a partial record: o [Dh], m, l, padded
	const int64_t *rows; // [ctx]: the byte offset of each position's row (all KV heads) in a pool
	const int64_t *off;  // split mode: [T + 1], token t's chunks are off[t] .. off[t+1]-1
	const int32_t *tok;  // split mode: [off[T]], the token of each chunk
	float *part;         // split mode: [off[T]][H] partial records
	float *scratch;      // per thread: scores [nh][LB_ATT_CHUNK], 4 decoded rows [Dh], 2 records [nh]
	int64_t scratch_stride;
} att_job;

static inline float e4m3_value(uint8_t c) {
	int mag = c & 0x7F;
	float v;
	if (mag == 0x7F)
		v = NAN;
	else if (mag < 8)
		v = ldexpf((float)mag, -9);
	else
		v = ldexpf((float)(8 | (mag & 7)), (mag >> 3) - 10);
	return c & 0x80 ? -v : v;
}

static float e4m3_lut[256];
static pthread_once_t e4m3_lut_once = PTHREAD_ONCE_INIT;
static void e4m3_lut_init(void) {
	for (int c = 0; c < 256; c++) e4m3_lut[c] = e4m3_value((uint8_t)c);
}

// A path's kvdec writes n elements of a BF16 or E4M3 cache row as
// float32 into dst: the BF16 values, or each E4M3 value times sc (one
// float32 product). Exact but for that product's rounding, which every
// path does once: the same values on every path.
typedef void (*kvdec_fn)(float *dst, const uint8_t *src, int64_t n, int dtype, float sc);

static void kvdec_generic(float *dst, const uint8_t *src, int64_t n, int dtype, float sc) {
	if (dtype == LB_KV_BF16) {
		const uint16_t *p = (const uint16_t *)src;
		for (int64_t d = 0; d < n; d++) {
			uint32_t u = (uint32_t)p[d] << 16;
			memcpy(dst + d, &u, 4);
		}
		return;
	}
	for (int64_t d = 0; d < n; d++) dst[d] = e4m3_lut[src[d]] * sc;
}

// kv_rows4 points rows at the cache rows (the pool's bytes) of positions
// i .. i + nb − 1 (nb ≤ 4), KV head kh; rows past nb repeat the first,
// whose products att_chunk never uses.
LB_INLINE void kv_rows4(const att_job *j, const uint8_t *pool, int64_t i, int64_t nb, int64_t kh,
                        const uint8_t *rows[4]) {
	int64_t es = j->dtype == LB_KV_F32 ? 4 : j->dtype == LB_KV_BF16 ? 2 : 1;
	for (int64_t x = 0; x < 4; x++) rows[x] = pool + j->rows[i + (x < nb ? x : 0)] + kh * j->Dh * es;
}

// A path supplies dot4, the dot products of na ≤ 4 vectors (a, n floats
// apart) with cache rows b[0..3], each reduced exactly like one dot product
// alone (the chains only overlap), and axpy4, for each of na heads (y and a
// ys and as floats apart) y += a[r]·x[r] for r = 0..nb-1 in order, element
// by element: one load and store of y for up to four positions' FMAs, the
// same operations as nb axpys one after the other. Both take the rows as
// the pool stores them (dtype, scale sc) and use their float32 values
// (kvdec's), each row decoded once for the na heads: _avx512 16 elements
// at a time into registers, the other paths each row into buf (4 rows of n
// floats) first.
typedef void (*dot4_fn)(const float *a, int64_t na, const uint8_t *const b[4], int64_t n, int dtype, float sc,
                        float *buf, float out[4][4]);
typedef void (*axpy_fn)(float *y, int64_t ys, const float *a, int64_t as, int64_t na, const uint8_t *const x[4],
                        int64_t nb, int64_t n, int dtype, float sc, float *buf);

// A path's exps sets s[i] = exp(s[i] − m) for i < n with the kernels' own
// exp (lb_exp, internal.h): the same bits on every path.
typedef void (*exps_fn)(float *s, int64_t n, float m);

static void exps_generic(float *s, int64_t n, float m) {
	for (int64_t i = 0; i < n; i++) s[i] = lb_expf(s[i] - m);
}

// kv_floats4 gives the float32 values of rows (n elements each; a row
// that repeats the first is not decoded again): the float32 pool's own,
// else decoded by dec into buf.
LB_INLINE void kv_floats4(const float *out[4], const uint8_t *const rows[4], int64_t n, int dtype, float sc,
                          float *buf, kvdec_fn dec) {
	for (int64_t x = 0; x < 4; x++) {
		if (x > 0 && rows[x] == rows[0]) {
			out[x] = out[0];
		} else if (dtype == LB_KV_F32) {
			out[x] = (const float *)rows[x];
		} else {
			dec(buf + x * n, rows[x], n, dtype, sc);
			out[x] = buf + x * n;
		}
	}
}

// kv_prefetch asks for the first LB_ATT_PREFETCH_LINES lines of position
// i's rows of KV heads kh..kh+nkv-1 (one contiguous span), when i < n.
LB_INLINE void kv_prefetch(const att_job *j, const uint8_t *pool, int64_t i, int64_t n, int64_t kh, int64_t nkv) {
	if (i >= n) return;
	int64_t es = j->dtype == LB_KV_F32 ? 4 : j->dtype == LB_KV_BF16 ? 2 : 1;
	const uint8_t *p = pool + j->rows[i] + kh * j->Dh * es;
	int64_t bytes = nkv * j->Dh * es;
	for (int64_t b = 0; b < LB_ATT_PREFETCH_LINES * 64 && b < bytes; b += 64) lb_prefetch_l2(p + b);
}

// att_chunk computes chunk c of token t for the query heads of KV heads
// kh0..kh0+nkv-1 (nh = nkv·G of them, from kh0·G): record g of r (ps
// floats apart) gets o_c, m_c and l_c of head kh0·G + g. Each key and value
// row is read (and decoded) once for all the heads that use it, positions
// in order; every head's scores, max, sum and accumulation run in the same
// order as for a head alone, so nkv changes no result.
LB_INLINE void att_chunk(const att_job *j, int64_t t, int64_t c, int64_t kh0, float *r, float *ws, dot4_fn dot4,
                         axpy_fn axpy, exps_fn exps) {
	const int64_t G = j->H / j->KVH, nkv = j->nkv, nh = nkv * G, Dh = j->Dh, ps = j->ps, CH = LB_ATT_CHUNK;
	const int64_t j0 = c * CH, e = j->start + t + 1 - j0 < CH ? j->start + t + 1 : j0 + CH;
	float *s = ws, *buf = s + nh * CH;
	const float *q = j->q + (t * j->H + kh0 * G) * Dh;
	for (int64_t g = 0; g < nh; g++) r[g * ps + Dh] = -INFINITY;
	for (int64_t i = j0; i < j0 + LB_ATT_PREFETCH; i++) kv_prefetch(j, j->k, i, e, kh0, nkv);
	for (int64_t i = j0; i < e; i += 4) {
		int64_t nb = e - i < 4 ? e - i : 4;
		for (int64_t x = 0; x < 4; x++) kv_prefetch(j, j->k, i + x + LB_ATT_PREFETCH, e, kh0, nkv);
		for (int64_t kk = 0; kk < nkv; kk++) {
			const uint8_t *rows[4];
			kv_rows4(j, j->k, i, nb, kh0 + kk, rows);
			for (int64_t g0 = kk * G; g0 < (kk + 1) * G; g0 += 4) {
				int64_t na = (kk + 1) * G - g0 < 4 ? (kk + 1) * G - g0 : 4;
				float d[4][4];
				dot4(q + g0 * Dh, na, rows, Dh, j->dtype, j->kscale, buf, d);
				for (int64_t g = g0; g < g0 + na; g++) {
					// The running max in a register: a store to s may not alias it.
					float *m = r + g * ps + Dh, mv = *m;
					for (int64_t x = 0; x < nb; x++) {
						float v = d[g - g0][x] * j->scale;
						s[g * CH + i - j0 + x] = v;
						mv = v > mv ? v : mv;
					}
					*m = mv;
				}
			}
		}
	}
	for (int64_t g = 0; g < nh; g++) {
		float *sg = s + g * CH, acc = 0;
		exps(sg, e - j0, r[g * ps + Dh]);
		for (int64_t i = 0; i < e - j0; i++) acc += sg[i];
		r[g * ps + Dh + 1] = acc;
		memset(r + g * ps, 0, (size_t)Dh * sizeof *r);
	}
	for (int64_t i = j0; i < j0 + LB_ATT_PREFETCH; i++) kv_prefetch(j, j->v, i, e, kh0, nkv);
	for (int64_t i = j0; i < e; i += 4) {
		int64_t nb = e - i < 4 ? e - i : 4;
		for (int64_t x = 0; x < 4; x++) kv_prefetch(j, j->v, i + x + LB_ATT_PREFETCH, e, kh0, nkv);
		for (int64_t kk = 0; kk < nkv; kk++) {
			const uint8_t *rows[4];
			kv_rows4(j, j->v, i, nb, kh0 + kk, rows);
			for (int64_t g0 = kk * G; g0 < (kk + 1) * G; g0 += 4) {
				int64_t na = (kk + 1) * G - g0 < 4 ? (kk + 1) * G - g0 : 4;
				axpy(r + g0 * ps, ps, s + g0 * CH + i - j0, CH, na, rows, nb, Dh, j->dtype, j->vscale, buf);
			}
		}
	}
}

// att_fold folds the partial record p into the running record f (the
// contract's fold step; plain C on every path, no fused multiply-add: the
// package is compiled -std=c11, whose default is -ffp-contract=off).
static void att_fold(float *f, const float *p, int64_t Dh) {
	float M = f[Dh], m = p[Dh], Mn = m > M ? m : M;
	float a = lb_expf(M - Mn), b = lb_expf(m - Mn);
	f[Dh] = Mn;
	f[Dh + 1] = f[Dh + 1] * a + p[Dh + 1] * b;
	for (int64_t d = 0; d < Dh; d++) f[d] = f[d] * a + p[d] * b;
}

// att_finish writes out = O / L of a folded record.
static void att_finish(float *out, const float *f, int64_t Dh) {
	for (int64_t d = 0; d < Dh; d++) out[d] = f[d] / f[Dh + 1];
}

// att_whole is a whole-mode task: token task / (KVH/nkv), the query heads
// of its (task % (KVH/nkv))-th nkv KV heads, every chunk, folded in order.
LB_INLINE void att_whole(const att_job *j, int64_t task, int tid, dot4_fn dot4, axpy_fn axpy, exps_fn exps) {
	const int64_t G = j->H / j->KVH, nh = j->nkv * G, ng = j->KVH / j->nkv, Dh = j->Dh, ps = j->ps;
	int64_t t = task / ng, kh0 = (task % ng) * j->nkv, nch = (j->start + t) / LB_ATT_CHUNK + 1;
	float *ws = j->scratch + (int64_t)tid * j->scratch_stride;
	float *f = ws + ((nh * LB_ATT_CHUNK + 4 * Dh + 15) & ~(int64_t)15), *p = f + nh * ps;
	att_chunk(j, t, 0, kh0, f, ws, dot4, axpy, exps);
	for (int64_t c = 1; c < nch; c++) {
		att_chunk(j, t, c, kh0, p, ws, dot4, axpy, exps);
		for (int64_t g = 0; g < nh; g++) att_fold(f + g * ps, p + g * ps, Dh);
	}
	float *o = j->out + (t * j->H + kh0 * G) * Dh;
	for (int64_t g = 0; g < nh; g++) att_finish(o + g * Dh, f + g * ps, Dh);
}

// att_split is a split-mode task: chunk task / (KVH/nkv) of all tokens'
// chunks, for its (task % (KVH/nkv))-th nkv KV heads, into the partials.
LB_INLINE void att_split(const att_job *j, int64_t task, int tid, dot4_fn dot4, axpy_fn axpy, exps_fn exps) {
	const int64_t G = j->H / j->KVH, ng = j->KVH / j->nkv;
	int64_t ci = task / ng, kh0 = (task % ng) * j->nkv, t = j->tok[ci];
	float *r = j->part + (ci * j->H + kh0 * G) * j->ps;
	att_chunk(j, t, ci - j->off[t], kh0, r, j->scratch + (int64_t)tid * j->scratch_stride, dot4, axpy, exps);
}

// att_merge folds the partials of token task / H, head task % H, in chunk
// order, into chunk 0's record, and writes the head's output.
static void att_merge(void *arg, int64_t task, int tid) {
	(void)tid;
	const att_job *j = arg;
	int64_t t = task / j->H, h = task % j->H, Dh = j->Dh, hs = j->H * j->ps;
	float *f = j->part + (j->off[t] * j->H + h) * j->ps;
	for (int64_t c = 1; c < j->off[t + 1] - j->off[t]; c++) att_fold(f, f + c * hs, Dh);
	att_finish(j->out + (t * j->H + h) * Dh, f, Dh);
}

#define ATT_TASKS(path, attr)                                                     \
	attr static void att_whole_##path(void *arg, int64_t task, int tid) {     \
		att_whole(arg, task, tid, dot4_##path, axpy_##path, exps_##path); \
	}                                                                         \
	attr static void att_split_##path(void *arg, int64_t task, int tid) {     \
		att_split(arg, task, tid, dot4_##path, axpy_##path, exps_##path); \
	}

LB_INLINE float dot_generic(const float *a, const float *b, int64_t n) {
	float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
	int64_t i = 0;
	for (; i + 8 <= n; i += 8)
		for (int l = 0; l < 8; l++) acc[l] += a[i + l] * b[i + l];
	for (int l = 0; i + l < n; l++) acc[l] += a[i + l] * b[i + l];
	return lb_hsum8(acc);
}

static void dot4_generic(const float *a, int64_t na, const uint8_t *const b[4], int64_t n, int dtype, float sc,
                         float *buf, float out[4][4]) {
	const float *f[4];
	kv_floats4(f, b, n, dtype, sc, buf, kvdec_generic);
	for (int64_t g = 0; g < na; g++)
		for (int r = 0; r < 4; r++) out[g][r] = dot_generic(a + g * n, f[r], n);
}

static void axpy_generic(float *y, int64_t ys, const float *a, int64_t as, int64_t na, const uint8_t *const rows[4],
                         int64_t nb, int64_t n, int dtype, float sc, float *buf) {
	const float *x[4];
	kv_floats4(x, rows, n, dtype, sc, buf, kvdec_generic);
	for (int64_t g = 0; g < na; g++)
		for (int64_t i = 0; i < n; i++) {
			float acc = y[g * ys + i];
			for (int64_t r = 0; r < nb; r++) acc += a[g * as + r] * x[r][i];
			y[g * ys + i] = acc;
		}
}

ATT_TASKS(generic, )

#ifdef LB_X86
// kv16_avx512 returns elements i .. i + 15 (mask k, zeros outside) of a
// cache row as float32: kvdec_avx512's values, in a register.
LB_INLINE LB_AVX512 __m512 kv16_avx512(const uint8_t *row, int64_t i, __mmask16 k, int dtype, __m512 s) {
	if (dtype == LB_KV_F32) return _mm512_maskz_loadu_ps(k, (const float *)row + i);
	if (dtype == LB_KV_BF16)
		return _mm512_castsi512_ps(
		    _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(k, (const uint16_t *)row + i)), 16));
	return _mm512_mul_ps(lb_e4m3x16_avx512(_mm_maskz_loadu_epi8(k, row + i)), s);
}

// hsum4_avx512 sets out[r] = lb_hsum_avx512(v[r]) for r < 4, the same
// pairwise sums (lane i + lane i+8, then i + i+4, i + i+2, i + i+1) done
// for the four vectors together: 13 vector operations against 32.
LB_INLINE LB_AVX512 void hsum4_avx512(const __m512 v[4], float out[4]) {
	// 16 -> 8: v[0]'s sums in 128-bit lanes 0-1 of a01, v[1]'s in 2-3.
	__m512 a01 = _mm512_add_ps(_mm512_shuffle_f32x4(v[0], v[1], 0x44), _mm512_shuffle_f32x4(v[0], v[1], 0xEE));
	__m512 a23 = _mm512_add_ps(_mm512_shuffle_f32x4(v[2], v[3], 0x44), _mm512_shuffle_f32x4(v[2], v[3], 0xEE));
	// 8 -> 4: v[r]'s four sums in 128-bit lane r.
	__m512 b = _mm512_add_ps(_mm512_shuffle_f32x4(a01, a23, 0x88), _mm512_shuffle_f32x4(a01, a23, 0xDD));
	// 4 -> 2 -> 1 within each lane: element 0 of lane r is v[r]'s sum.
	b = _mm512_add_ps(b, _mm512_permute_ps(b, 0x4E));
	b = _mm512_add_ps(b, _mm512_permute_ps(b, 0xB1));
	float t[16];
	_mm512_storeu_ps(t, b);
	for (int r = 0; r < 4; r++) out[r] = t[4 * r];
}

// dot4_kv_avx512 is dot4 for NA heads on a cache of dtype: each chunk of
// 16 elements of the four rows decoded once (kv16_avx512) and multiplied
// into NA × 4 chains.
LB_INLINE LB_AVX512 void dot4_kv_avx512(const float *a, const int NA, const uint8_t *const b[4], int64_t n,
                                        const int dtype, float sc, float out[4][4]) {
	__m512 acc[4][4], s = _mm512_set1_ps(sc * 256.0f);
	for (int g = 0; g < NA; g++)
		for (int r = 0; r < 4; r++) acc[g][r] = _mm512_setzero_ps();
	for (int64_t i = 0; i < n; i += 16) {
		__mmask16 k = n - i >= 16 ? 0xFFFF : lb_tail_mask16(n - i);
		__m512 bv[4];
		for (int r = 0; r < 4; r++) bv[r] = kv16_avx512(b[r], i, k, dtype, s);
		for (int g = 0; g < NA; g++) {
			__m512 av = _mm512_maskz_loadu_ps(k, a + g * n + i);
			for (int r = 0; r < 4; r++) acc[g][r] = _mm512_fmadd_ps(av, bv[r], acc[g][r]);
		}
	}
	for (int g = 0; g < NA; g++) hsum4_avx512(acc[g], out[g]);
}

// axpy_kv_avx512 is axpy4 for NA heads on a cache of dtype: each chunk of
// 16 elements of the nb rows decoded once.
LB_INLINE LB_AVX512 void axpy_kv_avx512(float *y, int64_t ys, const float *a, int64_t as, const int NA,
                                        const uint8_t *const x[4], int64_t nb, int64_t n, const int dtype, float sc) {
	__m512 A[4][4], s = _mm512_set1_ps(sc * 256.0f);
	for (int g = 0; g < NA; g++)
		for (int r = 0; r < 4; r++) A[g][r] = _mm512_set1_ps(r < nb ? a[g * as + r] : 0);
	for (int64_t i = 0; i < n; i += 16) {
		__mmask16 k = n - i >= 16 ? 0xFFFF : lb_tail_mask16(n - i);
		__m512 xv[4];
		for (int r = 0; r < 4; r++) xv[r] = r < nb ? kv16_avx512(x[r], i, k, dtype, s) : _mm512_setzero_ps();
		for (int g = 0; g < NA; g++) {
			__m512 acc = _mm512_maskz_loadu_ps(k, y + g * ys + i);
			if (nb == 4)
				for (int r = 0; r < 4; r++) acc = _mm512_fmadd_ps(A[g][r], xv[r], acc);
			else
				for (int r = 0; r < nb; r++) acc = _mm512_fmadd_ps(A[g][r], xv[r], acc);
			_mm512_mask_storeu_ps(y + g * ys + i, k, acc);
		}
	}
}

// dot4_avx512 and axpy_avx512 decode the rows 16 elements at a time into
// registers (kv16_avx512), once for up to four heads, in one loop per
// cache dtype and head count: no row goes through memory, and no call
// decodes it (BenchmarkAttentionDecode, a decode step of Qwen3-0.6B at 272
// positions from cache, BF16: 93 µs a call before; BENCHMARKS.md).
#define ATT_NA_CASES(call, DT, base)                                                                                \
	case base:                                                                                                   \
		call(1, DT);                                                                                         \
		break;                                                                                               \
	case base + 1:                                                                                               \
		call(2, DT);                                                                                         \
		break;                                                                                               \
	case base + 2:                                                                                               \
		call(3, DT);                                                                                         \
		break;                                                                                               \
	case base + 3:                                                                                               \
		call(4, DT);                                                                                         \
		break;
// ATT_BY_DTYPE_NA runs call(NA, DT) with the constants equal to na (1 to
// 4) and dtype (F32, BF16, else FP8), so that each combination compiles
// to a loop of its own.
#define ATT_BY_DTYPE_NA(call, dtype, na)                                                                            \
	switch (4 * ((dtype) == LB_KV_F32 ? 0 : (dtype) == LB_KV_BF16 ? 1 : 2) + (int)(na) - 1) {                   \
		ATT_NA_CASES(call, LB_KV_F32, 0)                                                                     \
		ATT_NA_CASES(call, LB_KV_BF16, 4)                                                                    \
		ATT_NA_CASES(call, LB_KV_FP8, 8)                                                                     \
	}

LB_AVX512 static void dot4_avx512(const float *a, int64_t na, const uint8_t *const b[4], int64_t n, int dtype,
                                  float sc, float *buf, float out[4][4]) {
	(void)buf;
#define DOT4_CALL(NA, DT) dot4_kv_avx512(a, NA, b, n, DT, sc, out)
	ATT_BY_DTYPE_NA(DOT4_CALL, dtype, na);
#undef DOT4_CALL
}

LB_AVX512 static void axpy_avx512(float *y, int64_t ys, const float *a, int64_t as, int64_t na,
                                  const uint8_t *const x[4], int64_t nb, int64_t n, int dtype, float sc, float *buf) {
	(void)buf;
#define AXPY_CALL(NA, DT) axpy_kv_avx512(y, ys, a, as, NA, x, nb, n, DT, sc)
	ATT_BY_DTYPE_NA(AXPY_CALL, dtype, na);
#undef AXPY_CALL
}

// kvdec_avx512: BF16 widened by a shift, 16 at a time; E4M3 by
// lb_e4m3x16_avx512 (value·2^-8, exact) times sc·256 (exact: a power of
// two), whose one rounding is that of value·sc.
LB_AVX512 static void kvdec_avx512(float *dst, const uint8_t *src, int64_t n, int dtype, float sc) {
	__m512 s = _mm512_set1_ps(sc * 256.0f);
	for (int64_t i = 0; i < n; i += 16) {
		__mmask16 k = n - i >= 16 ? 0xFFFF : lb_tail_mask16(n - i);
		_mm512_mask_storeu_ps(dst + i, k, kv16_avx512(src, i, k, dtype, s));
	}
}

LB_AVX512 static void exps_avx512(float *s, int64_t n, float m) {
	const __m512 mv = _mm512_set1_ps(m);
	for (int64_t i = 0; i < n; i += 16) {
		__mmask16 k = n - i >= 16 ? 0xFFFF : lb_tail_mask16(n - i);
		_mm512_mask_storeu_ps(s + i, k, lb_exp_avx512(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, s + i), mv)));
	}
}

ATT_TASKS(avx512, LB_AVX512)

// kvdec_avx2: BF16 widened by a shift, 8 at a time (the tail and E4M3 as
// _generic).
LB_AVX2 static void kvdec_avx2(float *dst, const uint8_t *src, int64_t n, int dtype, float sc) {
	if (dtype != LB_KV_BF16) {
		kvdec_generic(dst, src, n, dtype, sc);
		return;
	}
	const uint16_t *p = (const uint16_t *)src;
	int64_t i = 0;
	for (; i + 8 <= n; i += 8) {
		__m256i u = _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(p + i))), 16);
		_mm256_storeu_ps(dst + i, _mm256_castsi256_ps(u));
	}
	kvdec_generic(dst + i, (const uint8_t *)(p + i), n - i, dtype, sc);
}

LB_AVX2 static void dot4_avx2(const float *a, int64_t na, const uint8_t *const rows[4], int64_t n, int dtype, float sc,
                               float *buf, float out[4][4]) {
	const float *b[4];
	kv_floats4(b, rows, n, dtype, sc, buf, kvdec_avx2);
	for (int64_t g = 0; g < na; g++) {
		__m256 acc[4];
		for (int r = 0; r < 4; r++) acc[r] = _mm256_setzero_ps();
		for (int64_t i = 0; i < n; i += 8) {
			__m256i k = lb_tail_mask8(n - i < 8 ? n - i : 8);
			__m256 av = _mm256_maskload_ps(a + g * n + i, k);
			for (int r = 0; r < 4; r++) acc[r] = _mm256_fmadd_ps(av, _mm256_maskload_ps(b[r] + i, k), acc[r]);
		}
		for (int r = 0; r < 4; r++) out[g][r] = lb_hsum_avx2(acc[r]);
	}
}

LB_AVX2 static void axpy_avx2(float *y, int64_t ys, const float *a, int64_t as, int64_t na, const uint8_t *const rows[4],
                              int64_t nb, int64_t n, int dtype, float sc, float *buf) {
	const float *x[4];
	kv_floats4(x, rows, n, dtype, sc, buf, kvdec_avx2);
	for (int64_t g = 0; g < na; g++) {
		__m256 A[4];
		for (int r = 0; r < 4; r++) A[r] = _mm256_set1_ps(r < nb ? a[g * as + r] : 0);
		for (int64_t i = 0; i < n; i += 8) {
			__m256i k = lb_tail_mask8(n - i < 8 ? n - i : 8);
			__m256 acc = _mm256_maskload_ps(y + g * ys + i, k);
			for (int r = 0; r < nb; r++) acc = _mm256_fmadd_ps(A[r], _mm256_maskload_ps(x[r] + i, k), acc);
			_mm256_maskstore_ps(y + g * ys + i, k, acc);
		}
	}
}

LB_AVX2 static void exps_avx2(float *s, int64_t n, float m) {
	const __m256 mv = _mm256_set1_ps(m);
	int64_t i = 0;
	for (; i + 8 <= n; i += 8) _mm256_storeu_ps(s + i, lb_exp_avx2(_mm256_sub_ps(_mm256_loadu_ps(s + i), mv)));
	exps_generic(s + i, n - i, m);
}

ATT_TASKS(avx2, LB_AVX2)
#endif

void lb_kv_decode(int isa, int dtype, float *dst, const uint8_t *src, int64_t n, float sc) {
	pthread_once(&e4m3_lut_once, e4m3_lut_init);
	kvdec_fn dec = kvdec_generic;
#ifdef LB_X86
	if (isa == LB_ISA_AVX512 && lb_isa_supported(isa)) dec = kvdec_avx512;
	if (isa == LB_ISA_AVX2 && lb_isa_supported(isa)) dec = kvdec_avx2;
#endif
	dec(dst, src, n, dtype, sc);
}

int lb_attention(lb_ctx *c, float *out, const float *q, const uint8_t *k, const uint8_t *v, int dtype,
                 float kscale, float vscale, const int32_t *blocks, int64_t bs, int64_t T, int64_t start,
                 int64_t H, int64_t KVH, int64_t Dh, float scale) {
	if (T <= 0) return LB_OK;
	pthread_once(&e4m3_lut_once, e4m3_lut_init);
	const int64_t ctx = start + T, G = H / KVH, want = LB_ATT_TASKS * (int64_t)c->threads;
	// Whole mode when the tokens alone give every thread LB_ATT_TASKS tasks
	// (or one thread runs them all): a task then streams whole rows over
	// its whole context. Otherwise split mode, with nkv KV heads a task: all
	// of them (whole rows) where the chunks give every thread a task, else
	// the most that do.
	int split = c->threads > 1 && T < want;
	int64_t nci = 0; // split mode: chunks over all tokens
	for (int64_t t = 0; split && t < T; t++) nci += (start + t) / LB_ATT_CHUNK + 1;
	int64_t nkv = KVH;
	if (split)
		for (nkv = KVH; nkv > 1; nkv--)
			if (KVH % nkv == 0 && nci * (KVH / nkv) >= c->threads) break;
	int64_t nh = nkv * G, ps = (Dh + 2 + 15) & ~(int64_t)15;
	// Scratch, each part on its own cache lines: the pool row of every
	// position, computed once (a lookup through the block table costs a
	// 64-bit division, as much as a position's FMAs for a 128-dim head);
	// in split mode the chunks' tokens and offsets and their partials; then
	// each thread's scores, decoded rows and two records a head.
	size_t rows_b = ((size_t)ctx * 8 + 63) & ~(size_t)63;
	size_t off_b = split ? ((size_t)(T + 1) * 8 + 63) & ~(size_t)63 : 0;
	size_t tok_b = split ? ((size_t)nci * 4 + 63) & ~(size_t)63 : 0;
	size_t part_b = split ? (size_t)nci * (size_t)H * (size_t)ps * sizeof(float) : 0;
	int64_t stride = ((nh * LB_ATT_CHUNK + 4 * Dh + 15) & ~(int64_t)15) + 2 * nh * ps;
	uint8_t *sb = lb_scratch(c, rows_b + off_b + tok_b + part_b + (size_t)c->threads * (size_t)stride * sizeof(float));
	if (!sb) return LB_ERR_NOMEM;
	int64_t *rows = (int64_t *)sb, *off = (int64_t *)(sb + rows_b);
	int32_t *tok = (int32_t *)(sb + rows_b + off_b);
	float *part = (float *)(sb + rows_b + off_b + tok_b), *scratch = (float *)(sb + rows_b + off_b + tok_b + part_b);
	const int64_t row_bytes = KVH * Dh * (dtype == LB_KV_F32 ? 4 : dtype == LB_KV_BF16 ? 2 : 1);
	for (int64_t i = 0, b = 0, o = 0; i < ctx; i++) {
		rows[i] = (blocks ? (int64_t)blocks[b] * bs + o : i) * row_bytes;
		if (++o == bs) o = 0, b++;
	}
	if (split) {
		off[0] = 0;
		for (int64_t t = 0; t < T; t++) {
			off[t + 1] = off[t] + (start + t) / LB_ATT_CHUNK + 1;
			for (int64_t ci = off[t]; ci < off[t + 1]; ci++) tok[ci] = (int32_t)t;
		}
	}
	att_job j = {out,   q,     k,    v,     dtype, kscale, vscale, T,    start,   H,
	             KVH,   Dh,    scale, nkv,  ps,    rows,   off,    tok,  part, scratch, stride};
	lb_task fn = split ? att_split_generic : att_whole_generic;
#ifdef LB_X86
	if (c->isa == LB_ISA_AVX512) fn = split ? att_split_avx512 : att_whole_avx512;
	if (c->isa == LB_ISA_AVX2) fn = split ? att_split_avx2 : att_whole_avx2;
#endif
	// Work: two multiply-adds per head dimension and visible position.
	double work = 2.0 * (double)H * (double)Dh * (double)T * ((double)start + (double)(T + 1) / 2);
	int64_t ntasks = split ? nci * (KVH / nkv) : T * (KVH / nkv);
	if (lb_tasks(c, work, ntasks) == 1) {
		for (int64_t i = 0; i < ntasks; i++) fn(&j, i, 0);
	} else {
		lb_pool_run(c->pool, ntasks, fn, &j);
	}
	if (split) {
		// The fold: about three operations per chunk and head dimension.
		double fold = 3.0 * (double)nci * (double)H * (double)Dh;
		if (lb_tasks(c, fold, T * H) == 1) {
			for (int64_t i = 0; i < T * H; i++) att_merge(&j, i, 0);
		} else {
			lb_pool_run(c->pool, T * H, att_merge, &j);
		}
	}
	return LB_OK;
}
