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
// Files: attention.h holds the job, the chunk, the fold and the task
// wrappers the paths share; attention_avx512.c the AVX-512 path.
//
// Tested by TestAttention (prefill and decode, GQA, against float64 loops),
// TestBatchInvariance and kerneltest (Attention and PagedAttention, every
// dtype, shuffled block tables).
#include <math.h>
#include <pthread.h>

#include "attention.h"

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
	int64_t es = att_elem_bytes(j->dtype);
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
	const int64_t G = j->H / j->KVH, nkv = j->nkv, ps = j->ps, CH = LB_ATT_CHUNK;
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
ATT_TASKS(generic, , static)

#ifdef LB_X86
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
ATT_TASKS(avx2, LB_AVX2, static)
#endif

void lb_kv_decode(int isa, int dtype, float *dst, const uint8_t *src, int64_t n, float sc) {
	pthread_once(&e4m3_lut_once, e4m3_lut_init);
	kvdec_fn dec = kvdec_generic;
#ifdef LB_X86
	if (isa == LB_ISA_AVX512 && lb_isa_supported(isa)) dec = att_kvdec_avx512;
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
	const int64_t row_bytes = KVH * Dh * att_elem_bytes(dtype);
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
