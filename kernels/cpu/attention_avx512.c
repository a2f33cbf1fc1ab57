//go:build cgo

// attention_avx512.c: the AVX-512 path of attention.c (whose header states
// the contract): tiles of positions and query heads whose rows are decoded
// 16 elements at a time into registers, once for the tile's heads.
#include "attention.h"

#ifdef LB_X86
// kv16_avx512 returns elements i .. i + 15 (mask k, zeros outside) of a
// cache row as float32: att_kvdec_avx512's values, in a register.
LB_INLINE LB_AVX512 __m512 kv16_avx512(const uint8_t *row, int64_t i, __mmask16 k, int dtype, __m512 s) {
	if (dtype == LB_KV_F32) return _mm512_maskz_loadu_ps(k, (const float *)row + i);
	if (dtype == LB_KV_BF16)
		return _mm512_castsi512_ps(
		    _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(k, (const uint16_t *)row + i)), 16));
	return _mm512_mul_ps(lb_e4m3x16_avx512(_mm_maskz_loadu_epi8(k, row + i)), s);
}

// hsum16_avx512 returns the vector whose lane k is lb_hsum_avx512(v[k]):
// the same pairwise sums (lane i + lane i+8, then i + i+4, i + i+2,
// i + i+1) done for sixteen vectors together: 46 vector operations, and
// the sums land in one register, ready to be scaled and stored.
LB_INLINE LB_AVX512 __m512 hsum16_avx512(const __m512 v[16]) {
	// 16 -> 8: w[k]'s 128-bit lanes 0-1 hold v[2k]'s lanes 0-7 + 8-15,
	// lanes 2-3 v[2k+1]'s.
	__m512 w[8], x[4], y[2];
	for (int k = 0; k < 8; k++)
		w[k] = _mm512_add_ps(_mm512_shuffle_f32x4(v[2 * k], v[2 * k + 1], 0x44),
		                     _mm512_shuffle_f32x4(v[2 * k], v[2 * k + 1], 0xEE));
	// 8 -> 4: 128-bit lane r of x[k] holds v[4k + r]'s four sums.
	for (int k = 0; k < 4; k++)
		x[k] = _mm512_add_ps(_mm512_shuffle_f32x4(w[2 * k], w[2 * k + 1], 0x88),
		                     _mm512_shuffle_f32x4(w[2 * k], w[2 * k + 1], 0xDD));
	// 4 -> 2 within each 128-bit lane r: y[k] = [A0+A2, B0+B2, A1+A3,
	// B1+B3] of A = v[8k + r], B = v[8k + 4 + r].
	for (int k = 0; k < 2; k++)
		y[k] = _mm512_add_ps(_mm512_unpacklo_ps(x[2 * k], x[2 * k + 1]), _mm512_unpackhi_ps(x[2 * k], x[2 * k + 1]));
	// 2 -> 1: lane 4r + c holds v[4c + r]'s sum; a permutation puts it in
	// lane 4c + r.
	__m512 z = _mm512_add_ps(_mm512_shuffle_ps(y[0], y[1], 0x44), _mm512_shuffle_ps(y[0], y[1], 0xEE));
	return _mm512_permutexvar_ps(_mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15), z);
}

// ktile_avx512 returns the scores of P positions (rows, one KV head's) for
// G query heads (q, Dh floats apart), G·P ≤ 16: lane g·P + p of the result
// is (q_g · row_p)·scale. Each 16 elements of a row are decoded once for
// the G heads; each dot product sums lane i mod 16 in order of i by FMA,
// then the lanes pairwise (hsum16_avx512), so it depends only on Dh.
LB_INLINE LB_AVX512 __m512 ktile_avx512(const float *q, const int G, const int P, const uint8_t *const rows[16],
                                        int64_t Dh, const int dtype, __m512 sc, __m512 scale) {
	__m512 acc[16];
	for (int k = 0; k < 16; k++) acc[k] = _mm512_setzero_ps();
	for (int64_t i = 0; i < Dh; i += 16) {
		__mmask16 m = Dh - i >= 16 ? 0xFFFF : lb_tail_mask16(Dh - i);
		__m512 qv[8];
		for (int g = 0; g < G; g++) qv[g] = _mm512_maskz_loadu_ps(m, q + g * Dh + i);
		for (int p = 0; p < P; p++) {
			__m512 x = kv16_avx512(rows[p], i, m, dtype, sc);
			for (int g = 0; g < G; g++) acc[g * P + p] = _mm512_fmadd_ps(qv[g], x, acc[g * P + p]);
		}
	}
	return _mm512_mul_ps(hsum16_avx512(acc), scale);
}

// kpass_tiles_avx512 is the AVX-512 kpass in tiles of GT query heads
// (GT ≤ 8 divides the G heads a KV head) and 16 / GT positions: each
// tile's scores by one ktile_avx512, positions in order (each position's
// rows, all nkv KV heads, one contiguous read), and each head's maximum
// afterwards.
LB_INLINE LB_AVX512 void kpass_tiles_avx512(const att_job *j, const float *q, int64_t j0, int64_t e, int64_t kh0,
                                            float *s, float *r, const int GT, const int dtype) {
	const int P = 16 / GT;
	const int64_t G = j->H / j->KVH, nkv = j->nkv, nh = nkv * G, Dh = j->Dh, ps = j->ps, CH = LB_ATT_CHUNK;
	const int64_t es = att_elem_bytes(dtype);
	const __m512 sc = _mm512_set1_ps(j->kscale * 256.0f), scale = _mm512_set1_ps(j->scale);
	const int64_t vrow = nkv * Dh * es;
	for (int64_t i = j0; i < j0 + LB_ATT_PREFETCH; i++) kv_prefetch(j, j->k, i, e, kh0, nkv);
	for (int64_t i = j0; i < e; i += P) {
		const int64_t nb = e - i < P ? e - i : P;
		for (int64_t x = 0; x < P; x++) kv_prefetch(j, j->k, i + x + LB_ATT_PREFETCH, e, kh0, nkv);
		if (vrow <= LB_ATT_VPREFETCH_BYTES)
			for (int64_t x = 0; x < nb; x++)
				for (int64_t b = 0; b < vrow; b += 64) lb_prefetch(j->v + j->rows[i + x] + kh0 * Dh * es + b);
		const uint8_t *base[16];
		for (int p = 0; p < P; p++) base[p] = j->k + j->rows[i + (p < nb ? p : 0)] + kh0 * Dh * es;
		for (int64_t kk = 0; kk < nkv; kk++) {
			const uint8_t *rows[16];
			for (int p = 0; p < P; p++) rows[p] = base[p] + kk * Dh * es;
			for (int64_t g0 = kk * G; g0 < (kk + 1) * G; g0 += GT) {
				__m512 v = ktile_avx512(q + g0 * Dh, GT, P, rows, Dh, dtype, sc, scale);
				for (int g = 0; g < GT; g++) {
					// Lanes g·P .. g·P + nb − 1 to lanes 0 .. nb − 1.
					__m512i vi = _mm512_castps_si512(v);
					_mm512_mask_storeu_ps(s + (g0 + g) * CH + i - j0, lb_tail_mask16(nb),
					                      _mm512_castsi512_ps(_mm512_alignr_epi32(vi, vi, g * P)));
				}
			}
		}
	}
	const int64_t n = e - j0;
	for (int64_t g = 0; g < nh; g++) {
		__m512 mv = _mm512_set1_ps(-INFINITY);
		for (int64_t i = 0; i < n; i += 16)
			mv = _mm512_mask_max_ps(mv, n - i >= 16 ? 0xFFFF : lb_tail_mask16(n - i), _mm512_loadu_ps(s + g * CH + i), mv);
		r[g * ps + Dh] = _mm512_reduce_max_ps(mv);
	}
}

// vtile_avx512 adds, for G heads, y_g += Σ_{p < nb} a_g,p · row_p (y_g ys
// floats apart, a_g,p at a[g·as + p]), positions in order, one FMA each:
// each 16 elements of the nb ≤ 8 rows decoded once into registers and
// added into one load and store of each head's accumulator.
LB_INLINE LB_AVX512 void vtile_avx512(float *y, int64_t ys, const float *a, int64_t as, const int G,
                                      const uint8_t *const rows[8], const int nb, int64_t Dh, const int dtype,
                                      __m512 sc) {
	for (int64_t i = 0; i < Dh; i += 16) {
		__mmask16 m = Dh - i >= 16 ? 0xFFFF : lb_tail_mask16(Dh - i);
		__m512 x[8];
		for (int p = 0; p < nb; p++) x[p] = kv16_avx512(rows[p], i, m, dtype, sc);
		for (int g = 0; g < G; g++) {
			__m512 acc = _mm512_maskz_loadu_ps(m, y + g * ys + i);
			for (int p = 0; p < nb; p++) acc = _mm512_fmadd_ps(_mm512_set1_ps(a[g * as + p]), x[p], acc);
			_mm512_mask_storeu_ps(y + g * ys + i, m, acc);
		}
	}
}

// vpass_tiles_avx512 is the AVX-512 vpass in tiles of 8 positions (in
// order; each tile's rows, all nkv KV heads, one contiguous read) and GT
// query heads (GT ≤ 8 divides G).
LB_INLINE LB_AVX512 void vpass_tiles_avx512(const att_job *j, int64_t j0, int64_t e, int64_t kh0, const float *s,
                                            float *r, const int GT, const int dtype) {
	const int64_t G = j->H / j->KVH, nkv = j->nkv, Dh = j->Dh, ps = j->ps, CH = LB_ATT_CHUNK;
	const int64_t es = att_elem_bytes(dtype);
	const __m512 sc = _mm512_set1_ps(j->vscale * 256.0f);
	for (int64_t i = j0; i < j0 + LB_ATT_PREFETCH; i++) kv_prefetch(j, j->v, i, e, kh0, nkv);
	for (int64_t i = j0; i < e; i += 8) {
		const int64_t nb = e - i < 8 ? e - i : 8;
		for (int64_t x = 0; x < 8; x++) kv_prefetch(j, j->v, i + x + LB_ATT_PREFETCH, e, kh0, nkv);
		const uint8_t *base[8];
		for (int p = 0; p < 8; p++) base[p] = j->v + j->rows[i + (p < nb ? p : 0)] + kh0 * Dh * es;
		for (int64_t kk = 0; kk < nkv; kk++) {
			const uint8_t *rows[8];
			for (int p = 0; p < 8; p++) rows[p] = base[p] + kk * Dh * es;
			for (int64_t g0 = kk * G; g0 < (kk + 1) * G; g0 += GT) {
				float *y = r + g0 * ps;
				const float *a = s + g0 * CH + i - j0;
				if (nb == 8)
					vtile_avx512(y, ps, a, CH, GT, rows, 8, Dh, dtype, sc);
				else
					vtile_avx512(y, ps, a, CH, GT, rows, (int)nb, Dh, dtype, sc);
			}
		}
	}
}

// ATT_BY_DTYPE_G runs call(G, DT) with the constants equal to g (1 to 8)
// and dtype (F32, BF16, else FP8), so that each combination compiles to
// loops of its own.
#define ATT_G_CASES(call, DT, base)        \
	case base:                           \
		call(1, DT);                 \
		break;                       \
	case base + 1:                       \
		call(2, DT);                 \
		break;                       \
	case base + 2:                       \
		call(3, DT);                 \
		break;                       \
	case base + 3:                       \
		call(4, DT);                 \
		break;                       \
	case base + 4:                       \
		call(5, DT);                 \
		break;                       \
	case base + 5:                       \
		call(6, DT);                 \
		break;                       \
	case base + 6:                       \
		call(7, DT);                 \
		break;                       \
	case base + 7:                       \
		call(8, DT);                 \
		break;
#define ATT_BY_DTYPE_G(call, dtype, g)                                                              \
	switch (8 * ((dtype) == LB_KV_F32 ? 0 : (dtype) == LB_KV_BF16 ? 1 : 2) + (int)(g) - 1) {   \
		ATT_G_CASES(call, LB_KV_F32, 0)                                                     \
		ATT_G_CASES(call, LB_KV_BF16, 8)                                                    \
		ATT_G_CASES(call, LB_KV_FP8, 16)                                                    \
	}

// att_kvdec_avx512: BF16 widened by a shift, 16 at a time; E4M3 by
// lb_e4m3x16_avx512 (value·2^-8, exact) times sc·256 (exact: a power of
// two), whose one rounding is that of value·sc.
LB_AVX512 void att_kvdec_avx512(float *dst, const uint8_t *src, int64_t n, int dtype, float sc) {
	__m512 s = _mm512_set1_ps(sc * 256.0f);
	for (int64_t i = 0; i < n; i += 16) {
		__mmask16 k = n - i >= 16 ? 0xFFFF : lb_tail_mask16(n - i);
		_mm512_mask_storeu_ps(dst + i, k, kv16_avx512(src, i, k, dtype, s));
	}
}

LB_AVX512 static void exps_avx512(float *s, int64_t n, float m) {
	const __m512 mv = _mm512_set1_ps(m);
	for (int64_t i = 0; i < n; i += 16) {
		__mmask16 k = n - i >= 16 ? 0xFFFF : lb_tail_mask16(n - i);
		_mm512_mask_storeu_ps(s + i, k, lb_exp_avx512(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, s + i), mv)));
	}
}

// att_tile_heads is the most query heads, at most 8, that divide the G
// heads of a KV head: the heads of a tile.
static int att_tile_heads(int64_t G) {
	for (int g = 8; g > 1; g--)
		if (G % g == 0) return g;
	return 1;
}

LB_AVX512 static void kpass_avx512(const att_job *j, const float *q, int64_t j0, int64_t e, int64_t kh0, float *s,
                                   float *buf, float *r) {
	(void)buf;
#define KPASS_CALL(GT, DT) kpass_tiles_avx512(j, q, j0, e, kh0, s, r, GT, DT)
	ATT_BY_DTYPE_G(KPASS_CALL, j->dtype, att_tile_heads(j->H / j->KVH));
#undef KPASS_CALL
}

LB_AVX512 static void vpass_avx512(const att_job *j, int64_t j0, int64_t e, int64_t kh0, const float *s, float *buf,
                                   float *r) {
	(void)buf;
#define VPASS_CALL(GT, DT) vpass_tiles_avx512(j, j0, e, kh0, s, r, GT, DT)
	ATT_BY_DTYPE_G(VPASS_CALL, j->dtype, att_tile_heads(j->H / j->KVH));
#undef VPASS_CALL
}

ATT_TASKS(avx512, LB_AVX512, )
#endif
