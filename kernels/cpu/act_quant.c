//go:build cgo

// act_quant.c: activation quantization, done once per token row before a
// matmul's products.
//
// Computes, for each row x of [T, in], the effective activations xe that the
// matmul multiplies with the weights, following kernels.ActQuant exactly:
//   FP8 token:    s = max|x| / 448 (1 for an all-zero row); xe = e4m3(E4M3(x / s)),
//                 post = s (the matmul multiplies the row's sums by s);
//   FP8 tensor:   as FP8 token with s = InputScale;
//   FP8 group128: per group g of 128, s_g = max|x_g| / 448 (1 if all zero);
//                 xe = e4m3(E4M3(x / s_g)) · s_g;
//   NVFP4:        per group of 16, b = E4M3(max|x_g| / 6 · G), 0.125 if that is
//                 zero; sc = b / G; xe = e2m1(E2M1(x / sc)) · sc.
// The float32 operations are the contract's, in its order (x / s is a
// division, not a multiplication by 1/s), so the codes are exact. Max
// propagates NaN, as Go's max does. E4M3(·) saturates to ±448, rounds to
// nearest even, keeps the sign of zero and maps NaN to NaN, as
// format.E4M3FromFloat32; E2M1(·) clamps to ±6 and maps NaN to ±0, as
// format.E2M1FromFloat32.
//
// Only FP8 group128 deviates from the contract's literal formula, which
// factors s_g out of each group's sum: here xe = value · s_g is rounded to
// float32 before the product, one extra rounding per element, of the same
// size as the reordering of float32 sums that every implementation does.
//
// Layout: xe is [T, in] like x; post is [T].
//
// Variants: the rounding works on float32 bit patterns (integer add of a
// rounding bias for normals, the add-and-subtract of a power of two for
// subnormals, which rounds to nearest even in hardware) so it vectorizes;
// _generic is scalar, _avx2 8 lanes, _avx512 16 lanes with masked tails.
// All three give identical results.
//
// Tested by TestRoundMinifloat (every code path against format.E4M3 and
// format.E2M1 encode+decode over all sign/exponent combinations with
// rounding-relevant mantissas and random bit patterns) and by the MatMul
// tests of every activation quantization.
#include <math.h>

#include "internal.h"

static inline uint32_t f2u(float f) {
	uint32_t u;
	memcpy(&u, &f, 4);
	return u;
}

static inline float u2f(uint32_t u) {
	float f;
	memcpy(&f, &u, 4);
	return f;
}

// Bit patterns: 448, the smallest normal E4M3 2^-6, 6 and 1 (smallest normal E2M1).
#define E4M3_MAX 0x43E00000u
#define E4M3_MIN_NORMAL 0x3C800000u
#define E2M1_MAX 0x40C00000u
#define E2M1_MIN_NORMAL 0x3F800000u
#define F32_INF 0x7F800000u
#define F32_QNAN 0x7FC00000u
// Adding and subtracting these rounds to the subnormal quantum of each format
// (their float32 ulp): 2^14 has ulp 2^-9, 2^22 has ulp 2^-1.
#define E4M3_SUB_ROUNDER 16384.0f
#define E2M1_SUB_ROUNDER 4194304.0f

// e4m3_round returns E4M3ToFloat32(E4M3FromFloat32(f)).
static inline float e4m3_round(float f) {
	uint32_t u = f2u(f), sign = u & 0x80000000u, a = u & 0x7FFFFFFFu;
	if (a > F32_INF) return u2f(sign | F32_QNAN);
	if (a >= E4M3_MAX) {
		a = E4M3_MAX;
	} else if (a < E4M3_MIN_NORMAL) {
		a = f2u((u2f(a) + E4M3_SUB_ROUNDER) - E4M3_SUB_ROUNDER);
	} else {
		a = (a + 0x7FFFFu + ((a >> 20) & 1)) & 0xFFF00000u;
	}
	return u2f(a | sign);
}

// e2m1_round returns E2M1ToFloat32(E2M1FromFloat32(f)).
static inline float e2m1_round(float f) {
	uint32_t u = f2u(f), sign = u & 0x80000000u, a = u & 0x7FFFFFFFu;
	if (a > F32_INF) return u2f(sign);
	if (a >= E2M1_MAX) {
		a = E2M1_MAX;
	} else if (a < E2M1_MIN_NORMAL) {
		a = f2u((u2f(a) + E2M1_SUB_ROUNDER) - E2M1_SUB_ROUNDER);
	} else {
		a = (a + 0x1FFFFFu + ((a >> 22) & 1)) & 0xFFC00000u;
	}
	return u2f(a | sign);
}

// ---------------------------------------------------------------------------
// Per-ISA primitives: absmax (NaN-propagating), q8 (xe = e4m3(x/s)·mul) and
// q4 (xe = e2m1(x/sc)·sc).

LB_INLINE float absmax_generic(const float *x, int64_t n) {
	float m = 0;
	for (int64_t i = 0; i < n; i++) {
		float a = fabsf(x[i]);
		if (a != a) return a;
		m = a > m ? a : m;
	}
	return m;
}

LB_INLINE void q8_generic(float *xe, const float *x, int64_t n, float s, float mul) {
	for (int64_t i = 0; i < n; i++) xe[i] = e4m3_round(x[i] / s) * mul;
}

LB_INLINE void q4_generic(float *xe, const float *x, int64_t n, float sc) {
	for (int64_t i = 0; i < n; i++) xe[i] = e2m1_round(x[i] / sc) * sc;
}

#ifdef LB_X86
LB_INLINE LB_AVX512 __m512 e4m3_round_avx512(__m512 f) {
	__m512i u = _mm512_castps_si512(f);
	__m512i sign = _mm512_and_si512(u, _mm512_set1_epi32((int)0x80000000u));
	__m512i a = _mm512_and_si512(u, _mm512_set1_epi32(0x7FFFFFFF));
	__mmask16 nan = _mm512_cmpgt_epi32_mask(a, _mm512_set1_epi32((int)F32_INF));
	a = _mm512_min_epi32(a, _mm512_set1_epi32((int)E4M3_MAX));
	__mmask16 sub = _mm512_cmplt_epi32_mask(a, _mm512_set1_epi32((int)E4M3_MIN_NORMAL));
	__m512i nrm = _mm512_add_epi32(a, _mm512_set1_epi32(0x7FFFF));
	nrm = _mm512_add_epi32(nrm, _mm512_and_si512(_mm512_srli_epi32(a, 20), _mm512_set1_epi32(1)));
	nrm = _mm512_and_si512(nrm, _mm512_set1_epi32((int)0xFFF00000u));
	__m512 big = _mm512_set1_ps(E4M3_SUB_ROUNDER);
	__m512i sbn = _mm512_castps_si512(_mm512_sub_ps(_mm512_add_ps(_mm512_castsi512_ps(a), big), big));
	__m512i r = _mm512_or_si512(_mm512_mask_blend_epi32(sub, nrm, sbn), sign);
	r = _mm512_mask_blend_epi32(nan, r, _mm512_or_si512(sign, _mm512_set1_epi32((int)F32_QNAN)));
	return _mm512_castsi512_ps(r);
}

LB_INLINE LB_AVX512 __m512 e2m1_round_avx512(__m512 f) {
	__m512i u = _mm512_castps_si512(f);
	__m512i sign = _mm512_and_si512(u, _mm512_set1_epi32((int)0x80000000u));
	__m512i a = _mm512_and_si512(u, _mm512_set1_epi32(0x7FFFFFFF));
	__mmask16 nan = _mm512_cmpgt_epi32_mask(a, _mm512_set1_epi32((int)F32_INF));
	a = _mm512_min_epi32(a, _mm512_set1_epi32((int)E2M1_MAX));
	__mmask16 sub = _mm512_cmplt_epi32_mask(a, _mm512_set1_epi32((int)E2M1_MIN_NORMAL));
	__m512i nrm = _mm512_add_epi32(a, _mm512_set1_epi32(0x1FFFFF));
	nrm = _mm512_add_epi32(nrm, _mm512_and_si512(_mm512_srli_epi32(a, 22), _mm512_set1_epi32(1)));
	nrm = _mm512_and_si512(nrm, _mm512_set1_epi32((int)0xFFC00000u));
	__m512 big = _mm512_set1_ps(E2M1_SUB_ROUNDER);
	__m512i sbn = _mm512_castps_si512(_mm512_sub_ps(_mm512_add_ps(_mm512_castsi512_ps(a), big), big));
	__m512i r = _mm512_or_si512(_mm512_mask_blend_epi32(sub, nrm, sbn), sign);
	r = _mm512_mask_blend_epi32(nan, r, sign);
	return _mm512_castsi512_ps(r);
}

LB_INLINE LB_AVX512 float absmax_avx512(const float *x, int64_t n) {
	__m512 m = _mm512_setzero_ps();
	__m512i abs = _mm512_set1_epi32(0x7FFFFFFF);
	__mmask16 nan = 0;
	int64_t i = 0;
	for (; i < n; i += 16) {
		__mmask16 k = n - i >= 16 ? 0xFFFF : lb_tail_mask16(n - i);
		__m512 a = _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(_mm512_maskz_loadu_ps(k, x + i)), abs));
		nan |= _mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q);
		m = _mm512_max_ps(m, a);
	}
	if (nan) return __builtin_nanf("");
	return _mm512_reduce_max_ps(m);
}

LB_INLINE LB_AVX512 void q8_avx512(float *xe, const float *x, int64_t n, float s, float mul) {
	__m512 S = _mm512_set1_ps(s), M = _mm512_set1_ps(mul);
	for (int64_t i = 0; i < n; i += 16) {
		__mmask16 k = n - i >= 16 ? 0xFFFF : lb_tail_mask16(n - i);
		__m512 v = _mm512_div_ps(_mm512_maskz_loadu_ps(k, x + i), S);
		_mm512_mask_storeu_ps(xe + i, k, _mm512_mul_ps(e4m3_round_avx512(v), M));
	}
}

LB_INLINE LB_AVX512 void q4_avx512(float *xe, const float *x, int64_t n, float sc) {
	__m512 S = _mm512_set1_ps(sc);
	for (int64_t i = 0; i < n; i += 16) {
		__mmask16 k = n - i >= 16 ? 0xFFFF : lb_tail_mask16(n - i);
		__m512 v = _mm512_div_ps(_mm512_maskz_loadu_ps(k, x + i), S);
		_mm512_mask_storeu_ps(xe + i, k, _mm512_mul_ps(e2m1_round_avx512(v), S));
	}
}

// The AVX2 versions: the same bit operations with vector masks.
LB_INLINE LB_AVX2 __m256 e4m3_round_avx2(__m256 f) {
	__m256i u = _mm256_castps_si256(f);
	__m256i sign = _mm256_and_si256(u, _mm256_set1_epi32((int)0x80000000u));
	__m256i a = _mm256_and_si256(u, _mm256_set1_epi32(0x7FFFFFFF));
	__m256i nan = _mm256_cmpgt_epi32(a, _mm256_set1_epi32((int)F32_INF));
	a = _mm256_min_epi32(a, _mm256_set1_epi32((int)E4M3_MAX));
	__m256i sub = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)E4M3_MIN_NORMAL), a);
	__m256i nrm = _mm256_add_epi32(a, _mm256_set1_epi32(0x7FFFF));
	nrm = _mm256_add_epi32(nrm, _mm256_and_si256(_mm256_srli_epi32(a, 20), _mm256_set1_epi32(1)));
	nrm = _mm256_and_si256(nrm, _mm256_set1_epi32((int)0xFFF00000u));
	__m256 big = _mm256_set1_ps(E4M3_SUB_ROUNDER);
	__m256i sbn = _mm256_castps_si256(_mm256_sub_ps(_mm256_add_ps(_mm256_castsi256_ps(a), big), big));
	__m256i r = _mm256_or_si256(_mm256_blendv_epi8(nrm, sbn, sub), sign);
	r = _mm256_blendv_epi8(r, _mm256_or_si256(sign, _mm256_set1_epi32((int)F32_QNAN)), nan);
	return _mm256_castsi256_ps(r);
}

LB_INLINE LB_AVX2 __m256 e2m1_round_avx2(__m256 f) {
	__m256i u = _mm256_castps_si256(f);
	__m256i sign = _mm256_and_si256(u, _mm256_set1_epi32((int)0x80000000u));
	__m256i a = _mm256_and_si256(u, _mm256_set1_epi32(0x7FFFFFFF));
	__m256i nan = _mm256_cmpgt_epi32(a, _mm256_set1_epi32((int)F32_INF));
	a = _mm256_min_epi32(a, _mm256_set1_epi32((int)E2M1_MAX));
	__m256i sub = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)E2M1_MIN_NORMAL), a);
	__m256i nrm = _mm256_add_epi32(a, _mm256_set1_epi32(0x1FFFFF));
	nrm = _mm256_add_epi32(nrm, _mm256_and_si256(_mm256_srli_epi32(a, 22), _mm256_set1_epi32(1)));
	nrm = _mm256_and_si256(nrm, _mm256_set1_epi32((int)0xFFC00000u));
	__m256 big = _mm256_set1_ps(E2M1_SUB_ROUNDER);
	__m256i sbn = _mm256_castps_si256(_mm256_sub_ps(_mm256_add_ps(_mm256_castsi256_ps(a), big), big));
	__m256i r = _mm256_or_si256(_mm256_blendv_epi8(nrm, sbn, sub), sign);
	r = _mm256_blendv_epi8(r, sign, nan);
	return _mm256_castsi256_ps(r);
}

LB_INLINE LB_AVX2 float absmax_avx2(const float *x, int64_t n) {
	__m256 m = _mm256_setzero_ps();
	__m256 nan = _mm256_setzero_ps();
	__m256 abs = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
	for (int64_t i = 0; i < n; i += 8) {
		__m256i k = lb_tail_mask8(n - i < 8 ? n - i : 8);
		__m256 a = _mm256_and_ps(_mm256_maskload_ps(x + i, k), abs);
		nan = _mm256_or_ps(nan, _mm256_cmp_ps(a, a, _CMP_UNORD_Q));
		m = _mm256_max_ps(m, a);
	}
	if (_mm256_movemask_ps(nan)) return __builtin_nanf("");
	__m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
	h = _mm_max_ps(h, _mm_movehl_ps(h, h));
	h = _mm_max_ss(h, _mm_movehdup_ps(h));
	return _mm_cvtss_f32(h);
}

LB_INLINE LB_AVX2 void q8_avx2(float *xe, const float *x, int64_t n, float s, float mul) {
	__m256 S = _mm256_set1_ps(s), M = _mm256_set1_ps(mul);
	for (int64_t i = 0; i < n; i += 8) {
		__m256i k = lb_tail_mask8(n - i < 8 ? n - i : 8);
		__m256 v = _mm256_div_ps(_mm256_maskload_ps(x + i, k), S);
		_mm256_maskstore_ps(xe + i, k, _mm256_mul_ps(e4m3_round_avx2(v), M));
	}
}

LB_INLINE LB_AVX2 void q4_avx2(float *xe, const float *x, int64_t n, float sc) {
	__m256 S = _mm256_set1_ps(sc);
	for (int64_t i = 0; i < n; i += 8) {
		__m256i k = lb_tail_mask8(n - i < 8 ? n - i : 8);
		__m256 v = _mm256_div_ps(_mm256_maskload_ps(x + i, k), S);
		_mm256_maskstore_ps(xe + i, k, _mm256_mul_ps(e2m1_round_avx2(v), S));
	}
}
#endif

// ---------------------------------------------------------------------------
// One row, written once and instantiated per code path with its primitives
// inlined.

typedef float (*absmax_fn)(const float *, int64_t);
typedef void (*q8_fn)(float *, const float *, int64_t, float, float);
typedef void (*q4_fn)(float *, const float *, int64_t, float);

// act_row quantizes one row and returns its post factor (1 when none).
LB_INLINE float act_row(float *xe, const float *x, int64_t n, int act, float in_scale, absmax_fn absmax,
                        q8_fn q8, q4_fn q4) {
	switch (act) {
	case LB_A_FP8_TOKEN: {
		float amax = absmax(x, n);
		float s = amax == 0 ? 1.0f : amax / 448.0f;
		q8(xe, x, n, s, 1.0f);
		return s;
	}
	case LB_A_FP8_TENSOR:
		q8(xe, x, n, in_scale, 1.0f);
		return in_scale;
	case LB_A_FP8_GROUP128:
		for (int64_t g = 0; g < n; g += 128) {
			float amax = absmax(x + g, 128);
			float s = amax == 0 ? 1.0f : amax / 448.0f;
			q8(xe + g, x + g, 128, s, s);
		}
		return 1.0f;
	case LB_A_NVFP4:
		for (int64_t g = 0; g < n; g += 16) {
			float b = e4m3_round(absmax(x + g, 16) / 6.0f * in_scale);
			if (b == 0) b = 0.125f;
			q4(xe + g, x + g, 16, b / in_scale);
		}
		return 1.0f;
	}
	memcpy(xe, x, (size_t)n * sizeof *x);
	return 1.0f;
}

typedef float (*act_row_fn)(float *xe, const float *x, int64_t n, int act, float in_scale);

static float act_row_generic(float *xe, const float *x, int64_t n, int act, float in_scale) {
	return act_row(xe, x, n, act, in_scale, absmax_generic, q8_generic, q4_generic);
}

#ifdef LB_X86
LB_AVX2 static float act_row_avx2(float *xe, const float *x, int64_t n, int act, float in_scale) {
	return act_row(xe, x, n, act, in_scale, absmax_avx2, q8_avx2, q4_avx2);
}

LB_AVX512 static float act_row_avx512(float *xe, const float *x, int64_t n, int act, float in_scale) {
	return act_row(xe, x, n, act, in_scale, absmax_avx512, q8_avx512, q4_avx512);
}
#endif

static act_row_fn act_row_for(int isa) {
#ifdef LB_X86
	if (isa == LB_ISA_AVX512) return act_row_avx512;
	if (isa == LB_ISA_AVX2) return act_row_avx2;
#endif
	(void)isa;
	return act_row_generic;
}

typedef struct {
	act_row_fn row;
	float *xe, *post;
	const float *x;
	int64_t T, in, rows_per_task;
	int act;
	float in_scale;
} prep_job;

static void prep_task(void *arg, int64_t task, int tid) {
	(void)tid;
	const prep_job *j = arg;
	int64_t t1 = (task + 1) * j->rows_per_task;
	for (int64_t t = task * j->rows_per_task; t < t1 && t < j->T; t++) {
		j->post[t] = j->row(j->xe + t * j->in, j->x + t * j->in, j->in, j->act, j->in_scale);
	}
}

void lb_act_prep(lb_ctx *c, float *xe, float *post, int *has_post, const float *x, int64_t T, int64_t in,
                 int act, float input_scale) {
	prep_job j = {act_row_for(c->isa), xe, post, x, T, in, 0, act, input_scale};
	int64_t ntasks = lb_tasks(c, 4.0 * (double)T * (double)in, T);
	j.rows_per_task = (T + ntasks - 1) / ntasks;
	lb_pool_run(c->pool, (T + j.rows_per_task - 1) / j.rows_per_task, prep_task, &j);
	*has_post = act == LB_A_FP8_TOKEN || act == LB_A_FP8_TENSOR;
}

#ifdef LB_X86
LB_AVX512 static void round_avx512(int kind, float *dst, const float *src, int64_t n) {
	if (kind == 0)
		q8_avx512(dst, src, n, 1.0f, 1.0f);
	else
		q4_avx512(dst, src, n, 1.0f);
}

LB_AVX2 static void round_avx2(int kind, float *dst, const float *src, int64_t n) {
	if (kind == 0)
		q8_avx2(dst, src, n, 1.0f, 1.0f);
	else
		q4_avx2(dst, src, n, 1.0f);
}
#endif

// lb_round_minifloat divides and multiplies by 1, which is exact, so it tests
// the rounding alone.
void lb_round_minifloat(int isa, int kind, float *dst, const float *src, int64_t n) {
#ifdef LB_X86
	if (isa == LB_ISA_AVX512 && lb_isa_supported(isa)) {
		round_avx512(kind, dst, src, n);
		return;
	}
	if (isa == LB_ISA_AVX2 && lb_isa_supported(isa)) {
		round_avx2(kind, dst, src, n);
		return;
	}
#endif
	if (kind == 0)
		q8_generic(dst, src, n, 1.0f, 1.0f);
	else
		q4_generic(dst, src, n, 1.0f);
}
