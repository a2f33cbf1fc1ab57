//go:build cgo

// attention.h: what attention.c and attention_avx512.c share: the job of
// one lb_attention call, the chunk and its fold (the contract in
// attention.c's header), and the task wrappers every code path
// instantiates around its own key and value passes.
#ifndef LB_ATTENTION_H
#define LB_ATTENTION_H

#include <math.h>

#include "internal.h"

// Positions a chunk spans, at multiples of it from position 0: the fold's
// structure, shared with kernels/cuda (FA_CHUNK).
#define LB_ATT_CHUNK 64
// Positions ahead whose rows a task prefetches, and how many of their
// first cache lines (into L2): the hardware prefetchers stream the rest of
// a row, contiguous, but do not cross into the next 4 KiB page, which at
// Qwen3-0.6B's shape (8 KV heads of 128 float32) is the next position's
// row. Prefetching every line into L1 instead was 40% slower: the
// prefetches queued for the line fill buffers. 16 lines (1 KiB: a whole
// E4M3 row at that shape, half a BF16 one): on the Zen 5 VM of 2026-12-03
// (BenchmarkAttentionDecode at 272 positions from memory, alternating
// builds) the quietest of three rounds took E4M3 from 146-150 µs a call to
// 79-81 and BF16 from 129-137 to 101-112 against 8 lines, float32
// unchanged; the two noisier rounds overlap (BENCHMARKS.md). Whole rows, or
// 6 to 16 positions ahead, made float32 10-25% slower.
#define LB_ATT_PREFETCH 3
#define LB_ATT_PREFETCH_LINES 16
// The AVX-512 key pass prefetches each tile's value rows (into L1: the
// value pass reads them next) where a position's rows of the task's KV
// heads take at most this many bytes. On the Zen 5 VM of 2026-12-03
// (BenchmarkAttentionDecode's shape from memory, a C loop, two rounds) it
// took E4M3 from 82-85 µs a call to 63-65 and BF16 from 70-74 to 64-67;
// float32's 4 KiB rows went from 56-58 to 62-69, the prefetches queueing
// for the line fill buffers as the old whole-row prefetch did.
#define LB_ATT_VPREFETCH_BYTES 2048
// Tasks per thread the whole mode needs, at least, to be chosen.
#define LB_ATT_TASKS 4

typedef struct att_job {
	float *out;
	const float *q;
	const uint8_t *k, *v;
	int dtype;
	float kscale, vscale;
	int64_t T, start, H, KVH, Dh;
	float scale;
	int64_t nkv;         // KV heads a task takes, a divisor of KVH
	int64_t ps;          // floats of a partial record: o [Dh], m, l, padded
	const int64_t *rows; // [ctx]: the byte offset of each position's row (all KV heads) in a pool
	const int64_t *off;  // split mode: [T + 1], token t's chunks are off[t] .. off[t+1]-1
	const int32_t *tok;  // split mode: [off[T]], the token of each chunk
	float *part;         // split mode: [off[T]][H] partial records
	float *scratch;      // per thread: scores [nh][LB_ATT_CHUNK], 4 decoded rows [Dh], 2 records [nh]
	int64_t scratch_stride;
} att_job;

// att_elem_bytes is the bytes of one cache element of dtype.
LB_INLINE int64_t att_elem_bytes(int dtype) { return dtype == LB_KV_F32 ? 4 : dtype == LB_KV_BF16 ? 2 : 1; }

// kv_prefetch asks for the first LB_ATT_PREFETCH_LINES lines of position
// i's rows of KV heads kh..kh+nkv-1 (one contiguous span), when i < n.
LB_INLINE void kv_prefetch(const att_job *j, const uint8_t *pool, int64_t i, int64_t n, int64_t kh, int64_t nkv) {
	if (i >= n) return;
	int64_t es = att_elem_bytes(j->dtype);
	const uint8_t *p = pool + j->rows[i] + kh * j->Dh * es;
	int64_t bytes = nkv * j->Dh * es;
	for (int64_t b = 0; b < LB_ATT_PREFETCH_LINES * 64 && b < bytes; b += 64) lb_prefetch_l2(p + b);
}

// A path's exps sets s[i] = exp(s[i] − m) for i < n with the kernels' own
// exp (lb_exp, internal.h): the same bits on every path.
typedef void (*exps_fn)(float *s, int64_t n, float m);

// A path's kpass writes the scaled scores s[g·LB_ATT_CHUNK + i − j0] =
// (q_g · k_i)·scale of positions i = j0 .. e−1 for the nh query heads q
// (Dh floats apart) of KV heads kh0..kh0+nkv-1, and each head's maximum
// score into record g of r (r[g·ps + Dh]); its vpass adds, for each head
// g, Σ_i s_g,i · v_i (positions in order, one FMA or multiply-add each)
// into record g's o, which the caller has zeroed. buf is the path's
// scratch: 4 decoded rows.
typedef void (*kpass_fn)(const att_job *j, const float *q, int64_t j0, int64_t e, int64_t kh0, float *s, float *buf,
                         float *r);
typedef void (*vpass_fn)(const att_job *j, int64_t j0, int64_t e, int64_t kh0, const float *s, float *buf, float *r);

// att_chunk computes chunk c of token t for the query heads of KV heads
// kh0..kh0+nkv-1 (nh = nkv·G of them, from kh0·G): record g of r (ps
// floats apart) gets o_c, m_c and l_c of head kh0·G + g. Each key and value
// row is read (and decoded) once for all the heads that use it, positions
// in order; every head's scores, max, sum and accumulation run in the same
// order as for a head alone, so nkv changes no result.
LB_INLINE void att_chunk(const att_job *j, int64_t t, int64_t c, int64_t kh0, float *r, float *ws, kpass_fn kpass,
                         vpass_fn vpass, exps_fn exps) {
	const int64_t G = j->H / j->KVH, nh = j->nkv * G, Dh = j->Dh, ps = j->ps, CH = LB_ATT_CHUNK;
	const int64_t j0 = c * CH, e = j->start + t + 1 - j0 < CH ? j->start + t + 1 : j0 + CH;
	float *s = ws, *buf = s + nh * CH;
	kpass(j, j->q + (t * j->H + kh0 * G) * Dh, j0, e, kh0, s, buf, r);
	for (int64_t g = 0; g < nh; g++) {
		float *sg = s + g * CH, acc = 0;
		exps(sg, e - j0, r[g * ps + Dh]);
		for (int64_t i = 0; i < e - j0; i++) acc += sg[i];
		r[g * ps + Dh + 1] = acc;
		memset(r + g * ps, 0, (size_t)Dh * sizeof *r);
	}
	vpass(j, j0, e, kh0, s, buf, r);
}

// att_fold folds the partial record p into the running record f (the
// contract's fold step; plain C on every path, no fused multiply-add: the
// package is compiled -std=c11, whose default is -ffp-contract=off).
static inline void att_fold(float *f, const float *p, int64_t Dh) {
	float M = f[Dh], m = p[Dh], Mn = m > M ? m : M;
	float a = lb_expf(M - Mn), b = lb_expf(m - Mn);
	f[Dh] = Mn;
	f[Dh + 1] = f[Dh + 1] * a + p[Dh + 1] * b;
	for (int64_t d = 0; d < Dh; d++) f[d] = f[d] * a + p[d] * b;
}

// att_finish writes out = O / L of a folded record.
static inline void att_finish(float *out, const float *f, int64_t Dh) {
	for (int64_t d = 0; d < Dh; d++) out[d] = f[d] / f[Dh + 1];
}

// att_whole is a whole-mode task: token task / (KVH/nkv), the query heads
// of its (task % (KVH/nkv))-th nkv KV heads, every chunk, folded in order.
LB_INLINE void att_whole(const att_job *j, int64_t task, int tid, kpass_fn kpass, vpass_fn vpass, exps_fn exps) {
	const int64_t G = j->H / j->KVH, nh = j->nkv * G, ng = j->KVH / j->nkv, Dh = j->Dh, ps = j->ps;
	int64_t t = task / ng, kh0 = (task % ng) * j->nkv, nch = (j->start + t) / LB_ATT_CHUNK + 1;
	float *ws = j->scratch + (int64_t)tid * j->scratch_stride;
	float *f = ws + ((nh * LB_ATT_CHUNK + 4 * Dh + 15) & ~(int64_t)15), *p = f + nh * ps;
	att_chunk(j, t, 0, kh0, f, ws, kpass, vpass, exps);
	for (int64_t c = 1; c < nch; c++) {
		att_chunk(j, t, c, kh0, p, ws, kpass, vpass, exps);
		for (int64_t g = 0; g < nh; g++) att_fold(f + g * ps, p + g * ps, Dh);
	}
	float *o = j->out + (t * j->H + kh0 * G) * Dh;
	for (int64_t g = 0; g < nh; g++) att_finish(o + g * Dh, f + g * ps, Dh);
}

// att_split is a split-mode task: chunk task / (KVH/nkv) of all tokens'
// chunks, for its (task % (KVH/nkv))-th nkv KV heads, into the partials.
LB_INLINE void att_split(const att_job *j, int64_t task, int tid, kpass_fn kpass, vpass_fn vpass, exps_fn exps) {
	const int64_t G = j->H / j->KVH, ng = j->KVH / j->nkv;
	int64_t ci = task / ng, kh0 = (task % ng) * j->nkv, t = j->tok[ci];
	float *r = j->part + (ci * j->H + kh0 * G) * j->ps;
	att_chunk(j, t, ci - j->off[t], kh0, r, j->scratch + (int64_t)tid * j->scratch_stride, kpass, vpass, exps);
}

// ATT_TASKS defines a path's whole- and split-mode tasks from its kpass_##path,
// vpass_##path and exps_##path (storage: static, or nothing for the tasks
// that attention.c calls from another file).
#define ATT_TASKS(path, attr, storage)                                              \
	attr storage void att_whole_##path(void *arg, int64_t task, int tid) {      \
		att_whole(arg, task, tid, kpass_##path, vpass_##path, exps_##path); \
	}                                                                           \
	attr storage void att_split_##path(void *arg, int64_t task, int tid) {      \
		att_split(arg, task, tid, kpass_##path, vpass_##path, exps_##path); \
	}

// attention_avx512.c: the AVX-512 path's tasks, and its row decode for
// lb_kv_decode.
void att_whole_avx512(void *arg, int64_t task, int tid);
void att_split_avx512(void *arg, int64_t task, int tid);
void att_kvdec_avx512(float *dst, const uint8_t *src, int64_t n, int dtype, float sc);

#endif
