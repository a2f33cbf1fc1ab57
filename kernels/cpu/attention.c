//go:build cgo

// attention.c: causal grouped-query attention of T new tokens over a
// sequence's KV cache, contiguous or paged, two-pass softmax in float32.
//
// Computes, for each new token t (position p = start + t) and query head h,
// reading KV head kh = h / (H / KVH):
//   s[j]  = (q[t,h,:] · k[j,kh,:]) · scale        for j = 0..p
//   m     = max_j s[j];  e[j] = expf(s[j] − m);  sum = Σ_j e[j]   (float32, j in order)
//   out[t,h,:] = (Σ_j e[j] · v[j,kh,:]) / sum      (float32, j in order)
//
// Layout: q, out [T, H, Dh]. The cache is two pools of rows [KVH, Dh] of
// float32, BF16 or E4M3 (lb_kv_dtype); position j is pool row
// blocks[j / bs]·bs + j % bs (a contiguous cache: one block, bs = start+T),
// the new tokens already written at positions start..start+T-1. BF16 and
// E4M3 rows are decoded to float32 (E4M3 times the pool's scale, one
// float32 product, as kernels.KVCache.Load) into a per-thread row before the
// dot product or the accumulation, so a cache's dtype changes its values,
// never the order of the sums.
//
// Variants: the q·k dot product and the e·v accumulation per code path:
// _avx512 (16 lanes, FMA, masked tail), _avx2 (8 lanes, FMA), _generic
// (8 scalar lanes, multiply then add). The dot product sums lane i mod L in
// order of i and then the lanes pairwise, so it depends only on Dh; four
// positions' dot products run side by side (their FMA chains overlap, each
// in its own order). _avx512 keeps a head's e·v accumulator in registers
// for Dh = 64, 128 and 256 (the same FMAs as the in-memory loop).
//
// Tasks: a task takes consecutive query heads of one token, the heads of
// as many KV heads as still leave LB_ATT_TASKS tasks per thread (or part of
// one KV head's), so each key row is read once for all its heads and the
// task streams a contiguous span of every cache row; rows LB_ATT_PREFETCH
// positions ahead are prefetched (kv_prefetch). Scores and decoded rows
// live in per-thread scratch. A (t, h) result depends only on q[t,h] and
// the cache up to p, so it is the same whatever T, start split, block
// table, batch, grouping or thread count produced it. Measured on the
// 2-core Xeon VM, 28 layers of a Qwen3-0.6B float32 cache at 288
// positions, one decode step: 14-17 GB/s of cache before (a task per head,
// no prefetch), 23 GB/s after.
//
// Tested by TestAttention (prefill and decode, GQA, against float64 loops),
// TestBatchInvariance and kerneltest (Attention and PagedAttention, every
// dtype, shuffled block tables).
#include <math.h>
#include <pthread.h>

#include "internal.h"

// Positions ahead whose key or value rows a task prefetches.
#define LB_ATT_PREFETCH 8
// Tasks per thread an attention is split into, at least, where it can be.
#define LB_ATT_TASKS 4

typedef struct att_job {
	float *out;
	const float *q;
	const uint8_t *k, *v;
	int dtype;
	float kscale, vscale;
	const int32_t *blocks; // NULL: contiguous
	int64_t bs;
	int64_t T, start, H, KVH, Dh, ctx;
	float scale;
	int64_t group;  // query heads per task: a divisor or a multiple of H / KVH, dividing H
	const int64_t *rows; // [ctx]: the pool row of each position
	float *scratch; // per thread: scores [group][ctx], 4 decoded rows [Dh], max and sum [group]
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

// kv_row returns position i, KV head kh of a pool as float32: a pointer
// into a float32 pool, or row decoded into buf.
static inline const float *kv_row(const att_job *j, const uint8_t *pool, float sc, int64_t i, int64_t kh,
                                  float *buf) {
	int64_t off = (j->rows[i] * j->KVH + kh) * j->Dh;
	switch (j->dtype) {
	case LB_KV_BF16: {
		const uint16_t *p = (const uint16_t *)pool + off;
		for (int64_t d = 0; d < j->Dh; d++) {
			uint32_t u = (uint32_t)p[d] << 16;
			memcpy(buf + d, &u, 4);
		}
		return buf;
	}
	case LB_KV_FP8: {
		const uint8_t *p = pool + off;
		for (int64_t d = 0; d < j->Dh; d++) buf[d] = e4m3_lut[p[d]] * sc;
		return buf;
	}
	default:
		return (const float *)pool + off;
	}
}

// A path supplies dot4, four dot products of a with rows b[0..3], each
// reduced exactly like one dot product alone (the four chains only
// overlap), and vsum, which accumulates o = Σ_i e[i]·v_i in order of i for
// one head from rows the caller decodes, starting from zero.
typedef void (*dot4_fn)(const float *a, const float *const b[4], int64_t n, float out[4]);
typedef void (*axpy_fn)(float *y, float a, const float *x, int64_t n);
typedef void (*vsum_fn)(const struct att_job *j, const uint8_t *pool, float sc, int64_t n, int64_t kh,
                        const float *e, float *o, float *buf, int prefetch);

// kv_prefetch asks for position i's rows of KV heads kh..kh+nkv-1 (one
// contiguous span), when i < n. One head's rows are KVH·Dh elements apart,
// a 4 KiB page at Qwen3's shapes: a stride the hardware prefetchers do not
// follow.
LB_INLINE void kv_prefetch(const att_job *j, const uint8_t *pool, int64_t i, int64_t n, int64_t kh, int64_t nkv) {
	if (i >= n) return;
	int64_t es = j->dtype == LB_KV_F32 ? 4 : j->dtype == LB_KV_BF16 ? 2 : 1;
	const uint8_t *p = pool + (j->rows[i] * j->KVH + kh) * j->Dh * es;
	int64_t bytes = nkv * j->Dh * es;
	for (int64_t b = 0; b < bytes; b += 64) lb_prefetch(p + b);
	lb_prefetch(p + bytes - 1);
}

// vsum_plain is vsum through an axpy per position, in memory.
LB_INLINE void vsum_plain(const att_job *j, const uint8_t *pool, float sc, int64_t n, int64_t kh, const float *e,
                          float *o, float *buf, int prefetch, axpy_fn axpy) {
	memset(o, 0, (size_t)j->Dh * sizeof *o);
	for (int64_t i = 0; i < n; i++) {
		if (prefetch) kv_prefetch(j, pool, i + LB_ATT_PREFETCH, n, kh, 1);
		axpy(o, e[i], kv_row(j, pool, sc, i, kh, buf), j->Dh);
	}
}

// att_heads computes query heads h0..h0+nh-1 of one token, which read KV
// heads h0/G..(h0+nh-1)/G (G = H/KVH query heads per KV head): each key row
// is read (and decoded) once for all the task's heads that use it, and
// value rows come from cache for all but the first head that reads them.
// Every head's scores, max, sum and accumulation run in the same order as
// for a head alone, so grouping changes no result.
LB_INLINE void att_heads(const att_job *j, int64_t task, int tid, dot4_fn dot4, vsum_fn vsum) {
	const int64_t nh = j->group, G = j->H / j->KVH, ctx = j->ctx, Dh = j->Dh;
	int64_t t = task / (j->H / nh), h0 = (task % (j->H / nh)) * nh, p = j->start + t, n = p + 1;
	int64_t kh0 = h0 / G, nkv = (h0 + nh - 1) / G - kh0 + 1;
	float *s = j->scratch + (int64_t)tid * j->scratch_stride, *buf = s + nh * ctx, *m = buf + 4 * Dh, *sum = m + nh;
	const float *q = j->q + (t * j->H + h0) * Dh;
	for (int64_t g = 0; g < nh; g++) m[g] = -INFINITY;
	for (int64_t i = 0; i < LB_ATT_PREFETCH; i++) kv_prefetch(j, j->k, i, n, kh0, nkv);
	for (int64_t i = 0; i < n; i += 4) {
		int64_t nb = n - i < 4 ? n - i : 4;
		for (int64_t r = 0; r < 4; r++) kv_prefetch(j, j->k, i + r + LB_ATT_PREFETCH, n, kh0, nkv);
		for (int64_t g = 0; g < nh;) {
			int64_t kh = (h0 + g) / G, ge = (kh + 1) * G - h0 < nh ? (kh + 1) * G - h0 : nh;
			const float *rows[4];
			for (int64_t r = 0; r < 4; r++) rows[r] = r < nb ? kv_row(j, j->k, j->kscale, i + r, kh, buf + r * Dh) : rows[0];
			for (; g < ge; g++) {
				float d[4];
				dot4(q + g * Dh, rows, Dh, d);
				for (int64_t r = 0; r < nb; r++) {
					float v = d[r] * j->scale;
					s[g * ctx + i + r] = v;
					m[g] = v > m[g] ? v : m[g];
				}
			}
		}
	}
	for (int64_t g = 0; g < nh; g++) {
		float *sg = s + g * ctx, mg = m[g], acc = 0;
		for (int64_t i = 0; i < n; i++) {
			sg[i] = expf(sg[i] - mg);
			acc += sg[i];
		}
		sum[g] = acc;
	}
	float *o = j->out + (t * j->H + h0) * Dh;
	for (int64_t g = 0; g < nh; g++) {
		int64_t kh = (h0 + g) / G;
		int first = g == 0 || (h0 + g) % G == 0;
		if (first)
			for (int64_t i = 0; i < LB_ATT_PREFETCH; i++) kv_prefetch(j, j->v, i, n, kh, 1);
		vsum(j, j->v, j->vscale, n, kh, s + g * ctx, o + g * Dh, buf, first);
	}
	for (int64_t g = 0; g < nh; g++)
		for (int64_t d = 0; d < Dh; d++) o[g * Dh + d] /= sum[g];
}

LB_INLINE float dot_generic(const float *a, const float *b, int64_t n) {
	float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
	int64_t i = 0;
	for (; i + 8 <= n; i += 8)
		for (int l = 0; l < 8; l++) acc[l] += a[i + l] * b[i + l];
	for (int l = 0; i + l < n; l++) acc[l] += a[i + l] * b[i + l];
	return lb_hsum8(acc);
}

static void dot4_generic(const float *a, const float *const b[4], int64_t n, float out[4]) {
	for (int r = 0; r < 4; r++) out[r] = dot_generic(a, b[r], n);
}

LB_INLINE void axpy_generic(float *y, float a, const float *x, int64_t n) {
	for (int64_t i = 0; i < n; i++) y[i] += a * x[i];
}

static void vsum_generic(const att_job *j, const uint8_t *pool, float sc, int64_t n, int64_t kh, const float *e,
                         float *o, float *buf, int prefetch) {
	vsum_plain(j, pool, sc, n, kh, e, o, buf, prefetch, axpy_generic);
}

static void att_task_generic(void *arg, int64_t task, int tid) {
	att_heads(arg, task, tid, dot4_generic, vsum_generic);
}

#ifdef LB_X86
LB_AVX512 static void dot4_avx512(const float *a, const float *const b[4], int64_t n, float out[4]) {
	__m512 acc[4];
	for (int r = 0; r < 4; r++) acc[r] = _mm512_setzero_ps();
	for (int64_t i = 0; i < n; i += 16) {
		__mmask16 k = n - i >= 16 ? 0xFFFF : lb_tail_mask16(n - i);
		__m512 av = _mm512_maskz_loadu_ps(k, a + i);
		for (int r = 0; r < 4; r++) acc[r] = _mm512_fmadd_ps(av, _mm512_maskz_loadu_ps(k, b[r] + i), acc[r]);
	}
	for (int r = 0; r < 4; r++) out[r] = lb_hsum_avx512(acc[r]);
}

LB_INLINE LB_AVX512 void axpy_avx512(float *y, float a, const float *x, int64_t n) {
	__m512 A = _mm512_set1_ps(a);
	for (int64_t i = 0; i < n; i += 16) {
		__mmask16 k = n - i >= 16 ? 0xFFFF : lb_tail_mask16(n - i);
		__m512 r = _mm512_fmadd_ps(A, _mm512_maskz_loadu_ps(k, x + i), _mm512_maskz_loadu_ps(k, y + i));
		_mm512_mask_storeu_ps(y + i, k, r);
	}
}

// vsum_regs_avx512 is vsum with o in NV registers (Dh = 16·NV): the same
// FMAs as axpy_avx512, without a store and reload per position.
LB_INLINE LB_AVX512 void vsum_regs_avx512(const att_job *j, const uint8_t *pool, float sc, int64_t n, int64_t kh,
                                         const float *e, float *o, float *buf, int prefetch, const int NV) {
	__m512 acc[16];
	for (int v = 0; v < NV; v++) acc[v] = _mm512_setzero_ps();
	for (int64_t i = 0; i < n; i++) {
		if (prefetch) kv_prefetch(j, pool, i + LB_ATT_PREFETCH, n, kh, 1);
		const float *x = kv_row(j, pool, sc, i, kh, buf);
		__m512 A = _mm512_set1_ps(e[i]);
		for (int v = 0; v < NV; v++) acc[v] = _mm512_fmadd_ps(A, _mm512_loadu_ps(x + 16 * v), acc[v]);
	}
	for (int v = 0; v < NV; v++) _mm512_storeu_ps(o + 16 * v, acc[v]);
}

LB_AVX512 static void vsum_avx512(const att_job *j, const uint8_t *pool, float sc, int64_t n, int64_t kh,
                                  const float *e, float *o, float *buf, int prefetch) {
	switch (j->Dh) {
	case 64:
		vsum_regs_avx512(j, pool, sc, n, kh, e, o, buf, prefetch, 4);
		break;
	case 128:
		vsum_regs_avx512(j, pool, sc, n, kh, e, o, buf, prefetch, 8);
		break;
	case 256:
		vsum_regs_avx512(j, pool, sc, n, kh, e, o, buf, prefetch, 16);
		break;
	default:
		vsum_plain(j, pool, sc, n, kh, e, o, buf, prefetch, axpy_avx512);
	}
}

LB_AVX512 static void att_task_avx512(void *arg, int64_t task, int tid) {
	att_heads(arg, task, tid, dot4_avx512, vsum_avx512);
}

LB_AVX2 static void dot4_avx2(const float *a, const float *const b[4], int64_t n, float out[4]) {
	__m256 acc[4];
	for (int r = 0; r < 4; r++) acc[r] = _mm256_setzero_ps();
	for (int64_t i = 0; i < n; i += 8) {
		__m256i k = lb_tail_mask8(n - i < 8 ? n - i : 8);
		__m256 av = _mm256_maskload_ps(a + i, k);
		for (int r = 0; r < 4; r++) acc[r] = _mm256_fmadd_ps(av, _mm256_maskload_ps(b[r] + i, k), acc[r]);
	}
	for (int r = 0; r < 4; r++) out[r] = lb_hsum_avx2(acc[r]);
}

LB_INLINE LB_AVX2 void axpy_avx2(float *y, float a, const float *x, int64_t n) {
	__m256 A = _mm256_set1_ps(a);
	for (int64_t i = 0; i < n; i += 8) {
		__m256i k = lb_tail_mask8(n - i < 8 ? n - i : 8);
		__m256 r = _mm256_fmadd_ps(A, _mm256_maskload_ps(x + i, k), _mm256_maskload_ps(y + i, k));
		_mm256_maskstore_ps(y + i, k, r);
	}
}

LB_AVX2 static void vsum_avx2(const att_job *j, const uint8_t *pool, float sc, int64_t n, int64_t kh,
                              const float *e, float *o, float *buf, int prefetch) {
	vsum_plain(j, pool, sc, n, kh, e, o, buf, prefetch, axpy_avx2);
}

LB_AVX2 static void att_task_avx2(void *arg, int64_t task, int tid) {
	att_heads(arg, task, tid, dot4_avx2, vsum_avx2);
}
#endif

int lb_attention(lb_ctx *c, float *out, const float *q, const uint8_t *k, const uint8_t *v, int dtype,
                 float kscale, float vscale, const int32_t *blocks, int64_t bs, int64_t T, int64_t start,
                 int64_t H, int64_t KVH, int64_t Dh, float scale) {
	if (T <= 0) return LB_OK;
	pthread_once(&e4m3_lut_once, e4m3_lut_init);
	int64_t ctx = start + T;
	// A task takes nh consecutive query heads, whole KV heads' worth where
	// possible, so that it streams longer spans of each cache row: as many
	// as leave at least LB_ATT_TASKS tasks per thread.
	int64_t G = H / KVH, group = 1;
	for (int64_t nh = H; nh >= 1; nh--) {
		if (H % nh != 0 || (nh % G != 0 && G % nh != 0)) continue;
		group = nh;
		if (T * (H / nh) >= LB_ATT_TASKS * c->threads) break;
	}
	// Rows of 16 floats keep each thread's scratch on its own cache lines.
	// The pool row of every position comes first, computed once: a lookup
	// through the block table costs a 64-bit division, as much as a
	// position's FMAs for a 128-dim head.
	int64_t stride = (group * ctx + 4 * Dh + 2 * group + 15) & ~(int64_t)15;
	int64_t rows_floats = (2 * ctx + 15) & ~(int64_t)15;
	float *scratch = lb_scratch(c, ((size_t)rows_floats + (size_t)c->threads * (size_t)stride) * sizeof(float));
	if (!scratch) return LB_ERR_NOMEM;
	int64_t *rows = (int64_t *)scratch;
	for (int64_t i = 0, b = 0, off = 0; i < ctx; i++) {
		rows[i] = blocks ? (int64_t)blocks[b] * bs + off : i;
		if (++off == bs) off = 0, b++;
	}
	att_job j = {out, q, k, v, dtype, kscale, vscale, blocks, bs, T, start, H, KVH, Dh, ctx, scale, group, rows,
	             scratch + rows_floats, stride};
	lb_task fn = att_task_generic;
#ifdef LB_X86
	if (c->isa == LB_ISA_AVX512) fn = att_task_avx512;
	if (c->isa == LB_ISA_AVX2) fn = att_task_avx2;
#endif
	// Work: two multiply-adds per head dimension and visible position.
	double work = 2.0 * (double)H * (double)Dh * (double)T * ((double)start + (double)(T + 1) / 2);
	int64_t ntasks = T * H / group;
	if (lb_tasks(c, work, ntasks) == 1) {
		for (int64_t i = 0; i < ntasks; i++) fn(&j, i, 0);
	} else {
		lb_pool_run(c->pool, ntasks, fn, &j);
	}
	return LB_OK;
}
