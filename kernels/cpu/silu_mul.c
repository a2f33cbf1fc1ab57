//go:build cgo

// silu_mul.c: the SiLUMul op, the gate of a SwiGLU MLP.
//
// Computes: out[i] = gate[i] / (1 + exp(−gate[i])) · up[i] in float32, in
// that order, with the kernels' own exp (lb_exp in internal.h).
//
// Layout: flat arrays of n floats; out may alias gate or up (each element
// is read before it is written).
//
// Variants: _avx512 (16 lanes, a masked tail), _avx2 (8 lanes, the tail
// by _generic) and _generic (lb_expf): the same operations on every path,
// so the same bits for every element whatever n and the ISA. Large n is
// split over the pool in fixed chunks. Measured on the 2-core Xeon VM
// (BENCHMARKS.md): a decode step's SiLU of 3072 gates took 10-15 µs with
// glibc's scalar expf, 3.1-3.5 µs with lb_exp.
//
// Tested by TestSiLUMul (every path against float64, and bit-identical
// across paths) and kerneltest.
#include "internal.h"

#define CHUNK 16384

typedef void (*silu_fn)(float *out, const float *gate, const float *up, int64_t n);

typedef struct {
	float *out;
	const float *gate, *up;
	int64_t n;
	silu_fn range;
} silu_job;

static void silu_generic(float *out, const float *gate, const float *up, int64_t n) {
	for (int64_t i = 0; i < n; i++) {
		float g = gate[i];
		out[i] = g / (1.0f + lb_expf(-g)) * up[i];
	}
}

#ifdef LB_X86
LB_AVX512 static void silu_avx512(float *out, const float *gate, const float *up, int64_t n) {
	const __m512 one = _mm512_set1_ps(1.0f), zero = _mm512_setzero_ps();
	for (int64_t i = 0; i < n; i += 16) {
		__mmask16 k = n - i >= 16 ? 0xFFFF : lb_tail_mask16(n - i);
		__m512 g = _mm512_maskz_loadu_ps(k, gate + i);
		__m512 d = _mm512_add_ps(one, lb_exp_avx512(_mm512_sub_ps(zero, g)));
		_mm512_mask_storeu_ps(out + i, k, _mm512_mul_ps(_mm512_div_ps(g, d), _mm512_maskz_loadu_ps(k, up + i)));
	}
}

LB_AVX2 static void silu_avx2(float *out, const float *gate, const float *up, int64_t n) {
	const __m256 one = _mm256_set1_ps(1.0f), zero = _mm256_setzero_ps();
	int64_t i = 0;
	for (; i + 8 <= n; i += 8) {
		__m256 g = _mm256_loadu_ps(gate + i);
		__m256 d = _mm256_add_ps(one, lb_exp_avx2(_mm256_sub_ps(zero, g)));
		_mm256_storeu_ps(out + i, _mm256_mul_ps(_mm256_div_ps(g, d), _mm256_loadu_ps(up + i)));
	}
	silu_generic(out + i, gate + i, up + i, n - i);
}

LB_AVX512 static void exp16_avx512(float *dst, const float *src) {
	_mm512_storeu_ps(dst, lb_exp_avx512(_mm512_loadu_ps(src)));
}

LB_AVX2 static void exp8_avx2(float *dst, const float *src) { _mm256_storeu_ps(dst, lb_exp_avx2(_mm256_loadu_ps(src))); }
#endif

static silu_fn silu_path(int isa) {
#ifdef LB_X86
	if (isa == LB_ISA_AVX512) return silu_avx512;
	if (isa == LB_ISA_AVX2) return silu_avx2;
#endif
	(void)isa;
	return silu_generic;
}

static void silu_task(void *arg, int64_t task, int tid) {
	(void)tid;
	const silu_job *j = arg;
	int64_t i = task * CHUNK, n = j->n - i < CHUNK ? j->n - i : CHUNK;
	j->range(j->out + i, j->gate + i, j->up + i, n);
}

void lb_silu_mul(lb_ctx *c, float *out, const float *gate, const float *up, int64_t n) {
	if (n <= 0) return;
	silu_fn range = silu_path(c->isa);
	// An exp is worth about 4 multiply-adds, 16 at a time.
	if (lb_tasks(c, 4.0 * (double)n, (n + CHUNK - 1) / CHUNK) == 1) {
		range(out, gate, up, n);
		return;
	}
	silu_job j = {out, gate, up, n, range};
	lb_pool_run(c->pool, (n + CHUNK - 1) / CHUNK, silu_task, &j);
}

void lb_exp_run(int isa, float *dst, const float *src, int64_t n) {
	int64_t i = 0;
#ifdef LB_X86
	if (isa == LB_ISA_AVX512 && lb_isa_supported(isa)) {
		for (; i + 16 <= n; i += 16) exp16_avx512(dst + i, src + i);
	} else if (isa == LB_ISA_AVX2 && lb_isa_supported(isa)) {
		for (; i + 8 <= n; i += 8) exp8_avx2(dst + i, src + i);
	}
#endif
	for (; i < n; i++) dst[i] = lb_expf(src[i]);
}
