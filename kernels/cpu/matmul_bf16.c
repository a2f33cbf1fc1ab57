//go:build cgo

// matmul_bf16.c: the row kernels of MatMul for BF16 weights.
//
// Computes: y[t,o] = Σ_i x[t,i]·w[o,i] for rows [o0, o1) of W and every
// token, where w[o,i] is the BF16 value widened to float32 (exact: a 16-bit
// shift) and x holds float32 activations (already quantized when the weight
// asks for it). Products and sums are float32 FMAs (the generic path: a
// multiply and an add).
//
// Layout: W is [out, in] little-endian BF16, row-major; x [T, in], y [T, out].
//
// Variants and reduction order. A tile is LB_MM_R weight rows × up to
// LB_MM_T tokens: each weight vector is decoded once and used for every
// token of the tile, which makes prefill compute-bound; decode (T = 1)
// streams the rows, a tile taking one row from each quarter of its task's
// rows (LB_MM_ROWS: four long streams). Each output element has one accumulator of L lanes:
// element i goes to lane i mod L, lanes accumulate in order of i, and the
// lanes are then summed pairwise (halves first). L is 16 for _avx512 (a
// masked load covers in mod 16), 8 for _avx2 and 8 for _generic (scalar
// lane arrays that the compiler vectorizes). The order depends only on in,
// so tokens give bit-identical results alone or together. The tiles leave
// streaming to the hardware prefetchers: on the Zen 5 VM of 2026-12-03,
// asking for the tile two on in software as well took a Qwen3-0.6B step's
// BF16 GEMVs from 0.73-0.96 of the bandwidth probe down to 0.63-0.80 (AVX2:
// 0.79 to 0.62; C calls of lb_matmul in a decode step's order, variants
// interleaved step by step; BENCHMARKS.md).
//
// AVX512_BF16's vdpbf16ps is not used: it would round the float32
// activations to BF16, far outside the contract's float32 tolerance.
//
// Tested by TestMatMul, TestBatchInvariance, TestThreadsInvariance and
// kerneltest; benchmarked by BenchmarkGEMV/bf16 and BenchmarkGEMM/bf16.
#include "internal.h"

static inline float bf16_to_f32(const uint8_t *p) {
	uint32_t u = ((uint32_t)p[0] | (uint32_t)p[1] << 8) << 16;
	float f;
	memcpy(&f, &u, 4);
	return f;
}

LB_INLINE void bf16_tile_generic(const lb_mm *m, int64_t o, int nr, int64_t rs, int64_t t, const int nt) {
	const int64_t in = m->in;
	const uint8_t *w[LB_MM_R];
	for (int r = 0; r < LB_MM_R; r++) w[r] = m->w + 2 * (o + (r < nr ? r : 0) * rs) * in;
	const float *x[LB_MM_T];
	for (int j = 0; j < nt; j++) x[j] = m->x + (t + j) * in;
	float acc[LB_MM_T][LB_MM_R][8];
	memset(acc, 0, sizeof acc);
	int64_t i = 0;
	for (; i + 8 <= in; i += 8) {
		float wv[LB_MM_R][8];
		for (int r = 0; r < LB_MM_R; r++)
			for (int l = 0; l < 8; l++) wv[r][l] = bf16_to_f32(w[r] + 2 * (i + l));
		for (int j = 0; j < nt; j++)
			for (int r = 0; r < LB_MM_R; r++)
				for (int l = 0; l < 8; l++) acc[j][r][l] += x[j][i + l] * wv[r][l];
	}
	for (int l = 0; i + l < in; l++)
		for (int r = 0; r < LB_MM_R; r++) {
			float wv = bf16_to_f32(w[r] + 2 * (i + l));
			for (int j = 0; j < nt; j++) acc[j][r][l] += x[j][i + l] * wv;
		}
	for (int j = 0; j < nt; j++)
		for (int r = 0; r < nr; r++) lb_mm_store(m, t + j, o + r * rs, lb_hsum8(acc[j][r]));
}

LB_MM_ROWS(bf16_rows_generic, , bf16_tile_generic, LB_MM_T)

#ifdef LB_X86
LB_INLINE LB_AVX512 __m512 bf16x16_avx512(__m256i h) {
	return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

LB_INLINE LB_AVX512 void bf16_tile_avx512(const lb_mm *m, int64_t o, int nr, int64_t rs, int64_t t, const int nt) {
	const int64_t in = m->in;
	const uint8_t *w[LB_MM_R];
	for (int r = 0; r < LB_MM_R; r++) w[r] = m->w + 2 * (o + (r < nr ? r : 0) * rs) * in;
	const float *x[LB_MM_T];
	for (int j = 0; j < nt; j++) x[j] = m->x + (t + j) * in;
	__m512 acc[LB_MM_T][LB_MM_R], wv[LB_MM_R];
	for (int j = 0; j < nt; j++)
		for (int r = 0; r < LB_MM_R; r++) acc[j][r] = _mm512_setzero_ps();
	int64_t i = 0;
	for (; i + 16 <= in; i += 16) {
		for (int r = 0; r < LB_MM_R; r++) wv[r] = bf16x16_avx512(_mm256_loadu_si256((const __m256i *)(w[r] + 2 * i)));
		for (int j = 0; j < nt; j++) {
			__m512 xv = _mm512_loadu_ps(x[j] + i);
			for (int r = 0; r < LB_MM_R; r++) acc[j][r] = _mm512_fmadd_ps(xv, wv[r], acc[j][r]);
		}
	}
	if (i < in) {
		__mmask16 k = lb_tail_mask16(in - i);
		for (int r = 0; r < LB_MM_R; r++) wv[r] = bf16x16_avx512(_mm256_maskz_loadu_epi16(k, w[r] + 2 * i));
		for (int j = 0; j < nt; j++) {
			__m512 xv = _mm512_maskz_loadu_ps(k, x[j] + i);
			for (int r = 0; r < LB_MM_R; r++) acc[j][r] = _mm512_fmadd_ps(xv, wv[r], acc[j][r]);
		}
	}
	for (int j = 0; j < nt; j++)
		for (int r = 0; r < nr; r++) lb_mm_store(m, t + j, o + r * rs, lb_hsum_avx512(acc[j][r]));
}

LB_MM_ROWS(bf16_rows_avx512, LB_AVX512, bf16_tile_avx512, LB_MM_T)

LB_INLINE LB_AVX2 __m256 bf16x8_avx2(__m128i h) {
	return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

LB_INLINE LB_AVX2 void bf16_tile_avx2(const lb_mm *m, int64_t o, int nr, int64_t rs, int64_t t, const int nt) {
	const int64_t in = m->in;
	const uint8_t *w[LB_MM_R];
	for (int r = 0; r < LB_MM_R; r++) w[r] = m->w + 2 * (o + (r < nr ? r : 0) * rs) * in;
	const float *x[LB_MM_T];
	for (int j = 0; j < nt; j++) x[j] = m->x + (t + j) * in;
	__m256 acc[LB_MM_T][LB_MM_R], wv[LB_MM_R];
	for (int j = 0; j < nt; j++)
		for (int r = 0; r < LB_MM_R; r++) acc[j][r] = _mm256_setzero_ps();
	int64_t i = 0;
	for (; i + 8 <= in; i += 8) {
		for (int r = 0; r < LB_MM_R; r++) wv[r] = bf16x8_avx2(_mm_loadu_si128((const __m128i *)(w[r] + 2 * i)));
		for (int j = 0; j < nt; j++) {
			__m256 xv = _mm256_loadu_ps(x[j] + i);
			for (int r = 0; r < LB_MM_R; r++) acc[j][r] = _mm256_fmadd_ps(xv, wv[r], acc[j][r]);
		}
	}
	if (i < in) {
		__m256i k = lb_tail_mask8(in - i);
		for (int r = 0; r < LB_MM_R; r++) {
			uint16_t tail[8] = {0};
			memcpy(tail, w[r] + 2 * i, (size_t)(2 * (in - i)));
			wv[r] = bf16x8_avx2(_mm_loadu_si128((const __m128i *)tail));
		}
		for (int j = 0; j < nt; j++) {
			__m256 xv = _mm256_maskload_ps(x[j] + i, k);
			for (int r = 0; r < LB_MM_R; r++) acc[j][r] = _mm256_fmadd_ps(xv, wv[r], acc[j][r]);
		}
	}
	for (int j = 0; j < nt; j++)
		for (int r = 0; r < nr; r++) lb_mm_store(m, t + j, o + r * rs, lb_hsum_avx2(acc[j][r]));
}

LB_MM_ROWS(bf16_rows_avx2, LB_AVX2, bf16_tile_avx2, 2)
#endif

lb_mm_rows lb_mm_bf16_rows(int isa) {
#ifdef LB_X86
	if (isa == LB_ISA_AVX512) return bf16_rows_avx512;
	if (isa == LB_ISA_AVX2) return bf16_rows_avx2;
#endif
	(void)isa;
	return bf16_rows_generic;
}
