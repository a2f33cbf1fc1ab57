//go:build cgo

// internal.h: what the C files of kernels/cpu share and Go does not see: the
// context, the thread pool, the target attributes of the code paths, the
// matmul job with its per-format row kernels, activation preparation, and a
// few fixed-order SIMD reductions.
#ifndef LB_INTERNAL_H
#define LB_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "lbcpu.h"

#define LB_INLINE static inline __attribute__((always_inline))

// x86 code paths are compiled per function, so the package builds with plain
// gcc flags and runs on any x86-64; other architectures get the generic path.
#if defined(__x86_64__)
#define LB_X86 1
#include <immintrin.h>
#define LB_AVX2 __attribute__((target("avx2,fma,f16c")))
#define LB_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")))
// The AVX-512 path has a variant for CPUs with VBMI (byte permutes: Ice
// Lake, Sapphire Rapids, Zen 4), chosen at run time by lb_vbmi (lbcpu.h).
#define LB_AVX512VBMI __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vbmi,avx2,fma,f16c")))
#define LB_AVX512VBMIBF16 \
	__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vbmi,avx512bf16,avx2,fma,f16c")))
#endif

// ---------------------------------------------------------------------------
// threadpool.c

typedef struct lb_pool lb_pool;

// lb_task runs task number `task` on thread `tid` (0 is the caller).
typedef void (*lb_task)(void *arg, int64_t task, int tid);

lb_pool *lb_pool_new(int threads);
void lb_pool_free(lb_pool *p);
int lb_pool_threads(const lb_pool *p);
// lb_pool_run runs tasks 0..ntasks-1, each exactly once, on the pool's
// threads and the caller, and returns when all are done.
void lb_pool_run(lb_pool *p, int64_t ntasks, lb_task fn, void *arg);

// ---------------------------------------------------------------------------
// context.c

struct lb_ctx {
	int isa;
	int threads;
	lb_pool *pool;
	void *scratch; // 64-byte aligned, grown on demand, never shrunk
	size_t scratch_bytes;
};

// lb_scratch returns at least `bytes` bytes of the context's scratch memory
// (valid until the next call), or NULL when it cannot grow.
void *lb_scratch(lb_ctx *c, size_t bytes);

// lb_tasks splits `work` units (about one multiply-add each) over the pool:
// 1 when the work is too small to be worth waking threads for, otherwise at
// most max_tasks, at least 4 per thread where possible.
int64_t lb_tasks(const lb_ctx *c, double work, int64_t max_tasks);

// ---------------------------------------------------------------------------
// matmul.c and matmul_*.c

// The weight rows a tile computes together, the tokens (at most), and the
// tokens a row block walks through before moving to its next rows: the
// block's activations stay in L2 while the weight rows are reused.
#define LB_MM_R 4
#define LB_MM_T 4
#define LB_MM_TOKEN_BLOCK 64

// How many tiles ahead the NVFP4 tiles of the generic and AVX2 paths
// prefetch the weights they will stream (lb_prefetch); measured on the
// 2-core VM (BENCHMARKS.md, 2026-12-01 night): no gain at 2 to 8. The BF16,
// FP8 and AVX-512 NVFP4 tiles ask for no later tile: on the Zen 5 VM of
// 2026-12-03 the hardware prefetchers alone streamed a decode step's GEMVs
// 8-25% faster (matmul_bf16.c, matmul_fp8.c, matmul_nvfp4.c).
#define LB_MM_AHEAD_NVFP4 1

// lb_mm is one matmul after activation preparation:
// y[t,o] = (Σ_i x[t,i]·w[o,i]) · wpost · xpost[t], where x holds the
// effective (dequantized) activations, the row kernels apply the weight's
// scales (matmul_*.c say where), wpost is NVFP4's global scale (1
// otherwise) and xpost the per-token FP8 activation scales.
typedef struct lb_mm {
	int64_t T, in, out;
	const float *x;     // [T, in]
	const float *xpost; // [T], or NULL for 1
	const uint8_t *w;   // weight data as kernels.Weight.Data
	const float *ws;    // weight scales as kernels.Weight.Scales
	int fmt;
	float wpost;
	float *y;        // [T, out]
	const float *xt; // x as lb_nvfp4_xt orders it for the NVFP4 AVX-512 kernel, else NULL
	const uint32_t *xb; // x as BF16 pairs for the FP8 vdpbf16ps kernel (lb_fp8_xb), else NULL
} lb_mm;

// A row kernel computes rows [o0, o1) of y for every token.
typedef void (*lb_mm_rows)(const lb_mm *m, int64_t o0, int64_t o1);

lb_mm_rows lb_mm_bf16_rows(int isa);
lb_mm_rows lb_mm_fp8_rows(int isa, int act);
// lb_fp8_dp reports whether lb_mm_fp8_rows(isa, act) is the AVX512_BF16
// variant, which reads the activations as lb_fp8_xb writes them (lb_mm.xb):
// [T][in / 64][32] BF16 pairs, whole groups of 64 columns only.
int lb_fp8_dp(int isa, int act);
void lb_fp8_xb(uint32_t *xb, const float *x, int64_t T, int64_t in);
lb_mm_rows lb_mm_nvfp4_rows(int isa);

// lb_nvfp4_xt writes x [T, in] into xt [T, in] in the order of the NVFP4
// AVX-512 kernel (matmul_nvfp4.c), which MatMul passes it as lb_mm.xt.
void lb_nvfp4_xt(float *xt, const float *x, int64_t T, int64_t in);

// LB_MM_ROWS defines a row kernel from an always-inline tile function
// TILE(m, o, nr, rs, t, nt) that computes rows o, o + rs, ..., o + (nr -
// 1)·rs (nr <= LB_MM_R) for tokens t..t+nt-1 (nt <= NT <= LB_MM_T) with nt
// a compile-time constant. Every output element is reduced in the same
// order whatever tile it falls in, so results do not depend on T or on how
// rows are split into tasks. Decode (T = 1) splits the rows into LB_MM_R
// equal runs and takes one row of each a tile (rs: the run's length), so
// that the tile reads LB_MM_R long streams of weights instead of LB_MM_R
// rows of a few KiB, which the hardware prefetchers barely follow: on the
// Zen 5 VM of 2026-12-02 a C microbenchmark of the LM head's BF16 shape
// (151,936 x 1,024, 2 threads) read 59-65 GB/s that way against 40-48 for
// consecutive rows (BENCHMARKS.md). Prefill tiles take consecutive rows.
#define LB_MM_ROWS(name, attr, TILE, NT)                                                                   \
	attr static void name(const lb_mm *m, int64_t o0, int64_t o1) {                                      \
		if (m->T == 1) {                                                                             \
			int64_t run = (o1 - o0) / LB_MM_R;                                                   \
			for (int64_t k = 0; k < run; k++) TILE(m, o0 + k, LB_MM_R, run, 0, 1);             \
			int64_t rest = o0 + LB_MM_R * run;                                                   \
			if (rest < o1) TILE(m, rest, (int)(o1 - rest), 1, 0, 1);                             \
			return;                                                                              \
		}                                                                                            \
		for (int64_t tb = 0; tb < m->T; tb += LB_MM_TOKEN_BLOCK) {                                     \
			int64_t te = tb + LB_MM_TOKEN_BLOCK < m->T ? tb + LB_MM_TOKEN_BLOCK : m->T;          \
			for (int64_t o = o0; o < o1; o += LB_MM_R) {                                         \
				int nr = o1 - o < LB_MM_R ? (int)(o1 - o) : LB_MM_R;                         \
				int64_t t = tb;                                                              \
				for (; t + NT <= te; t += NT) TILE(m, o, nr, 1, t, NT);                      \
				switch (te - t) {                                                            \
				case 3: TILE(m, o, nr, 1, t, 3); break;                                      \
				case 2: TILE(m, o, nr, 1, t, 2); break;                                      \
				case 1: TILE(m, o, nr, 1, t, 1); break;                                      \
				}                                                                            \
			}                                                                                    \
		}                                                                                            \
	}

// lb_prefetch asks for the cache line at p, into L1 (lb_prefetch) or L2
// (lb_prefetch_l2): the AVX-512 FP8 and NVFP4 tiles for their own rows a
// little ahead, the generic and AVX2 NVFP4 tiles for a later tile, the
// attention for the next positions' rows. It never faults, past the end of
// a weight included.
#define lb_prefetch(p) __builtin_prefetch((const void *)(p), 0, 3)
#define lb_prefetch_l2(p) __builtin_prefetch((const void *)(p), 0, 2)

// lb_mm_store writes one finished output element.
LB_INLINE void lb_mm_store(const lb_mm *m, int64_t t, int64_t o, float dot) {
	float xpost = m->xpost ? m->xpost[t] : 1.0f;
	m->y[t * m->out + o] = dot * m->wpost * xpost;
}

// ---------------------------------------------------------------------------
// act_quant.c

// lb_act_prep quantizes each row of x [T, in] as `act` requires, writing the
// effective activations to xe [T, in] and, for the per-token and per-tensor
// FP8 schemes, the per-token scales to post [T] (set *has_post).
void lb_act_prep(lb_ctx *c, float *xe, float *post, int *has_post, const float *x, int64_t T, int64_t in,
                 int act, float input_scale);

// ---------------------------------------------------------------------------
// Fixed-order horizontal sums: halves are added pairwise down to one lane.

LB_INLINE float lb_hsum8(const float a[8]) {
	float b0 = a[0] + a[4], b1 = a[1] + a[5], b2 = a[2] + a[6], b3 = a[3] + a[7];
	return (b0 + b2) + (b1 + b3);
}

#ifdef LB_X86
LB_INLINE LB_AVX2 float lb_hsum_avx2(__m256 v) {
	__m128 a = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
	a = _mm_add_ps(a, _mm_movehl_ps(a, a));
	a = _mm_add_ss(a, _mm_movehdup_ps(a));
	return _mm_cvtss_f32(a);
}

LB_INLINE LB_AVX512 float lb_hsum_avx512(__m512 v) {
	__m256 a = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
	__m128 b = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
	b = _mm_add_ps(b, _mm_movehl_ps(b, b));
	b = _mm_add_ss(b, _mm_movehdup_ps(b));
	return _mm_cvtss_f32(b);
}

// lb_tail_mask16 has the low n bits set (0 <= n <= 16).
LB_INLINE __mmask16 lb_tail_mask16(int64_t n) { return (__mmask16)((1u << n) - 1); }

// lb_tail_mask8 has lanes 0..n-1 all ones (0 <= n <= 8), for maskload.
LB_INLINE LB_AVX2 __m256i lb_tail_mask8(int64_t n) {
	return _mm256_cmpgt_epi32(_mm256_set1_epi32((int)n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

// lb_e4m3x16_avx512 decodes 16 E4M3 codes to value·2^-8, exactly, NaNs
// included (matmul_fp8.c's header says how): the code's bits moved into an
// IEEE half of value·2^-8, widened by vcvtph2ps.
LB_INLINE LB_AVX512 __m512 lb_e4m3x16_avx512(__m128i b) {
	// u has the sign in bits 15 and 14; u + 0x80 flips bit 14 exactly for
	// the NaNs, so one ternary op keeps u's bits under 0xBF80 and takes bit
	// 14 from u ^ (u + 0x80): f = C ? A : A ^ B (imm 0xB4), bit-identical to
	// masking first and OR-ing the carry in (the _avx2 form).
	__m256i u = _mm256_slli_epi16(_mm256_cvtepi8_epi16(b), 7);
	__m256i v = _mm256_add_epi16(u, _mm256_set1_epi16(0x80));
	return _mm512_cvtph_ps(_mm256_ternarylogic_epi32(u, v, _mm256_set1_epi16((short)0xBF80), 0xB4));
}
#endif

// ---------------------------------------------------------------------------
// lb_exp: the kernels' own exp in float32, the same bits on every code path
// (the scalar form, lb_expf, and 8 or 16 lanes at a time), so that SiLUMul
// and attention give one result whatever the ISA. glibc's expf is scalar
// only; a SiLU of 3072 gates or an attention chunk's 64 scores took 10-40%
// of their op in it.
//
// Computes: exp(x) = 2^n · e^r with n = x·log2(e) rounded to nearest even
// (the 1.5·2^23 trick), r = x − n·C1 − n·C2 (Cody-Waite: C1 = 0.693359375,
// 9 significant bits, so n·C1 is exact for |n| ≤ 128; C1 + C2 = ln 2 to
// float32 accuracy), e^r by Cephes's degree-7 expf polynomial (|r| ≤ ln2/2)
// evaluated ((y·r² + r) + 1) with separate products and sums (no fused
// multiply-add: the generic C compiles without contraction), and 2^n
// applied as two exact power-of-two products 2^⌊n/2⌋·2^(n−⌊n/2⌋), so that n
// = 128 (x just below ln FLT_MAX) still gives a finite result. x above
// 88.72283172607421875 gives +inf, x below −87.33654022216797 (ln 2^-126) gives
// 0, NaN gives NaN. Within 2 ulp of exp over the rest (TestExp).
#define LB_EXP_HI 88.72283172607421875f
#define LB_EXP_LO -87.33654022216797f
#define LB_EXP_LOG2E 1.44269504088896341f
#define LB_EXP_ROUND 12582912.0f
#define LB_EXP_C1 0.693359375f
#define LB_EXP_C2 -2.12194440e-4f
#define LB_EXP_P0 1.9875691500e-4f
#define LB_EXP_P1 1.3981999507e-3f
#define LB_EXP_P2 8.3334519073e-3f
#define LB_EXP_P3 4.1665795894e-2f
#define LB_EXP_P4 1.6666665459e-1f
#define LB_EXP_P5 5.0000001201e-1f

LB_INLINE float lb_exp2i(int32_t n) {
	uint32_t u = (uint32_t)(n + 127) << 23;
	float f;
	memcpy(&f, &u, 4);
	return f;
}

LB_INLINE float lb_expf(float x) {
	if (x != x) return x;
	if (x > LB_EXP_HI) return __builtin_inff();
	if (x < LB_EXP_LO) return 0.0f;
	float n = (x * LB_EXP_LOG2E + LB_EXP_ROUND) - LB_EXP_ROUND;
	float r = x - n * LB_EXP_C1;
	r = r - n * LB_EXP_C2;
	float y = LB_EXP_P0;
	y = y * r + LB_EXP_P1;
	y = y * r + LB_EXP_P2;
	y = y * r + LB_EXP_P3;
	y = y * r + LB_EXP_P4;
	y = y * r + LB_EXP_P5;
	y = (y * (r * r) + r) + 1.0f;
	int32_t ni = (int32_t)n, h = ni >> 1;
	return y * lb_exp2i(h) * lb_exp2i(ni - h);
}

#ifdef LB_X86
#define LB_EXP_SIMD(W, SI, CVT, MUL, ADD, SUB, SET1, SET1I, ADDI, SUBI, SRAI, SLLI, CAST)                        \
	const W n = SUB(ADD(MUL(x, SET1(LB_EXP_LOG2E)), SET1(LB_EXP_ROUND)), SET1(LB_EXP_ROUND));                \
	W r = SUB(x, MUL(n, SET1(LB_EXP_C1)));                                                                   \
	r = SUB(r, MUL(n, SET1(LB_EXP_C2)));                                                                     \
	W y = SET1(LB_EXP_P0);                                                                                   \
	y = ADD(MUL(y, r), SET1(LB_EXP_P1));                                                                     \
	y = ADD(MUL(y, r), SET1(LB_EXP_P2));                                                                     \
	y = ADD(MUL(y, r), SET1(LB_EXP_P3));                                                                     \
	y = ADD(MUL(y, r), SET1(LB_EXP_P4));                                                                     \
	y = ADD(MUL(y, r), SET1(LB_EXP_P5));                                                                     \
	y = ADD(ADD(MUL(y, MUL(r, r)), r), SET1(1.0f));                                                          \
	const SI ni = CVT(n), h = SRAI(ni, 1), bias = SET1I(127);                                                \
	y = MUL(MUL(y, CAST(SLLI(ADDI(h, bias), 23))), CAST(SLLI(ADDI(SUBI(ni, h), bias), 23)));

// lb_exp_avx512 is lb_expf on 16 lanes.
LB_INLINE LB_AVX512 __m512 lb_exp_avx512(__m512 x) {
	LB_EXP_SIMD(__m512, __m512i, _mm512_cvtps_epi32, _mm512_mul_ps, _mm512_add_ps, _mm512_sub_ps,
	            _mm512_set1_ps, _mm512_set1_epi32, _mm512_add_epi32, _mm512_sub_epi32, _mm512_srai_epi32,
	            _mm512_slli_epi32, _mm512_castsi512_ps)
	y = _mm512_mask_mov_ps(y, _mm512_cmp_ps_mask(x, _mm512_set1_ps(LB_EXP_HI), _CMP_GT_OQ),
	                       _mm512_set1_ps(__builtin_inff()));
	y = _mm512_mask_mov_ps(y, _mm512_cmp_ps_mask(x, _mm512_set1_ps(LB_EXP_LO), _CMP_LT_OQ), _mm512_setzero_ps());
	return _mm512_mask_mov_ps(y, _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), x);
}

// lb_exp_avx2 is lb_expf on 8 lanes.
LB_INLINE LB_AVX2 __m256 lb_exp_avx2(__m256 x) {
	LB_EXP_SIMD(__m256, __m256i, _mm256_cvtps_epi32, _mm256_mul_ps, _mm256_add_ps, _mm256_sub_ps,
	            _mm256_set1_ps, _mm256_set1_epi32, _mm256_add_epi32, _mm256_sub_epi32, _mm256_srai_epi32,
	            _mm256_slli_epi32, _mm256_castsi256_ps)
	y = _mm256_blendv_ps(y, _mm256_set1_ps(__builtin_inff()), _mm256_cmp_ps(x, _mm256_set1_ps(LB_EXP_HI), _CMP_GT_OQ));
	y = _mm256_blendv_ps(y, _mm256_setzero_ps(), _mm256_cmp_ps(x, _mm256_set1_ps(LB_EXP_LO), _CMP_LT_OQ));
	return _mm256_blendv_ps(y, x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
}
#undef LB_EXP_SIMD
#endif

#endif
