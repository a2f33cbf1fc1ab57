//go:build cgo

// matmul_nvfp4.c: the row kernels of MatMul for NVFP4 weights.
//
// Computes: y[t,o] = G · Σ_i x[t,i]·(e2m1(code[o,i])·S[o,i/16]) for rows
// [o0, o1) and every token, where S are the decoded E4M3 block scales
// (kernels.Weight.Scales) and G the global scale. The contract's w[o,i] is
// e2m1·S·G; e2m1·S is exact whenever S is an E4M3 value (2 × 4 significant
// bits), and G, common to the whole sum, is applied once at the end.
//
// Decoding: a 16-entry table of the E2M1 values. _avx512 decodes 128
// columns of a row at a time (below): four loads of its 64 code bytes from
// byte offsets 0..3, each also shifted right by 4, put one code in the low
// nibble of every dword, and vpermps reads only the low 4 bits of each
// index. Columns past the last 128 are decoded a block at a time: 8 bytes
// widened to 8 qwords and OR-ed with themselves shifted left by 28 leave
// element 2i's code in the low nibble of dword 2i and element 2i+1's in
// dword 2i+1. _avx2 does the latter for 8 elements with an 8-entry
// magnitude table and XORs in the nibble shifted left by 28 (its sign bit
// becomes bit 31; the table entries are pre-XOR-ed with their index << 28
// to cancel the rest). _generic indexes the table per nibble.
//
// Layout: Data [out, in/2], element 2i in the low nibble of byte i, rows
// contiguous; Scales [out, in/16]; in is a multiple of 16.
//
// Variants and reduction order: as matmul_bf16.c (tiles of LB_MM_R rows ×
// LB_MM_T tokens, one accumulator of L lanes per output, element i in lane
// i mod L, pairwise final sum; L = 8 for _avx2 and _generic); _avx512's
// lanes take 128-column chunks first, as nvfp4_chunk_avx512 says. The order
// depends on in alone, so tokens give the same bits alone or together.
//
// Tested by TestMatMul, TestDecodeAllCodes, TestBatchInvariance and
// kerneltest; benchmarked by BenchmarkGEMV/nvfp4, BenchmarkGEMVHuge,
// BenchmarkGEMVHot and BenchmarkGEMM/nvfp4.
#include "internal.h"

static const float e2m1_values[16] = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
                                      -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};

LB_INLINE void nvfp4_tile_generic(const lb_mm *m, int64_t o, int nr, int64_t rs, int64_t t, const int nt) {
	const int64_t in = m->in;
	const uint8_t *w[LB_MM_R];
	const float *s[LB_MM_R];
	for (int r = 0; r < LB_MM_R; r++) {
		int64_t row = o + (r < nr ? r : 0) * rs;
		w[r] = m->w + row * (in / 2);
		s[r] = m->ws + row * (in / 16);
	}
	const uint8_t *next = m->w + (o + LB_MM_AHEAD_NVFP4 * LB_MM_R) * (in / 2);
	const uint8_t *next_s = (const uint8_t *)(m->ws + (o + LB_MM_AHEAD_NVFP4 * LB_MM_R) * (in / 16));
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
		for (int r = 0; r < nr; r++) lb_mm_store(m, t + j, o + r * rs, lb_hsum8(acc[j][r]));
}

LB_MM_ROWS(nvfp4_rows_generic, , nvfp4_tile_generic, LB_MM_T)

#ifdef LB_X86
LB_INLINE LB_AVX512 __m512 e2m1x16_avx512(const uint8_t *p, __m512 table) {
	__m512i q = _mm512_cvtepu8_epi64(_mm_loadl_epi64((const __m128i *)p));
	q = _mm512_or_si512(q, _mm512_slli_epi64(q, 28));
	return _mm512_permutexvar_ps(q, table);
}

// lb_nvfp4_xt writes the 128-column chunks of each row of x in the order
// nvfp4_tile_avx512 reads them: vector k of a chunk (16 floats) holds its
// elements 8d + k, d = 0..15, the transpose of the chunk as 16 rows of 8.
// Three rounds of 8 two-source permutes do it: rows 4a..4a+3 for columns
// 0-3 and 4-7, then rows 8h..8h+7 for column pairs, then all 16 rows for
// one column. Columns past the last whole chunk are not written.
LB_AVX512 void lb_nvfp4_xt(float *xt, const float *x, int64_t T, int64_t in) {
	__m512i i1[2], i2[2], i3[2];
	for (int h = 0; h < 2; h++) {
		int a[16], b[16], c[16];
		for (int l = 0; l < 16; l++) {
			int j = l % 4, k = 4 * h + l / 4; // round 1: lane 4(k - 4h) + j, row j
			a[l] = (j / 2) * 16 + (j % 2) * 8 + k;
			int r = l % 8, kk = 2 * h + l / 8; // round 2: lane 8(kk - 2h) + r, row r, column kk of 0-3
			b[l] = (r / 4) * 16 + 4 * kk + r % 4;
			c[l] = (l / 8) * 16 + 8 * h + l % 8; // round 3: row l, column of parity h
		}
		i1[h] = _mm512_loadu_si512(a);
		i2[h] = _mm512_loadu_si512(b);
		i3[h] = _mm512_loadu_si512(c);
	}
	for (int64_t t = 0; t < T; t++)
		for (int64_t c = t * in; c + 128 <= (t + 1) * in; c += 128) {
			__m512 v[8], l1[8], l2[8];
			for (int m = 0; m < 8; m++) v[m] = _mm512_loadu_ps(x + c + 16 * m);
			for (int a = 0; a < 4; a++)
				for (int h = 0; h < 2; h++) l1[2 * a + h] = _mm512_permutex2var_ps(v[2 * a], i1[h], v[2 * a + 1]);
			// l1[2a + h]: rows 4a..4a+3, columns 4h..4h+3, lane 4(k - 4h) + row.
			for (int g = 0; g < 2; g++)
				for (int h = 0; h < 2; h++)
					for (int p = 0; p < 2; p++)
						l2[4 * g + 2 * h + p] =
						    _mm512_permutex2var_ps(l1[4 * g + h], i2[p], l1[4 * g + 2 + h]);
			// l2[4g + 2h + p]: rows 8g..8g+7, columns 4h + 2p, 4h + 2p + 1, lane 8(k % 2) + row.
			for (int k = 0; k < 8; k++)
				_mm512_storeu_ps(xt + c + 16 * k,
				                 _mm512_permutex2var_ps(l2[k / 2], i3[k % 2], l2[4 + k / 2]));
		}
}

// A 128-column chunk of a row is 64 bytes of codes: dword d of the 64 bytes
// loaded from byte q (q = 0..3) has in its low nibble element 8d + 2q and,
// shifted right by 4, element 8d + 2q + 1, and vpermps reads only the low 4
// bits of each index. So 4 loads, 4 shifts and 8 vpermps decode the chunk
// into 8 vectors with lane d on elements 8d..8d+7, all of one 16-element
// block (d / 2). Each token's part of the chunk is the sum of x·e2m1 over
// the 8 vectors in lane-wise FMAs, and one more FMA per chunk folds it into
// the accumulator times the lanes' block scales (8 loaded, each doubled), as
// the FP8 block scales are: 22 µops on the two vector ports for 128 weights
// of a row, against 32 a block at a time (index, vpermps, a multiply by the
// block's scale and an FMA per 16) and 48 with the widening of the tail.
// The activations come in the matching order, written once a call by
// lb_nvfp4_xt (lb_mm.xt).
//
// Reduction order: lane d of the accumulator takes the chunks' partial sums
// (elements 8d..8d+7 in order) in chunk order, then the elements of the
// columns past the last whole chunk, lane i mod 16, one block at a time;
// pairwise final sum. It depends on In only.
//
// nvfp4_chunk_avx512 adds the chunk at column i of the tile's rows to acc.
// The loads from bytes 1..3 of a row's last chunk would read past it, past
// the weight for its last row: with last set they mask those bytes off.
LB_INLINE LB_AVX512 void nvfp4_chunk_avx512(__m512 acc[LB_MM_T][LB_MM_R], const uint8_t *const w[LB_MM_R],
                                            const float *const s[LB_MM_R], const float *const xt[LB_MM_T],
                                            int64_t i, const int nt, const int last) {
	const __m512 table = _mm512_loadu_ps(e2m1_values);
	const __m512i twice = _mm512_set_epi32(7, 7, 6, 6, 5, 5, 4, 4, 3, 3, 2, 2, 1, 1, 0, 0);
	const __mmask64 keep = ~(__mmask64)0 >> 3;
	__m512 part[LB_MM_T];
	for (int r = 0; r < LB_MM_R; r++) {
		const uint8_t *b = w[r] + i / 2;
		for (int q = 0; q < 4; q++) {
			__m512i lo = last && q ? _mm512_maskz_loadu_epi8(keep, b + q) : _mm512_loadu_si512(b + q);
			__m512 e0 = _mm512_permutexvar_ps(lo, table);
			__m512 e1 = _mm512_permutexvar_ps(_mm512_srli_epi32(lo, 4), table);
			for (int j = 0; j < nt; j++) {
				const float *xc = xt[j] + i + 32 * q;
				part[j] = q ? _mm512_fmadd_ps(_mm512_loadu_ps(xc), e0, part[j]) : _mm512_mul_ps(_mm512_loadu_ps(xc), e0);
				part[j] = _mm512_fmadd_ps(_mm512_loadu_ps(xc + 16), e1, part[j]);
			}
		}
		__m512 sc = _mm512_permutexvar_ps(twice, _mm512_castps256_ps512(_mm256_loadu_ps(s[r] + i / 16)));
		for (int j = 0; j < nt; j++) acc[j][r] = _mm512_fmadd_ps(part[j], sc, acc[j][r]);
	}
}

LB_INLINE LB_AVX512 void nvfp4_tile_avx512(const lb_mm *m, int64_t o, int nr, int64_t rs, int64_t t, const int nt) {
	const int64_t in = m->in, chunks = in & ~(int64_t)127;
	const uint8_t *w[LB_MM_R];
	const float *s[LB_MM_R];
	for (int r = 0; r < LB_MM_R; r++) {
		int64_t row = o + (r < nr ? r : 0) * rs;
		w[r] = m->w + row * (in / 2);
		s[r] = m->ws + row * (in / 16);
	}
	const uint8_t *next = m->w + (o + LB_MM_AHEAD_NVFP4 * LB_MM_R) * (in / 2);
	const uint8_t *next_s = (const uint8_t *)(m->ws + (o + LB_MM_AHEAD_NVFP4 * LB_MM_R) * (in / 16));
	const float *x[LB_MM_T], *xt[LB_MM_T];
	for (int j = 0; j < nt; j++) {
		x[j] = m->x + (t + j) * in;
		xt[j] = m->xt + (t + j) * in;
	}
	__m512 acc[LB_MM_T][LB_MM_R];
	for (int j = 0; j < nt; j++)
		for (int r = 0; r < LB_MM_R; r++) acc[j][r] = _mm512_setzero_ps();
	int64_t i = 0;
	for (; i < chunks; i += 128) {
		// These rows' codes 512 bytes (1,024 weights) ahead into L1; the
		// hardware prefetchers bring them from memory. Asking for the tile
		// LB_MM_AHEAD_NVFP4 on into L2 as well, as the generic and AVX2
		// paths do, took Qwen3-0.6B NVFP4 decode from 0.53 of the paired
		// roofline to 0.49 (medians of 6 alternating runs, Zen 5 VM,
		// 2026-12-03).
		for (int r = 0; r < LB_MM_R; r++) lb_prefetch(w[r] + i / 2 + 512);
		if (i + 128 < in)
			nvfp4_chunk_avx512(acc, w, s, xt, i, nt, 0);
		else
			nvfp4_chunk_avx512(acc, w, s, xt, i, nt, 1);
	}
	const __m512 table = _mm512_loadu_ps(e2m1_values);
	for (; i < in; i += 16) {
		lb_prefetch(next + 2 * i);
		lb_prefetch(next_s + i);
		__m512 wv[LB_MM_R];
		for (int r = 0; r < LB_MM_R; r++)
			wv[r] = _mm512_mul_ps(e2m1x16_avx512(w[r] + i / 2, table), _mm512_set1_ps(s[r][i / 16]));
		for (int j = 0; j < nt; j++) {
			__m512 xv = _mm512_loadu_ps(x[j] + i);
			for (int r = 0; r < LB_MM_R; r++) acc[j][r] = _mm512_fmadd_ps(xv, wv[r], acc[j][r]);
		}
	}
	for (int j = 0; j < nt; j++)
		for (int r = 0; r < nr; r++) lb_mm_store(m, t + j, o + r * rs, lb_hsum_avx512(acc[j][r]));
}

LB_MM_ROWS(nvfp4_rows_avx512, LB_AVX512, nvfp4_tile_avx512, LB_MM_T)


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

LB_INLINE LB_AVX2 void nvfp4_tile_avx2(const lb_mm *m, int64_t o, int nr, int64_t rs, int64_t t, const int nt) {
	const int64_t in = m->in;
	const uint8_t *w[LB_MM_R];
	const float *s[LB_MM_R];
	for (int r = 0; r < LB_MM_R; r++) {
		int64_t row = o + (r < nr ? r : 0) * rs;
		w[r] = m->w + row * (in / 2);
		s[r] = m->ws + row * (in / 16);
	}
	const uint8_t *next = m->w + (o + LB_MM_AHEAD_NVFP4 * LB_MM_R) * (in / 2);
	const uint8_t *next_s = (const uint8_t *)(m->ws + (o + LB_MM_AHEAD_NVFP4 * LB_MM_R) * (in / 16));
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
		for (int r = 0; r < nr; r++) lb_mm_store(m, t + j, o + r * rs, lb_hsum_avx2(acc[j][r]));
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
