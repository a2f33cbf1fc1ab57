//go:build cgo

// matmul_nvfp4.c: the row kernels of MatMul for NVFP4 weights.
//
// Computes: y[t,o] = G · Σ_i x[t,i]·(e2m1(code[o,i])·S[o,i/16]) for rows
// [o0, o1) and every token, where S are the decoded E4M3 block scales
// (kernels.Weight.Scales) and G the global scale. The contract's w[o,i] is
// e2m1·S·G; e2m1·S is exact whenever S is an E4M3 value (2 × 4 significant
// bits), and G, common to the whole sum, is applied once at the end.
//
// Decoding: a 16-entry table of the E2M1 values. _avx512 widens 8 bytes to
// 8 qwords and ORs each with itself shifted left by 28, which leaves element
// 2i's code in the low nibble of dword 2i and element 2i+1's in dword 2i+1;
// vpermps reads only the low 4 bits of each index, so one permute of the
// table decodes 16 elements, one block. _avx2 does the same for 8 elements
// with an 8-entry magnitude table and ORs the sign (bit 3 of the nibble,
// moved to bit 31 by a shift of 28). _generic indexes the table per nibble.
//
// Layout: Data [out, in/2], element 2i in the low nibble of byte i, rows
// contiguous; Scales [out, in/16]; in is a multiple of 16.
//
// Variants and reduction order: as matmul_bf16.c (tiles of LB_MM_R rows ×
// LB_MM_T tokens, one accumulator of L lanes per output, element i in lane
// i mod L, pairwise final sum; L = 16, 8, 8 for _avx512, _avx2, _generic).
//
// Tested by TestMatMul, TestDecodeAllCodes, TestBatchInvariance and
// kerneltest; benchmarked by BenchmarkGEMV/nvfp4 and BenchmarkGEMM/nvfp4.
#include "internal.h"

static const float e2m1_values[16] = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
                                      -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};

LB_INLINE void nvfp4_tile_generic(const lb_mm *m, int64_t o, int nr, int64_t t, const int nt) {
	const int64_t in = m->in;
	const uint8_t *w[LB_MM_R];
	const float *s[LB_MM_R];
	for (int r = 0; r < LB_MM_R; r++) {
		int64_t row = o + (r < nr ? r : 0);
		w[r] = m->w + row * (in / 2);
		s[r] = m->ws + row * (in / 16);
	}
	const uint8_t *next = m->w + (o + LB_MM_R) * (in / 2);
	const uint8_t *next_s = (const uint8_t *)(m->ws + (o + LB_MM_R) * (in / 16));
	const float *x[LB_MM_T];
	for (int j = 0; j < nt; j++) x[j] = m->x + (t + j) * in;
	float acc[LB_MM_T][LB_MM_R][8];
	memset(acc, 0, sizeof acc);
	for (int64_t i = 0; i < in; i += 8) {
		lb_prefetch(next + 2 * i);
		lb_prefetch(next_s + i);
		float wv[LB_MM_R][8];
		for (int r = 0; r < LB_MM_R; r++) {
			float sc = s[r][i / 16];
			for (int l = 0; l < 8; l += 2) {
				uint8_t b = w[r][(i + l) / 2];
				wv[r][l] = e2m1_values[b & 15] * sc;
				wv[r][l + 1] = e2m1_values[b >> 4] * sc;
			}
		}
		for (int j = 0; j < nt; j++)
			for (int r = 0; r < LB_MM_R; r++)
				for (int l = 0; l < 8; l++) acc[j][r][l] += x[j][i + l] * wv[r][l];
	}
	for (int j = 0; j < nt; j++)
		for (int r = 0; r < nr; r++) lb_mm_store(m, t + j, o + r, lb_hsum8(acc[j][r]));
}

LB_MM_ROWS(nvfp4_rows_generic, , nvfp4_tile_generic, LB_MM_T)

#ifdef LB_X86
LB_INLINE LB_AVX512 __m512 e2m1x16_avx512(const uint8_t *p, __m512 table) {
	__m512i q = _mm512_cvtepu8_epi64(_mm_loadl_epi64((const __m128i *)p));
	q = _mm512_or_si512(q, _mm512_slli_epi64(q, 28));
	return _mm512_permutexvar_ps(q, table);
}

LB_INLINE LB_AVX512 void nvfp4_tile_avx512(const lb_mm *m, int64_t o, int nr, int64_t t, const int nt) {
	const int64_t in = m->in;
	const uint8_t *w[LB_MM_R];
	const float *s[LB_MM_R];
	for (int r = 0; r < LB_MM_R; r++) {
		int64_t row = o + (r < nr ? r : 0);
		w[r] = m->w + row * (in / 2);
		s[r] = m->ws + row * (in / 16);
	}
	const uint8_t *next = m->w + (o + LB_MM_R) * (in / 2);
	const uint8_t *next_s = (const uint8_t *)(m->ws + (o + LB_MM_R) * (in / 16));
	const float *x[LB_MM_T];
	for (int j = 0; j < nt; j++) x[j] = m->x + (t + j) * in;
	const __m512 table = _mm512_loadu_ps(e2m1_values);
	__m512 acc[LB_MM_T][LB_MM_R], wv[LB_MM_R];
	for (int j = 0; j < nt; j++)
		for (int r = 0; r < LB_MM_R; r++) acc[j][r] = _mm512_setzero_ps();
	for (int64_t i = 0, b = 0; i < in; i += 16, b++) {
		lb_prefetch(next + 2 * i);
		lb_prefetch(next_s + i);
		for (int r = 0; r < LB_MM_R; r++)
			wv[r] = _mm512_mul_ps(e2m1x16_avx512(w[r] + i / 2, table), _mm512_set1_ps(s[r][b]));
		for (int j = 0; j < nt; j++) {
			__m512 xv = _mm512_loadu_ps(x[j] + i);
			for (int r = 0; r < LB_MM_R; r++) acc[j][r] = _mm512_fmadd_ps(xv, wv[r], acc[j][r]);
		}
	}
	for (int j = 0; j < nt; j++)
		for (int r = 0; r < nr; r++) lb_mm_store(m, t + j, o + r, lb_hsum_avx512(acc[j][r]));
}

LB_MM_ROWS(nvfp4_rows_avx512, LB_AVX512, nvfp4_tile_avx512, LB_MM_T)

LB_INLINE LB_AVX2 __m256 e2m1x8_avx2(const uint8_t *p, __m256 mags) {
	uint32_t four;
	memcpy(&four, p, 4);
	__m256i q = _mm256_cvtepu8_epi64(_mm_cvtsi32_si128((int)four));
	q = _mm256_or_si256(q, _mm256_slli_epi64(q, 28));
	__m256 mag = _mm256_permutevar8x32_ps(mags, q);
	__m256i sign = _mm256_and_si256(_mm256_slli_epi32(q, 28), _mm256_set1_epi32((int)0x80000000u));
	return _mm256_or_ps(mag, _mm256_castsi256_ps(sign));
}

LB_INLINE LB_AVX2 void nvfp4_tile_avx2(const lb_mm *m, int64_t o, int nr, int64_t t, const int nt) {
	const int64_t in = m->in;
	const uint8_t *w[LB_MM_R];
	const float *s[LB_MM_R];
	for (int r = 0; r < LB_MM_R; r++) {
		int64_t row = o + (r < nr ? r : 0);
		w[r] = m->w + row * (in / 2);
		s[r] = m->ws + row * (in / 16);
	}
	const uint8_t *next = m->w + (o + LB_MM_R) * (in / 2);
	const uint8_t *next_s = (const uint8_t *)(m->ws + (o + LB_MM_R) * (in / 16));
	const float *x[LB_MM_T];
	for (int j = 0; j < nt; j++) x[j] = m->x + (t + j) * in;
	const __m256 mags = _mm256_loadu_ps(e2m1_values);
	__m256 acc[LB_MM_T][LB_MM_R], wv[LB_MM_R];
	for (int j = 0; j < nt; j++)
		for (int r = 0; r < LB_MM_R; r++) acc[j][r] = _mm256_setzero_ps();
	for (int64_t i = 0; i < in; i += 8) {
		lb_prefetch(next + 2 * i);
		lb_prefetch(next_s + i);
		for (int r = 0; r < LB_MM_R; r++)
			wv[r] = _mm256_mul_ps(e2m1x8_avx2(w[r] + i / 2, mags), _mm256_set1_ps(s[r][i / 16]));
		for (int j = 0; j < nt; j++) {
			__m256 xv = _mm256_loadu_ps(x[j] + i);
			for (int r = 0; r < LB_MM_R; r++) acc[j][r] = _mm256_fmadd_ps(xv, wv[r], acc[j][r]);
		}
	}
	for (int j = 0; j < nt; j++)
		for (int r = 0; r < nr; r++) lb_mm_store(m, t + j, o + r, lb_hsum_avx2(acc[j][r]));
}

LB_MM_ROWS(nvfp4_rows_avx2, LB_AVX2, nvfp4_tile_avx2, 2)
#endif

lb_mm_rows lb_mm_nvfp4_rows(int isa) {
#ifdef LB_X86
	if (isa == LB_ISA_AVX512) return nvfp4_rows_avx512;
	if (isa == LB_ISA_AVX2) return nvfp4_rows_avx2;
#endif
	(void)isa;
	return nvfp4_rows_generic;
}
