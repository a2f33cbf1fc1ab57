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
// path, TestKVDecode). _avx512 works in tiles: the scores of 16 / GT
// positions for GT query heads (GT ≤ 8, the most that divide a KV head's
// G), their rows decoded 16 elements at a time into registers once for
// the GT heads, and the 16 dot products reduced together (hsum16_avx512);
// then the values of 8 positions added into each head's accumulator per
// load and store of it. The other paths decode a row into scratch first
// and take four positions at a time. The dot product sums lane i mod L in
// order of i and then the lanes pairwise, so it depends only on Dh; the
// dot products of a tile or of four positions run side by side (their FMA
// chains overlap, each in its own order). The
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
// batch, mode, grouping or thread count. The value pass adds several
// positions into a head's accumulator per load and store of it, the same
// FMAs in the same order as one position at a time. Measured on the 2-core
// Xeon VM (BenchmarkAttentionDecode: Qwen3-0.6B's decode at 272 positions,
// float32 cache from memory): 158 µs a call (14 GB/s) with a task per KV
// head before, 116 µs (19 GB/s) then, against about 105 µs for the same
// tasks only reading the rows; decoding in registers took the cached calls
// from 64-70 to 52-54 µs (float32), 67-68 to 53-58 (BF16) and 80-89 to
// 68-70 (E4M3), the same bits (BENCHMARKS.md). On the Zen 5 VM of
// 2026-12-03 the tiles took the cached calls (2 threads, C loop) from 54
// to 29 µs (float32), 48 to 27 (BF16) and 52 to 36 (E4M3), and the
// runtime's decode attention from 100-130 to 60-78 µs a layer, the same
// bits on 60 shapes and dtypes (GT 1 to 8, tails of Dh, paged and whole).
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
// The AVX-512 key pass prefetches each tile's value rows (into L1: the
// value pass reads them next) where a position's rows of the task's KV
// heads take at most this many bytes. On the Zen 5 VM of 2026-12-03
// (BenchmarkAttentionDecode's shape from memory, a C loop, two rounds) it
// took E4M3 from 82-85 µs a call to 63-65 and BF16 from 70-74 to 64-67;
// float32's 4 KiB rows went from 56-58 to 62-69, the prefetches queueing
// for the line fill buffers as the old whole-row prefetch did.
#define LB_ATT_VPREFETCH_BYTES 2048
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

// A path may supply dot4, the dot products of na ≤ 4 vectors (a, n floats
// apart) with cache rows b[0..3], each reduced exactly like one dot product
// alone (the chains only overlap), and axpy4, for each of na heads (y and a
// ys and as floats apart) y += a[r]·x[r] for r = 0..nb-1 in order, element
// by element: one load and store of y for up to four positions' FMAs, the
// same operations as nb axpys one after the other. Both take the rows as
// the pool stores them (dtype, scale sc) and use their float32 values
// (kvdec's), each row decoded once for the na heads into buf (4 rows of n
// floats) first. The _generic and _avx2 paths have them; _avx512 has
// tiles instead (ktile_avx512, vtile_avx512).
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

// A path's kpass writes the scaled scores s[g·LB_ATT_CHUNK + i − j0] =
// (q_g · k_i)·scale of positions i = j0 .. e−1 for the nh query heads q
// (Dh floats apart) of KV heads kh0..kh0+nkv-1, and each head's maximum
// score into record g of r (r[g·ps + Dh]); its vpass adds, for each head
// g, Σ_i s_g,i · v_i (positions in order, one FMA or multiply-add each)
// into record g's o, which the caller has zeroed. buf is the path's
// scratch: 4 decoded rows.
typedef void (*kpass_fn)(const att_job *j, const float *q, int64_t j0, int64_t e, int64_t kh0, float *s, float *buf,
                         float *r);
typedef void (*vpass_fn)(const att_job *j, int64_t j0, int64_t e, int64_t kh0, const float *s, float *buf, float *r);

// kpass_dot4 is a kpass by a path's dot4, four positions at a time, each
// position's rows read for all the heads that use them.
LB_INLINE void kpass_dot4(const att_job *j, const float *q, int64_t j0, int64_t e, int64_t kh0, float *s, float *buf,
                          float *r, dot4_fn dot4) {
	const int64_t G = j->H / j->KVH, nkv = j->nkv, nh = nkv * G, Dh = j->Dh, ps = j->ps, CH = LB_ATT_CHUNK;
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
}

// vpass_axpy is a vpass by a path's axpy4, four positions at a time.
LB_INLINE void vpass_axpy(const att_job *j, int64_t j0, int64_t e, int64_t kh0, const float *s, float *buf, float *r,
                          axpy_fn axpy) {
	const int64_t G = j->H / j->KVH, nkv = j->nkv, Dh = j->Dh, ps = j->ps, CH = LB_ATT_CHUNK;
	(void)Dh;
	for (int64_t i = j0; i < j0 + LB_ATT_PREFETCH; i++) kv_prefetch(j, j->v, i, e, kh0, nkv);
	for (int64_t i = j0; i < e; i += 4) {
		int64_t nb = e - i < 4 ? e - i : 4;
		for (int64_t x = 0; x < 4; x++) kv_prefetch(j, j->v, i + x + LB_ATT_PREFETCH, e, kh0, nkv);
		for (int64_t kk = 0; kk < nkv; kk++) {
			const uint8_t *rows[4];
			kv_rows4(j, j->v, i, nb, kh0 + kk, rows);
			for (int64_t g0 = kk * G; g0 < (kk + 1) * G; g0 += 4) {
				int64_t na = (kk + 1) * G - g0 < 4 ? (kk + 1) * G - g0 : 4;
				axpy(r + g0 * ps, ps, s + g0 * CH + i - j0, CH, na, rows, nb, j->Dh, j->dtype, j->vscale, buf);
			}
		}
	}
}

// att_chunk computes chunk c of token t for the query heads of KV heads
// kh0..kh0+nkv-1 (nh = nkv·G of them, from kh0·G): record g of r (ps
// floats apart) gets o_c, m_c and l_c of head kh0·G + g. Each key and value
// row is read (and decoded) once for all the heads that use it, positions
// in order; every head's scores, max, sum and accumulation run in the same
// order as for a head alone, so nkv changes no result.
LB_INLINE void att_chunk(const att_job *j, int64_t t, int64_t c, int64_t kh0, float *r, float *ws, kpass_fn kpass,
                         vpass_fn vpass, exps_fn exps) {
	const int64_t G = j->H / j->KVH, nh = j->nkv * G, Dh = j->Dh, ps = j->ps, CH = LB_ATT_CHUNK;
	const int64_t j0 = c * CH, e = j->start + t + 1 - j0 < CH ? j->start + t + 1 : j0 + CH;
	float *s = ws, *buf = s + nh * CH;
	kpass(j, j->q + (t * j->H + kh0 * G) * Dh, j0, e, kh0, s, buf, r);
	for (int64_t g = 0; g < nh; g++) {
		float *sg = s + g * CH, acc = 0;
		exps(sg, e - j0, r[g * ps + Dh]);
		for (int64_t i = 0; i < e - j0; i++) acc += sg[i];
		r[g * ps + Dh + 1] = acc;
		memset(r + g * ps, 0, (size_t)Dh * sizeof *r);
	}
	vpass(j, j0, e, kh0, s, buf, r);
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
LB_INLINE void att_whole(const att_job *j, int64_t task, int tid, kpass_fn kpass, vpass_fn vpass, exps_fn exps) {
	const int64_t G = j->H / j->KVH, nh = j->nkv * G, ng = j->KVH / j->nkv, Dh = j->Dh, ps = j->ps;
	int64_t t = task / ng, kh0 = (task % ng) * j->nkv, nch = (j->start + t) / LB_ATT_CHUNK + 1;
	float *ws = j->scratch + (int64_t)tid * j->scratch_stride;
	float *f = ws + ((nh * LB_ATT_CHUNK + 4 * Dh + 15) & ~(int64_t)15), *p = f + nh * ps;
	att_chunk(j, t, 0, kh0, f, ws, kpass, vpass, exps);
	for (int64_t c = 1; c < nch; c++) {
		att_chunk(j, t, c, kh0, p, ws, kpass, vpass, exps);
		for (int64_t g = 0; g < nh; g++) att_fold(f + g * ps, p + g * ps, Dh);
	}
	float *o = j->out + (t * j->H + kh0 * G) * Dh;
	for (int64_t g = 0; g < nh; g++) att_finish(o + g * Dh, f + g * ps, Dh);
}

// att_split is a split-mode task: chunk task / (KVH/nkv) of all tokens'
// chunks, for its (task % (KVH/nkv))-th nkv KV heads, into the partials.
LB_INLINE void att_split(const att_job *j, int64_t task, int tid, kpass_fn kpass, vpass_fn vpass, exps_fn exps) {
	const int64_t G = j->H / j->KVH, ng = j->KVH / j->nkv;
	int64_t ci = task / ng, kh0 = (task % ng) * j->nkv, t = j->tok[ci];
	float *r = j->part + (ci * j->H + kh0 * G) * j->ps;
	att_chunk(j, t, ci - j->off[t], kh0, r, j->scratch + (int64_t)tid * j->scratch_stride, kpass, vpass, exps);
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

// ATT_TASKS defines a path's whole- and split-mode tasks from its kpass_##path,
// vpass_##path and exps_##path.
#define ATT_TASKS(path, attr)                                                       \
	attr static void att_whole_##path(void *arg, int64_t task, int tid) {       \
		att_whole(arg, task, tid, kpass_##path, vpass_##path, exps_##path); \
	}                                                                           \
	attr static void att_split_##path(void *arg, int64_t task, int tid) {       \
		att_split(arg, task, tid, kpass_##path, vpass_##path, exps_##path); \
	}
// ATT_PASSES defines a path's kpass and vpass from its dot4 and axpy.
#define ATT_PASSES(path, attr)                                                                                 \
	attr static void kpass_##path(const att_job *j, const float *q, int64_t j0, int64_t e, int64_t kh0,      \
	                              float *s, float *buf, float *r) {                                          \
		kpass_dot4(j, q, j0, e, kh0, s, buf, r, dot4_##path);                                            \
	}                                                                                                        \
	attr static void vpass_##path(const att_job *j, int64_t j0, int64_t e, int64_t kh0, const float *s,      \
	                              float *buf, float *r) {                                                    \
		vpass_axpy(j, j0, e, kh0, s, buf, r, axpy_##path);                                               \
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

ATT_PASSES(generic, )
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

// hsum16_avx512 returns the vector whose lane k is lb_hsum_avx512(v[k]):
// the same pairwise sums (lane i + lane i+8, then i + i+4, i + i+2,
// i + i+1) done for sixteen vectors together, 46 vector operations
// against 16 reductions of 4 and their stores and loads.
LB_INLINE LB_AVX512 __m512 hsum16_avx512(const __m512 v[16]) {
	// 16 -> 8: w[k]'s 128-bit lanes 0-1 hold v[2k]'s lanes 0-7 + 8-15,
	// lanes 2-3 v[2k+1]'s.
	__m512 w[8], x[4], y[2];
	for (int k = 0; k < 8; k++)
		w[k] = _mm512_add_ps(_mm512_shuffle_f32x4(v[2 * k], v[2 * k + 1], 0x44),
		                     _mm512_shuffle_f32x4(v[2 * k], v[2 * k + 1], 0xEE));
	// 8 -> 4: 128-bit lane r of x[k] holds v[4k + r]'s four sums.
	for (int k = 0; k < 4; k++)
		x[k] = _mm512_add_ps(_mm512_shuffle_f32x4(w[2 * k], w[2 * k + 1], 0x88),
		                     _mm512_shuffle_f32x4(w[2 * k], w[2 * k + 1], 0xDD));
	// 4 -> 2 within each 128-bit lane r: y[k] = [A0+A2, B0+B2, A1+A3,
	// B1+B3] of A = v[8k + r], B = v[8k + 4 + r].
	for (int k = 0; k < 2; k++)
		y[k] = _mm512_add_ps(_mm512_unpacklo_ps(x[2 * k], x[2 * k + 1]), _mm512_unpackhi_ps(x[2 * k], x[2 * k + 1]));
	// 2 -> 1: lane 4r + c holds v[4c + r]'s sum; a permutation puts it in
	// lane 4c + r.
	__m512 z = _mm512_add_ps(_mm512_shuffle_ps(y[0], y[1], 0x44), _mm512_shuffle_ps(y[0], y[1], 0xEE));
	return _mm512_permutexvar_ps(_mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15), z);
}

// ktile_avx512 writes the scores of P positions (rows, one KV head's) for
// G query heads (q, Dh floats apart), G·P ≤ 16: lane g·P + p of the result
// is (q_g · row_p)·scale. Each 16 elements of a row are decoded once for
// the G heads; each dot product sums lane i mod 16 in order of i by FMA,
// then the lanes pairwise (hsum16_avx512), so it depends only on Dh.
LB_INLINE LB_AVX512 __m512 ktile_avx512(const float *q, const int G, const int P, const uint8_t *const rows[16],
                                        int64_t Dh, const int dtype, __m512 sc, __m512 scale) {
	__m512 acc[16];
	for (int k = 0; k < 16; k++) acc[k] = _mm512_setzero_ps();
	for (int64_t i = 0; i < Dh; i += 16) {
		__mmask16 m = Dh - i >= 16 ? 0xFFFF : lb_tail_mask16(Dh - i);
		__m512 qv[8];
		for (int g = 0; g < G; g++) qv[g] = _mm512_maskz_loadu_ps(m, q + g * Dh + i);
		for (int p = 0; p < P; p++) {
			__m512 x = kv16_avx512(rows[p], i, m, dtype, sc);
			for (int g = 0; g < G; g++) acc[g * P + p] = _mm512_fmadd_ps(qv[g], x, acc[g * P + p]);
		}
	}
	return _mm512_mul_ps(hsum16_avx512(acc), scale);
}

// kpass_tiles_avx512 is the AVX-512 kpass in tiles of GT query heads
// (GT ≤ 8 divides the G heads a KV head) and 16 / GT positions: each
// tile's scores by one ktile_avx512, positions in order (each position's
// rows, all nkv KV heads, one contiguous read), and each head's maximum
// afterwards.
LB_INLINE LB_AVX512 void kpass_tiles_avx512(const att_job *j, const float *q, int64_t j0, int64_t e, int64_t kh0,
                                            float *s, float *r, const int GT, const int dtype) {
	const int P = 16 / GT;
	const int64_t G = j->H / j->KVH, nkv = j->nkv, nh = nkv * G, Dh = j->Dh, ps = j->ps, CH = LB_ATT_CHUNK;
	const int64_t es = dtype == LB_KV_F32 ? 4 : dtype == LB_KV_BF16 ? 2 : 1;
	const __m512 sc = _mm512_set1_ps(j->kscale * 256.0f), scale = _mm512_set1_ps(j->scale);
	const int64_t vrow = nkv * Dh * es;
	for (int64_t i = j0; i < j0 + LB_ATT_PREFETCH; i++) kv_prefetch(j, j->k, i, e, kh0, nkv);
	for (int64_t i = j0; i < e; i += P) {
		const int64_t nb = e - i < P ? e - i : P;
		for (int64_t x = 0; x < P; x++) kv_prefetch(j, j->k, i + x + LB_ATT_PREFETCH, e, kh0, nkv);
		if (vrow <= LB_ATT_VPREFETCH_BYTES)
			for (int64_t x = 0; x < nb; x++)
				for (int64_t b = 0; b < vrow; b += 64) lb_prefetch(j->v + j->rows[i + x] + kh0 * Dh * es + b);
		const uint8_t *base[16];
		for (int p = 0; p < P; p++) base[p] = j->k + j->rows[i + (p < nb ? p : 0)] + kh0 * Dh * es;
		for (int64_t kk = 0; kk < nkv; kk++) {
			const uint8_t *rows[16];
			for (int p = 0; p < P; p++) rows[p] = base[p] + kk * Dh * es;
			for (int64_t g0 = kk * G; g0 < (kk + 1) * G; g0 += GT) {
				__m512 v = ktile_avx512(q + g0 * Dh, GT, P, rows, Dh, dtype, sc, scale);
				for (int g = 0; g < GT; g++) {
					// Lanes g·P .. g·P + nb − 1 to lanes 0 .. nb − 1.
					__m512i vi = _mm512_castps_si512(v);
					_mm512_mask_storeu_ps(s + (g0 + g) * CH + i - j0, lb_tail_mask16(nb),
					                      _mm512_castsi512_ps(_mm512_alignr_epi32(vi, vi, g * P)));
				}
			}
		}
	}
	const int64_t n = e - j0;
	for (int64_t g = 0; g < nh; g++) {
		__m512 mv = _mm512_set1_ps(-INFINITY);
		for (int64_t i = 0; i < n; i += 16)
			mv = _mm512_mask_max_ps(mv, n - i >= 16 ? 0xFFFF : lb_tail_mask16(n - i), _mm512_loadu_ps(s + g * CH + i), mv);
		r[g * ps + Dh] = _mm512_reduce_max_ps(mv);
	}
}

// vtile_avx512 adds, for G heads, y_g += Σ_{p < nb} a_g,p · row_p (y_g ys
// floats apart, a_g,p at a[g·as + p]), positions in order, one FMA each:
// each 16 elements of the nb ≤ 8 rows decoded once into registers and
// added into one load and store of each head's accumulator.
LB_INLINE LB_AVX512 void vtile_avx512(float *y, int64_t ys, const float *a, int64_t as, const int G,
                                      const uint8_t *const rows[8], const int nb, int64_t Dh, const int dtype,
                                      __m512 sc) {
	for (int64_t i = 0; i < Dh; i += 16) {
		__mmask16 m = Dh - i >= 16 ? 0xFFFF : lb_tail_mask16(Dh - i);
		__m512 x[8];
		for (int p = 0; p < nb; p++) x[p] = kv16_avx512(rows[p], i, m, dtype, sc);
		for (int g = 0; g < G; g++) {
			__m512 acc = _mm512_maskz_loadu_ps(m, y + g * ys + i);
			for (int p = 0; p < nb; p++) acc = _mm512_fmadd_ps(_mm512_set1_ps(a[g * as + p]), x[p], acc);
			_mm512_mask_storeu_ps(y + g * ys + i, m, acc);
		}
	}
}

// vpass_tiles_avx512 is the AVX-512 vpass in tiles of 8 positions (in
// order; each tile's rows, all nkv KV heads, one contiguous read) and GT
// query heads (GT ≤ 8 divides G).
LB_INLINE LB_AVX512 void vpass_tiles_avx512(const att_job *j, int64_t j0, int64_t e, int64_t kh0, const float *s,
                                            float *r, const int GT, const int dtype) {
	const int64_t G = j->H / j->KVH, nkv = j->nkv, Dh = j->Dh, ps = j->ps, CH = LB_ATT_CHUNK;
	const int64_t es = dtype == LB_KV_F32 ? 4 : dtype == LB_KV_BF16 ? 2 : 1;
	const __m512 sc = _mm512_set1_ps(j->vscale * 256.0f);
	for (int64_t i = j0; i < j0 + LB_ATT_PREFETCH; i++) kv_prefetch(j, j->v, i, e, kh0, nkv);
	for (int64_t i = j0; i < e; i += 8) {
		const int64_t nb = e - i < 8 ? e - i : 8;
		for (int64_t x = 0; x < 8; x++) kv_prefetch(j, j->v, i + x + LB_ATT_PREFETCH, e, kh0, nkv);
		const uint8_t *base[8];
		for (int p = 0; p < 8; p++) base[p] = j->v + j->rows[i + (p < nb ? p : 0)] + kh0 * Dh * es;
		for (int64_t kk = 0; kk < nkv; kk++) {
			const uint8_t *rows[8];
			for (int p = 0; p < 8; p++) rows[p] = base[p] + kk * Dh * es;
			for (int64_t g0 = kk * G; g0 < (kk + 1) * G; g0 += GT) {
				float *y = r + g0 * ps;
				const float *a = s + g0 * CH + i - j0;
				if (nb == 8)
					vtile_avx512(y, ps, a, CH, GT, rows, 8, Dh, dtype, sc);
				else
					vtile_avx512(y, ps, a, CH, GT, rows, (int)nb, Dh, dtype, sc);
			}
		}
	}
}

// ATT_BY_DTYPE_G runs call(G, DT) with the constants equal to g (1 to 8)
// and dtype (F32, BF16, else FP8), so that each combination compiles to
// loops of its own.
#define ATT_G_CASES(call, DT, base)        \
	case base:                           \
		call(1, DT);                 \
		break;                       \
	case base + 1:                       \
		call(2, DT);                 \
		break;                       \
	case base + 2:                       \
		call(3, DT);                 \
		break;                       \
	case base + 3:                       \
		call(4, DT);                 \
		break;                       \
	case base + 4:                       \
		call(5, DT);                 \
		break;                       \
	case base + 5:                       \
		call(6, DT);                 \
		break;                       \
	case base + 6:                       \
		call(7, DT);                 \
		break;                       \
	case base + 7:                       \
		call(8, DT);                 \
		break;
#define ATT_BY_DTYPE_G(call, dtype, g)                                                              \
	switch (8 * ((dtype) == LB_KV_F32 ? 0 : (dtype) == LB_KV_BF16 ? 1 : 2) + (int)(g) - 1) {   \
		ATT_G_CASES(call, LB_KV_F32, 0)                                                     \
		ATT_G_CASES(call, LB_KV_BF16, 8)                                                    \
		ATT_G_CASES(call, LB_KV_FP8, 16)                                                    \
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

// att_tile_heads is the most query heads, at most 8, that divide the G
// heads of a KV head: the heads of a tile.
static int att_tile_heads(int64_t G) {
	for (int g = 8; g > 1; g--)
		if (G % g == 0) return g;
	return 1;
}

LB_AVX512 static void kpass_avx512(const att_job *j, const float *q, int64_t j0, int64_t e, int64_t kh0, float *s,
                                   float *buf, float *r) {
	(void)buf;
#define KPASS_CALL(GT, DT) kpass_tiles_avx512(j, q, j0, e, kh0, s, r, GT, DT)
	ATT_BY_DTYPE_G(KPASS_CALL, j->dtype, att_tile_heads(j->H / j->KVH));
#undef KPASS_CALL
}

LB_AVX512 static void vpass_avx512(const att_job *j, int64_t j0, int64_t e, int64_t kh0, const float *s, float *buf,
                                   float *r) {
	(void)buf;
#define VPASS_CALL(GT, DT) vpass_tiles_avx512(j, j0, e, kh0, s, r, GT, DT)
	ATT_BY_DTYPE_G(VPASS_CALL, j->dtype, att_tile_heads(j->H / j->KVH));
#undef VPASS_CALL
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

ATT_PASSES(avx2, LB_AVX2)
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
