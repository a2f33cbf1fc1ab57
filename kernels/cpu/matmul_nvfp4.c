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
// with an 8-entry magnitude table and XORs in the nibble shifted left by 28
// (its sign bit becomes bit 31; the table entries are pre-XOR-ed with their
// index << 28 to cancel the rest). _avx512vbmi, chosen over _avx512 where
// the CPU has VBMI, gets the same indices from one vpmultishiftqb of the
// block's 8 bytes broadcast to every qword. _generic indexes the table per
// nibble.
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

// _avx512vbmi (AVX-512 with VBMI, e.g. Ice Lake, Zen 4) decodes the same
// values with fewer instructions: the block's 8 bytes broadcast to every
// qword (a load), one vpmultishiftqb moving nibble k (bits 4k..4k+3) to the
// low bits of dword k, and the vpermps above (low 4 bits of each index).
// Everything else, the reduction order included, is _avx512's, so the two
// give bit-identical results.

// A full tile (full = 1) addresses row r's codes and scales as one moving
// base plus r times the row stride, which keeps the loop's pointers in
// registers; a partial one (full = 0) uses per-row offsets, its missing
// rows repeating row 0 as in the other paths.
LB_INLINE LB_AVX512VBMI void nvfp4_tile_avx512vbmi_(const lb_mm *m, int64_t o, int nr, int64_t t, const int nt,
                                                    const int full) {
	const int64_t in = m->in;
	const int64_t rs = in / 2, ss = in / 16;
	int64_t ro[LB_MM_R], so[LB_MM_R];
	for (int r = 0; r < LB_MM_R; r++) {
		int64_t rr = full ? r : (r < nr ? r : 0);
		ro[r] = rr * rs;
		so[r] = rr * ss;
	}
	const uint8_t *wb = m->w + o * rs;
	const float *sb = m->ws + o * ss;
	const uint8_t *next = m->w + (o + LB_MM_R) * rs;
	const uint8_t *next_s = (const uint8_t *)(m->ws + (o + LB_MM_R) * ss);
	const float *x[LB_MM_T];
	for (int j = 0; j < nt; j++) x[j] = m->x + (t + j) * in;
	const __m512 table = _mm512_loadu_ps(e2m1_values);
	// Byte 0 of dword 2q takes bits 8q.., byte 0 of dword 2q+1 bits 8q+4..
	// (qword q); the other bytes are ignored by vpermps.
	const __m512i ctrl = _mm512_set_epi64(0x3C3C3C3C38383838LL, 0x3434343430303030LL, 0x2C2C2C2C28282828LL,
	                                      0x2424242420202020LL, 0x1C1C1C1C18181818LL, 0x1414141410101010LL,
	                                      0x0C0C0C0C08080808LL, 0x0404040400000000LL);
	__m512 acc[LB_MM_T][LB_MM_R], wv[LB_MM_R];
	for (int j = 0; j < nt; j++)
		for (int r = 0; r < LB_MM_R; r++) acc[j][r] = _mm512_setzero_ps();
	for (int64_t i = 0; i < in; i += 16, wb += 8, sb++) {
		lb_prefetch(next + 2 * i);
		lb_prefetch(next_s + i);
		for (int r = 0; r < LB_MM_R; r++) {
			int64_t q;
			memcpy(&q, wb + (full ? r * rs : ro[r]), 8);
			__m512i idx = _mm512_multishift_epi64_epi8(ctrl, _mm512_set1_epi64(q));
			wv[r] = _mm512_mul_ps(_mm512_permutexvar_ps(idx, table), _mm512_set1_ps(sb[full ? r * ss : so[r]]));
		}
		for (int j = 0; j < nt; j++) {
			__m512 xv = _mm512_loadu_ps(x[j] + i);
			for (int r = 0; r < LB_MM_R; r++) acc[j][r] = _mm512_fmadd_ps(xv, wv[r], acc[j][r]);
		}
	}
	for (int j = 0; j < nt; j++)
		for (int r = 0; r < nr; r++) lb_mm_store(m, t + j, o + r, lb_hsum_avx512(acc[j][r]));
}

LB_INLINE LB_AVX512VBMI void nvfp4_tile_avx512vbmi(const lb_mm *m, int64_t o, int nr, int64_t t, const int nt) {
	if (nr == LB_MM_R)
		nvfp4_tile_avx512vbmi_(m, o, nr, t, nt, 1);
	else
		nvfp4_tile_avx512vbmi_(m, o, nr, t, nt, 0);
}

LB_MM_ROWS(nvfp4_rows_avx512vbmi, LB_AVX512VBMI, nvfp4_tile_avx512vbmi, LB_MM_T)

LB_INLINE LB_AVX2 __m256 e2m1x8_avx2(const uint8_t *p, __m256 mags_x) {
	uint32_t four;
	memcpy(&four, p, 4);
	__m256i q = _mm256_cvtepu8_epi64(_mm_cvtsi32_si128((int)four));
	q = _mm256_or_si256(q, _mm256_slli_epi64(q, 28));
	// q << 28 holds the nibble in bits 28..31 and zeros below; mags_x holds
	// each magnitude XOR-ed with its own index << 28, so XOR-ing the two
	// leaves the magnitude with the nibble's sign bit as bit 31.
	__m256 mag = _mm256_permutevar8x32_ps(mags_x, q);
	return _mm256_xor_ps(mag, _mm256_castsi256_ps(_mm256_slli_epi32(q, 28)));
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
	const __m256 mags = _mm256_xor_ps(_mm256_loadu_ps(e2m1_values),
	                                  _mm256_castsi256_ps(_mm256_setr_epi32(0, 1 << 28, 2 << 28, 3 << 28, 4 << 28,
	                                                                        5 << 28, 6 << 28, 7 << 28)));
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
	if (isa == LB_ISA_AVX512) return lb_vbmi() ? nvfp4_rows_avx512vbmi : nvfp4_rows_avx512;
	if (isa == LB_ISA_AVX2) return nvfp4_rows_avx2;
#endif
	(void)isa;
	return nvfp4_rows_generic;
}
