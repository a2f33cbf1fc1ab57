//go:build cgo

// matmul_fp8.c: the row kernels of MatMul for FP8 (E4M3) weights, with one
// scale per row (WeightFP8Channel), per tensor (WeightFP8Tensor) or per
// 128×128 block (WeightFP8Block).
//
// Computes: y[t,o] = Σ_i x[t,i]·w[o,i] for rows [o0, o1) and every token,
// with w[o,i] = e4m3(code)·scale, the scales applied where they are common
// to a part of the sum rather than to each weight (decoding, not memory,
// limits FP8 decode, and a multiply per weight costs a quarter of it):
//   per row or per tensor: y = (Σ_i x·e4m3(code))·scale;
//   128×128 blocks:        y = Σ_c s_c·(Σ_{i in chunk c} x·e4m3(code)), each
//                          128-column chunk's partial sum folded in with one
//                          FMA, as block-scaled GEMMs on GPUs do.
// Both differ from multiplying each weight by its scale only by float32
// rounding (kerneltest's MatMul tolerance allows for it).
//
// Decoding is exact for all 256 codes, NaNs (0x7F, 0xFF) included. _generic
// reads a 256-entry table. The SIMD paths move the code's bits into an IEEE
// half, whose exponent field is one bit wider with bias 15 instead of 7:
// sign-extended code << 7, masked to 0xBF80, is the half of value·2^-8, E4M3
// subnormals becoming half subnormals; only code 0x7F has all seven low bits
// set, so adding 0x80 carries into bit 14 exactly for the NaNs, and OR-ing
// that carry in gives the half an all-ones exponent (NaN; _avx512 does the
// mask, the carry and the OR in one vpternlogd). vcvtph2ps widens
// exactly, and the 2^-8 is folded into the scale (scale·256 is exact):
// products and sums of value·2^-8 round like those of value, scaled by a
// power of two.
//
// Layout: Data [out, in] one code per byte, row-major; Scales per the
// format (kernels.Weight); x [T, in], y [T, out].
//
// Variants and reduction order: as matmul_bf16.c (tiles of LB_MM_R rows ×
// LB_MM_T tokens, one accumulator of L lanes per output, element i in lane
// i mod L, pairwise final sum; L = 16, 8, 8 for _avx512, _avx2, _generic),
// with block chunks summed lane-wise into fresh partials first.
// _avx512vbmi, chosen over _avx512 where the CPU has VBMI, decodes through
// byte tables instead (below) and is otherwise _avx512, bit for bit; for
// FP8 activations per token or per tensor, _avx512bf16 (where the CPU also
// has AVX512_BF16) multiplies its BF16 words with vdpbf16ps, again bit for
// bit.
//
// Tested by TestMatMul, TestDecodeAllCodes, TestBatchInvariance,
// TestVBMIBitIdentical and kerneltest; benchmarked by BenchmarkGEMV/fp8-*,
// BenchmarkGEMVHot and BenchmarkGEMM/fp8-*.
#include <math.h>
#include <pthread.h>

#include "internal.h"

static float e4m3_table[256];
// The BF16 bytes of value·2^-8 for the 128 magnitudes, high (sign cleared)
// and low, for _avx512vbmi.
static uint8_t e4m3_bf16_hi[128] __attribute__((aligned(64)));
static uint8_t e4m3_bf16_lo[128] __attribute__((aligned(64)));
static pthread_once_t e4m3_once = PTHREAD_ONCE_INIT;

static void e4m3_init(void) {
	for (int c = 0; c < 256; c++) {
		int mag = c & 0x7F;
		float v;
		if (mag == 0x7F)
			v = NAN;
		else if (mag < 8)
			v = ldexpf((float)mag, -9);
		else
			v = ldexpf((float)(8 | (mag & 7)), (mag >> 3) - 10);
		e4m3_table[c] = c & 0x80 ? -v : v;
	}
	for (int c = 0; c < 128; c++) {
		uint32_t u;
		float v = ldexpf(e4m3_table[c], -8);
		memcpy(&u, &v, 4);
		e4m3_bf16_hi[c] = (uint8_t)(u >> 24);
		e4m3_bf16_lo[c] = (uint8_t)(u >> 16);
	}
}

// fp8_scales points sp[r] at the first scale of each tile row and returns
// the step between the scales of consecutive 128-column chunks: 1 for
// blocks, 0 for a row or tensor scale, which the tiles apply at the end.
LB_INLINE int64_t fp8_scales(const lb_mm *m, int64_t o, int nr, int64_t rs, const float *sp[LB_MM_R]) {
	for (int r = 0; r < LB_MM_R; r++) {
		int64_t row = o + (r < nr ? r : 0) * rs;
		switch (m->fmt) {
		case LB_W_FP8_TENSOR:
			sp[r] = m->ws;
			break;
		case LB_W_FP8_CHANNEL:
			sp[r] = m->ws + row;
			break;
		default:
			sp[r] = m->ws + (row / 128) * ((m->in + 127) / 128);
		}
	}
	return m->fmt == LB_W_FP8_BLOCK;
}

// Each path has a span function that accumulates x·value over columns
// [i, end) of the tile's rows into acc (one accumulator per token and row),
// and a tile that calls it once for the whole row (row or tensor scale) or
// once per 128-column chunk into fresh partial sums, which it then folds
// into acc times the chunk's scale.

LB_INLINE void fp8_span_generic(float acc[LB_MM_T][LB_MM_R][8], const uint8_t *const w[LB_MM_R],
                                const float *const x[LB_MM_T], int64_t i, int64_t end, const int nt) {
	for (; i + 8 <= end; i += 8) {
		float wv[LB_MM_R][8];
		for (int r = 0; r < LB_MM_R; r++)
			for (int l = 0; l < 8; l++) wv[r][l] = e4m3_table[w[r][i + l]];
		for (int j = 0; j < nt; j++)
			for (int r = 0; r < LB_MM_R; r++)
				for (int l = 0; l < 8; l++) acc[j][r][l] += x[j][i + l] * wv[r][l];
	}
	for (int l = 0; i + l < end; l++)
		for (int r = 0; r < LB_MM_R; r++) {
			float wv = e4m3_table[w[r][i + l]];
			for (int j = 0; j < nt; j++) acc[j][r][l] += x[j][i + l] * wv;
		}
}

LB_INLINE void fp8_tile_generic(const lb_mm *m, int64_t o, int nr, int64_t rs, int64_t t, const int nt) {
	const int64_t in = m->in;
	const uint8_t *w[LB_MM_R];
	const float *sp[LB_MM_R];
	for (int r = 0; r < LB_MM_R; r++) w[r] = m->w + (o + (r < nr ? r : 0) * rs) * in;
	int64_t step = fp8_scales(m, o, nr, rs, sp);
	const float *x[LB_MM_T];
	for (int j = 0; j < nt; j++) x[j] = m->x + (t + j) * in;
	float acc[LB_MM_T][LB_MM_R][8];
	memset(acc, 0, sizeof acc);
	if (step) {
		for (int64_t c = 0, i = 0; i < in; c++, i += 128) {
			float part[LB_MM_T][LB_MM_R][8];
			memset(part, 0, sizeof part);
			fp8_span_generic(part, w, x, i, i + 128 < in ? i + 128 : in, nt);
			for (int j = 0; j < nt; j++)
				for (int r = 0; r < LB_MM_R; r++)
					for (int l = 0; l < 8; l++) acc[j][r][l] += part[j][r][l] * sp[r][c];
		}
	} else {
		fp8_span_generic(acc, w, x, 0, in, nt);
	}
	for (int j = 0; j < nt; j++)
		for (int r = 0; r < nr; r++) lb_mm_store(m, t + j, o + r * rs, lb_hsum8(acc[j][r]) * (step ? 1.0f : *sp[r]));
}

LB_MM_ROWS(fp8_rows_generic, , fp8_tile_generic, LB_MM_T)

#ifdef LB_X86
LB_INLINE LB_AVX512 void fp8_span_avx512(__m512 acc[LB_MM_T][LB_MM_R], const uint8_t *const w[LB_MM_R],
                                         const float *const x[LB_MM_T], const uint32_t *const xb[LB_MM_T], int64_t i,
                                         int64_t end, const int nt) {
	(void)xb;
	__m512 wv[LB_MM_R];
	for (; i + 16 <= end; i += 16) {
		for (int r = 0; r < LB_MM_R; r++) wv[r] = lb_e4m3x16_avx512(_mm_loadu_si128((const __m128i *)(w[r] + i)));
		for (int j = 0; j < nt; j++) {
			__m512 xv = _mm512_loadu_ps(x[j] + i);
			for (int r = 0; r < LB_MM_R; r++) acc[j][r] = _mm512_fmadd_ps(xv, wv[r], acc[j][r]);
		}
	}
	if (i < end) {
		__mmask16 k = lb_tail_mask16(end - i);
		for (int r = 0; r < LB_MM_R; r++) wv[r] = lb_e4m3x16_avx512(_mm_maskz_loadu_epi8(k, w[r] + i));
		for (int j = 0; j < nt; j++) {
			__m512 xv = _mm512_maskz_loadu_ps(k, x[j] + i);
			for (int r = 0; r < LB_MM_R; r++) acc[j][r] = _mm512_fmadd_ps(xv, wv[r], acc[j][r]);
		}
	}
}

// FP8_TILE_AVX512 defines the AVX-512 tile around a span function, so that
// the plain and the VBMI variants share everything but the span.
#define FP8_TILE_AVX512(name, attr, span)                                                                        \
	LB_INLINE attr void name(const lb_mm *m, int64_t o, int nr, int64_t rs, int64_t t, const int nt) {                      \
		const int64_t in = m->in;                                                                          \
		const uint8_t *w[LB_MM_R];                                                                         \
		const float *sp[LB_MM_R];                                                                          \
		for (int r = 0; r < LB_MM_R; r++) w[r] = m->w + (o + (r < nr ? r : 0) * rs) * in;                      \
		int64_t step = fp8_scales(m, o, nr, rs, sp);                                                           \
		const float *x[LB_MM_T];                                                                           \
		const uint32_t *xb[LB_MM_T];                                                                       \
		for (int j = 0; j < nt; j++) {                                                                     \
			x[j] = m->x + (t + j) * in;                                                                \
			xb[j] = m->xb ? m->xb + (t + j) * (in / 64) * 32 : NULL;                                   \
		}                                                                                                  \
		__m512 acc[LB_MM_T][LB_MM_R];                                                                      \
		for (int j = 0; j < nt; j++)                                                                       \
			for (int r = 0; r < LB_MM_R; r++) acc[j][r] = _mm512_setzero_ps();                         \
		if (step) {                                                                                        \
			for (int64_t c = 0, i = 0; i < in; c++, i += 128) {                                        \
				__m512 part[LB_MM_T][LB_MM_R];                                                     \
				for (int j = 0; j < nt; j++)                                                       \
					for (int r = 0; r < LB_MM_R; r++) part[j][r] = _mm512_setzero_ps();        \
				span(part, w, x, xb, i, i + 128 < in ? i + 128 : in, nt);                    \
				for (int r = 0; r < LB_MM_R; r++) {                                                \
					__m512 sc = _mm512_set1_ps(sp[r][c] * 256.0f);                             \
					for (int j = 0; j < nt; j++) acc[j][r] = _mm512_fmadd_ps(part[j][r], sc, acc[j][r]); \
				}                                                                                  \
			}                                                                                          \
		} else {                                                                                           \
			span(acc, w, x, xb, 0, in, nt);                                                      \
		}                                                                                                  \
		for (int j = 0; j < nt; j++)                                                                       \
			for (int r = 0; r < nr; r++)                                                               \
				lb_mm_store(m, t + j, o + r * rs, lb_hsum_avx512(acc[j][r]) * (step ? 1.0f : *sp[r] * 256.0f)); \
	}

FP8_TILE_AVX512(fp8_tile_avx512, LB_AVX512, fp8_span_avx512)
LB_MM_ROWS(fp8_rows_avx512, LB_AVX512, fp8_tile_avx512, LB_MM_T)

// The VBMI variant decodes 64 codes of a row at a time through BF16: two
// 128-entry byte tables (vpermi2b) give the high byte (sign OR-ed in from
// the code) and the low byte of value·2^-8 as BF16 (exact: E4M3 has 4
// significant bits and BF16 8, subnormals included, NaN codes give NaN);
// interleaving them makes BF16 words, and a 16-bit shift or a mask of each
// dword makes a float32 of the even or of the odd word. The codes are first
// permuted (vpermb) so that the four float vectors hold elements 0-15,
// 16-31, 32-47 and 48-63: the values, lanes and order of the FMAs are the
// plain variant's, and so are the results, bit for bit. Per 64 codes: 14
// µops on the two vector ports against 24 (16 codes: sign-extend, shift,
// add, ternary op, and vcvtph2ps's two).
static const uint8_t e4m3_bf16_perm[64] __attribute__((aligned(64))) = {
    0,  16, 1,  17, 2,  18, 3,  19, 32, 48, 33, 49, 34, 50, 35, 51, 4,  20, 5,  21, 6,  22,
    7,  23, 36, 52, 37, 53, 38, 54, 39, 55, 8,  24, 9,  25, 10, 26, 11, 27, 40, 56, 41, 57,
    42, 58, 43, 59, 12, 28, 13, 29, 14, 30, 15, 31, 44, 60, 45, 61, 46, 62, 47, 63};

// The byte tables of the BF16 decoding, in registers.
typedef struct {
	__m512i hi0, hi1, lo0, lo1, sign;
} e4m3_bf16_tables;

LB_INLINE LB_AVX512VBMI e4m3_bf16_tables e4m3_bf16_load(void) {
	e4m3_bf16_tables t = {_mm512_load_si512(e4m3_bf16_hi), _mm512_load_si512(e4m3_bf16_hi + 64),
	                      _mm512_load_si512(e4m3_bf16_lo), _mm512_load_si512(e4m3_bf16_lo + 64),
	                      _mm512_set1_epi8((char)0x80)};
	return t;
}

// e4m3_bf16_words decodes the 64 codes at p, permuted by perm, into the
// BF16 words of value·2^-8: w0 from bytes 0-7 of each 16-byte lane of the
// permuted codes, w1 from bytes 8-15.
LB_INLINE LB_AVX512VBMI void e4m3_bf16_words(const e4m3_bf16_tables *t, __m512i perm, const uint8_t *p, __m512i *w0,
                                             __m512i *w1) {
	__m512i c = _mm512_permutexvar_epi8(perm, _mm512_loadu_si512(p));
	// h | (c & sign): imm 0xF8.
	__m512i h = _mm512_ternarylogic_epi32(_mm512_permutex2var_epi8(t->hi0, c, t->hi1), c, t->sign, 0xF8);
	__m512i l = _mm512_permutex2var_epi8(t->lo0, c, t->lo1);
	*w0 = _mm512_unpacklo_epi8(l, h);
	*w1 = _mm512_unpackhi_epi8(l, h);
}

LB_INLINE LB_AVX512VBMI void fp8_span_avx512vbmi(__m512 acc[LB_MM_T][LB_MM_R], const uint8_t *const w[LB_MM_R],
                                                 const float *const x[LB_MM_T], const uint32_t *const xb[LB_MM_T],
                                                 int64_t i, int64_t end, const int nt) {
	const e4m3_bf16_tables tab = e4m3_bf16_load();
	const __m512i perm = _mm512_load_si512(e4m3_bf16_perm), high = _mm512_set1_epi32((int)0xFFFF0000u);
	for (; i + 64 <= end; i += 64) {
		// These rows' codes 1 KiB ahead into L1; the hardware prefetchers
		// bring them from memory. On the Zen 5 VM of 2026-12-03 (C calls
		// of lb_matmul in a decode step's order, interleaved), without the
		// L1 prefetch 0.68 of the bandwidth probe, with it 0.75-0.80, and
		// 0.64-0.68 when the tile LB_MM_R rows on was also asked into L2.
		for (int r = 0; r < LB_MM_R; r++) lb_prefetch(w[r] + i + 1024);
		for (int r = 0; r < LB_MM_R; r++) {
			__m512i w0, w1;
			e4m3_bf16_words(&tab, perm, w[r] + i, &w0, &w1);
			__m512 f[4] = {_mm512_castsi512_ps(_mm512_slli_epi32(w0, 16)),
			               _mm512_castsi512_ps(_mm512_and_si512(w0, high)),
			               _mm512_castsi512_ps(_mm512_slli_epi32(w1, 16)),
			               _mm512_castsi512_ps(_mm512_and_si512(w1, high))};
			for (int j = 0; j < nt; j++)
				for (int k = 0; k < 4; k++)
					acc[j][r] = _mm512_fmadd_ps(_mm512_loadu_ps(x[j] + i + 16 * k), f[k], acc[j][r]);
		}
	}
	fp8_span_avx512(acc, w, x, xb, i, end, nt);
}

FP8_TILE_AVX512(fp8_tile_avx512vbmi, LB_AVX512VBMI, fp8_span_avx512vbmi)
LB_MM_ROWS(fp8_rows_avx512vbmi, LB_AVX512VBMI, fp8_tile_avx512vbmi, LB_MM_T)

// The AVX512_BF16 variant, for FP8 activations (per token or per tensor:
// their effective values are E4M3 values, exact in BF16), decodes the codes
// as the VBMI variant does and multiplies the BF16 words by the activations
// as BF16 with vdpbf16ps, which adds to float32 lane d the product of the
// dword's odd (high) words and then that of its even words, each product
// exact (4 × 4 significant bits) and each sum rounded to nearest even, as
// an FMA rounds. With e4m3_bf16_perm's pairs swapped, dword d of the first
// vector holds element d in its high word and element 16 + d in its low
// word, so lane d adds elements d, 16 + d, 32 + d, 48 + d in that order:
// the VBMI variant's FMAs, bit for bit (no product or partial sum is a
// float32 subnormal, which vdpbf16ps would flush: all are multiples of
// 2^-26). Per 64 codes of a row: 6 µops of decoding and one vdpbf16ps per
// 32 codes and token, against 10 and one FMA per 16 (the widening to float32
// and twice the FMAs). The activations come as BF16 pairs in the matching
// order, written once a call by lb_fp8_xb (lb_mm.xb).
static const uint8_t e4m3_bf16_perm_dp[64] __attribute__((aligned(64))) = {
    16, 0,  17, 1,  18, 2,  19, 3,  48, 32, 49, 33, 50, 34, 51, 35, 20, 4,  21, 5,  22, 6,
    23, 7,  52, 36, 53, 37, 54, 38, 55, 39, 24, 8,  25, 9,  26, 10, 27, 11, 56, 40, 57, 41,
    58, 42, 59, 43, 28, 12, 29, 13, 30, 14, 31, 15, 60, 44, 61, 45, 62, 46, 63, 47};

// bf16_exact returns the BF16 word of f, exact where f is an E4M3 value; a
// NaN stays a NaN (its payload may sit in the low half alone).
static inline uint32_t bf16_exact(float f) {
	uint32_t u;
	memcpy(&u, &f, 4);
	if ((u & 0x7FFFFFFFu) > 0x7F800000u) return (u >> 16) | 0x40u;
	return u >> 16;
}

void lb_fp8_xb(uint32_t *xb, const float *x, int64_t T, int64_t in) {
	int64_t groups = in / 64;
	for (int64_t t = 0; t < T; t++)
		for (int64_t g = 0; g < groups; g++) {
			const float *v = x + t * in + 64 * g;
			uint32_t *o = xb + (t * groups + g) * 32;
			for (int d = 0; d < 16; d++) {
				o[d] = bf16_exact(v[16 + d]) | bf16_exact(v[d]) << 16;
				o[16 + d] = bf16_exact(v[48 + d]) | bf16_exact(v[32 + d]) << 16;
			}
		}
}

// The span reads the activations' BF16 pairs from xb (lb_mm.xb, token j's
// row at xb[j]) for whole groups of 64 and x (float32) for the tail.
LB_INLINE LB_AVX512VBMIBF16 void fp8_span_avx512bf16(__m512 acc[LB_MM_T][LB_MM_R], const uint8_t *const w[LB_MM_R],
                                                     const float *const x[LB_MM_T],
                                                     const uint32_t *const xb[LB_MM_T], int64_t i, int64_t end,
                                                     const int nt) {
	const e4m3_bf16_tables tab = e4m3_bf16_load();
	const __m512i perm = _mm512_load_si512(e4m3_bf16_perm_dp);
	for (; i + 64 <= end; i += 64) {
		for (int r = 0; r < LB_MM_R; r++) lb_prefetch(w[r] + i + 1024);
		for (int r = 0; r < LB_MM_R; r++) {
			__m512i w0, w1;
			e4m3_bf16_words(&tab, perm, w[r] + i, &w0, &w1);
			for (int j = 0; j < nt; j++) {
				const uint32_t *xv = xb[j] + i / 2;
				acc[j][r] = _mm512_dpbf16_ps(acc[j][r], (__m512bh)_mm512_loadu_si512(xv), (__m512bh)w0);
				acc[j][r] = _mm512_dpbf16_ps(acc[j][r], (__m512bh)_mm512_loadu_si512(xv + 16), (__m512bh)w1);
			}
		}
	}
	fp8_span_avx512(acc, w, x, xb, i, end, nt);
}

FP8_TILE_AVX512(fp8_tile_avx512bf16, LB_AVX512VBMIBF16, fp8_span_avx512bf16)
LB_MM_ROWS(fp8_rows_avx512bf16, LB_AVX512VBMIBF16, fp8_tile_avx512bf16, LB_MM_T)

// e4m3x8_avx2 decodes the 8 codes in the low half of b to value·2^-8.
LB_INLINE LB_AVX2 __m256 e4m3x8_avx2(__m128i b) {
	__m128i h = _mm_and_si128(_mm_slli_epi16(_mm_cvtepi8_epi16(b), 7), _mm_set1_epi16((short)0xBF80));
	__m128i nan = _mm_and_si128(_mm_add_epi16(h, _mm_set1_epi16(0x80)), _mm_set1_epi16(0x4000));
	return _mm256_cvtph_ps(_mm_or_si128(h, nan));
}

LB_INLINE LB_AVX2 void fp8_span_avx2(__m256 acc[LB_MM_T][LB_MM_R], const uint8_t *const w[LB_MM_R],
                                     const float *const x[LB_MM_T], int64_t i, int64_t end, const int nt) {
	__m256 wv[LB_MM_R];
	for (; i + 8 <= end; i += 8) {
		for (int r = 0; r < LB_MM_R; r++) wv[r] = e4m3x8_avx2(_mm_loadl_epi64((const __m128i *)(w[r] + i)));
		for (int j = 0; j < nt; j++) {
			__m256 xv = _mm256_loadu_ps(x[j] + i);
			for (int r = 0; r < LB_MM_R; r++) acc[j][r] = _mm256_fmadd_ps(xv, wv[r], acc[j][r]);
		}
	}
	if (i < end) {
		__m256i k = lb_tail_mask8(end - i);
		for (int r = 0; r < LB_MM_R; r++) {
			uint8_t tail[16] = {0};
			memcpy(tail, w[r] + i, (size_t)(end - i));
			wv[r] = e4m3x8_avx2(_mm_loadl_epi64((const __m128i *)tail));
		}
		for (int j = 0; j < nt; j++) {
			__m256 xv = _mm256_maskload_ps(x[j] + i, k);
			for (int r = 0; r < LB_MM_R; r++) acc[j][r] = _mm256_fmadd_ps(xv, wv[r], acc[j][r]);
		}
	}
}

LB_INLINE LB_AVX2 void fp8_tile_avx2(const lb_mm *m, int64_t o, int nr, int64_t rs, int64_t t, const int nt) {
	const int64_t in = m->in;
	const uint8_t *w[LB_MM_R];
	const float *sp[LB_MM_R];
	for (int r = 0; r < LB_MM_R; r++) w[r] = m->w + (o + (r < nr ? r : 0) * rs) * in;
	int64_t step = fp8_scales(m, o, nr, rs, sp);
	const float *x[LB_MM_T];
	for (int j = 0; j < nt; j++) x[j] = m->x + (t + j) * in;
	__m256 acc[LB_MM_T][LB_MM_R];
	for (int j = 0; j < nt; j++)
		for (int r = 0; r < LB_MM_R; r++) acc[j][r] = _mm256_setzero_ps();
	if (step) {
		for (int64_t c = 0, i = 0; i < in; c++, i += 128) {
			__m256 part[LB_MM_T][LB_MM_R];
			for (int j = 0; j < nt; j++)
				for (int r = 0; r < LB_MM_R; r++) part[j][r] = _mm256_setzero_ps();
			fp8_span_avx2(part, w, x, i, i + 128 < in ? i + 128 : in, nt);
			for (int r = 0; r < LB_MM_R; r++) {
				__m256 sc = _mm256_set1_ps(sp[r][c] * 256.0f);
				for (int j = 0; j < nt; j++) acc[j][r] = _mm256_fmadd_ps(part[j][r], sc, acc[j][r]);
			}
		}
	} else {
		fp8_span_avx2(acc, w, x, 0, in, nt);
	}
	for (int j = 0; j < nt; j++)
		for (int r = 0; r < nr; r++)
			lb_mm_store(m, t + j, o + r * rs, lb_hsum_avx2(acc[j][r]) * (step ? 1.0f : *sp[r] * 256.0f));
}

LB_MM_ROWS(fp8_rows_avx2, LB_AVX2, fp8_tile_avx2, 2)
#endif

int lb_fp8_dp(int isa, int act) {
	return isa == LB_ISA_AVX512 && lb_vbmi() && lb_bf16dot() && (act == LB_A_FP8_TOKEN || act == LB_A_FP8_TENSOR);
}

lb_mm_rows lb_mm_fp8_rows(int isa, int act) {
	pthread_once(&e4m3_once, e4m3_init);
#ifdef LB_X86
	if (lb_fp8_dp(isa, act)) return fp8_rows_avx512bf16;
	if (isa == LB_ISA_AVX512) return lb_vbmi() ? fp8_rows_avx512vbmi : fp8_rows_avx512;
	if (isa == LB_ISA_AVX2) return fp8_rows_avx2;
#endif
	(void)isa;
	(void)act;
	return fp8_rows_generic;
}
