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
// order of i and then the lanes pairwise, so it depends only on Dh.
// One pool task per (token, head); scores and decoded rows live in
// per-thread scratch. A (t, h) result depends only on q[t,h] and the cache
// up to p, so it is the same whatever T, start split, block table, batch or
// thread count produced it.
//
// Tested by TestAttention (prefill and decode, GQA, against float64 loops),
// TestBatchInvariance and kerneltest (Attention and PagedAttention, every
// dtype, shuffled block tables).
#include <math.h>
#include <pthread.h>

#include "internal.h"

typedef struct {
	float *out;
	const float *q;
	const uint8_t *k, *v;
	int dtype;
	float kscale, vscale;
	const int32_t *blocks; // NULL: contiguous
	int64_t bs;
	int64_t T, start, H, KVH, Dh, ctx;
	float scale;
	float *scratch; // per thread: scores [ctx], then a decoded row [Dh]
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
	int64_t row = j->blocks ? (int64_t)j->blocks[i / j->bs] * j->bs + i % j->bs : i;
	int64_t off = (row * j->KVH + kh) * j->Dh;
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

typedef float (*dot_fn)(const float *a, const float *b, int64_t n);
typedef void (*axpy_fn)(float *y, float a, const float *x, int64_t n);

// att_head computes one (token, head); dot and axpy are inlined per path.
LB_INLINE void att_head(const att_job *j, int64_t task, int tid, dot_fn dot, axpy_fn axpy) {
	int64_t t = task / j->H, h = task % j->H, p = j->start + t, kh = h / (j->H / j->KVH);
	int64_t Dh = j->Dh;
	const float *q = j->q + (t * j->H + h) * Dh;
	float *s = j->scratch + (int64_t)tid * j->scratch_stride, *buf = s + j->ctx;
	float m = -INFINITY;
	for (int64_t i = 0; i <= p; i++) {
		s[i] = dot(q, kv_row(j, j->k, j->kscale, i, kh, buf), Dh) * j->scale;
		m = s[i] > m ? s[i] : m;
	}
	float sum = 0;
	for (int64_t i = 0; i <= p; i++) {
		s[i] = expf(s[i] - m);
		sum += s[i];
	}
	float *o = j->out + (t * j->H + h) * Dh;
	memset(o, 0, (size_t)Dh * sizeof *o);
	for (int64_t i = 0; i <= p; i++) axpy(o, s[i], kv_row(j, j->v, j->vscale, i, kh, buf), Dh);
	for (int64_t d = 0; d < Dh; d++) o[d] /= sum;
}

LB_INLINE float dot_generic(const float *a, const float *b, int64_t n) {
	float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
	int64_t i = 0;
	for (; i + 8 <= n; i += 8)
		for (int l = 0; l < 8; l++) acc[l] += a[i + l] * b[i + l];
	for (int l = 0; i + l < n; l++) acc[l] += a[i + l] * b[i + l];
	return lb_hsum8(acc);
}

LB_INLINE void axpy_generic(float *y, float a, const float *x, int64_t n) {
	for (int64_t i = 0; i < n; i++) y[i] += a * x[i];
}

static void att_task_generic(void *arg, int64_t task, int tid) {
	att_head(arg, task, tid, dot_generic, axpy_generic);
}

#ifdef LB_X86
LB_INLINE LB_AVX512 float dot_avx512(const float *a, const float *b, int64_t n) {
	__m512 acc = _mm512_setzero_ps();
	for (int64_t i = 0; i < n; i += 16) {
		__mmask16 k = n - i >= 16 ? 0xFFFF : lb_tail_mask16(n - i);
		acc = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(k, a + i), _mm512_maskz_loadu_ps(k, b + i), acc);
	}
	return lb_hsum_avx512(acc);
}

LB_INLINE LB_AVX512 void axpy_avx512(float *y, float a, const float *x, int64_t n) {
	__m512 A = _mm512_set1_ps(a);
	for (int64_t i = 0; i < n; i += 16) {
		__mmask16 k = n - i >= 16 ? 0xFFFF : lb_tail_mask16(n - i);
		__m512 r = _mm512_fmadd_ps(A, _mm512_maskz_loadu_ps(k, x + i), _mm512_maskz_loadu_ps(k, y + i));
		_mm512_mask_storeu_ps(y + i, k, r);
	}
}

LB_AVX512 static void att_task_avx512(void *arg, int64_t task, int tid) {
	att_head(arg, task, tid, dot_avx512, axpy_avx512);
}

LB_INLINE LB_AVX2 float dot_avx2(const float *a, const float *b, int64_t n) {
	__m256 acc = _mm256_setzero_ps();
	for (int64_t i = 0; i < n; i += 8) {
		__m256i k = lb_tail_mask8(n - i < 8 ? n - i : 8);
		acc = _mm256_fmadd_ps(_mm256_maskload_ps(a + i, k), _mm256_maskload_ps(b + i, k), acc);
	}
	return lb_hsum_avx2(acc);
}

LB_INLINE LB_AVX2 void axpy_avx2(float *y, float a, const float *x, int64_t n) {
	__m256 A = _mm256_set1_ps(a);
	for (int64_t i = 0; i < n; i += 8) {
		__m256i k = lb_tail_mask8(n - i < 8 ? n - i : 8);
		__m256 r = _mm256_fmadd_ps(A, _mm256_maskload_ps(x + i, k), _mm256_maskload_ps(y + i, k));
		_mm256_maskstore_ps(y + i, k, r);
	}
}

LB_AVX2 static void att_task_avx2(void *arg, int64_t task, int tid) {
	att_head(arg, task, tid, dot_avx2, axpy_avx2);
}
#endif

int lb_attention(lb_ctx *c, float *out, const float *q, const uint8_t *k, const uint8_t *v, int dtype,
                 float kscale, float vscale, const int32_t *blocks, int64_t bs, int64_t T, int64_t start,
                 int64_t H, int64_t KVH, int64_t Dh, float scale) {
	if (T <= 0) return LB_OK;
	pthread_once(&e4m3_lut_once, e4m3_lut_init);
	int64_t ctx = start + T;
	// Rows of 16 floats keep each thread's scratch on its own cache lines.
	int64_t stride = (ctx + Dh + 15) & ~(int64_t)15;
	float *scratch = lb_scratch(c, (size_t)c->threads * (size_t)stride * sizeof(float));
	if (!scratch) return LB_ERR_NOMEM;
	att_job j = {out, q, k, v, dtype, kscale, vscale, blocks, bs, T, start, H, KVH, Dh, ctx, scale, scratch, stride};
	lb_task fn = att_task_generic;
#ifdef LB_X86
	if (c->isa == LB_ISA_AVX512) fn = att_task_avx512;
	if (c->isa == LB_ISA_AVX2) fn = att_task_avx2;
#endif
	// Work: two multiply-adds per head dimension and visible position.
	double work = 2.0 * (double)H * (double)Dh * (double)T * ((double)start + (double)(T + 1) / 2);
	if (lb_tasks(c, work, T * H) == 1) {
		for (int64_t i = 0; i < T * H; i++) fn(&j, i, 0);
	} else {
		lb_pool_run(c->pool, T * H, fn, &j);
	}
	return LB_OK;
}
