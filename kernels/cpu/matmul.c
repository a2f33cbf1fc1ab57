//go:build cgo

// matmul.c: the MatMul op, y[t,o] = Σ_i x[t,i]·w[o,i], for every weight
// format and activation quantization of kernels.Weight.
//
// Computes: the activations are quantized once per token row (act_quant.c)
// into scratch memory; then the output rows (columns of W) are split into
// blocks of a multiple of LB_MM_R rows, one pool task each, and a row kernel
// of the weight's format (matmul_bf16.c, matmul_fp8.c, matmul_nvfp4.c)
// computes each block for all T tokens, LB_MM_TOKEN_BLOCK tokens at a time
// so that each tile of weights is decoded once per LB_MM_T tokens while the
// block's activations stay in cache. Small products run on the calling
// thread (lb_tasks). lb_matmul3 runs up to three weights that share x (a
// layer's q, k and v, or gate and up) as one task list: one wake-up of the
// pool and one activation quantization instead of three, with each weight
// split and computed as lb_matmul would (decode pays a few microseconds a
// dispatch, against 10-150 µs for the products themselves).
//
// Measured on one Zen 4 core (AVX-512, DRAM-resident weights, T = 1): BF16
// 22-24 GB/s of weights, FP8 15.5 (14.5 with 128×128 blocks), NVFP4 11
// (with its float32 scales), against a 30 GB/s one-thread streaming read;
// FP8 and NVFP4 are limited by decoding, not memory. T = 64 on one core:
// BF16 103 GFLOP/s, FP8 81, NVFP4 71, FP8 blocks 61.
//
// Layout: x [T, in] and y [T, out] row-major float32; the weight as
// kernels.Weight stores it, row o of W contiguous.
//
// Invariance: every y[t,o] is computed by one tile with a fixed reduction
// order (the row kernels' comments say which), so it does not depend on T,
// on the other tokens, on the block split or on the number of threads.
//
// Tested by the MatMul cases of kerneltest and TestMatMul (all formats ×
// activation quantizations × code paths, against float64 loops), by
// TestBatchInvariance and TestThreadsInvariance, and lb_matmul3 by
// TestMatMuls (bit-identical to lb_matmul per weight).
#include "internal.h"

typedef struct {
	lb_mm_rows rows;
	const lb_mm *m;
	int64_t rows_per_task;
} mm_job;

static void mm_task(void *arg, int64_t task, int tid) {
	(void)tid;
	const mm_job *j = arg;
	int64_t o0 = task * j->rows_per_task;
	int64_t o1 = o0 + j->rows_per_task < j->m->out ? o0 + j->rows_per_task : j->m->out;
	j->rows(j->m, o0, o1);
}

// mm_prep quantizes x for `act` into scratch memory and points m at the
// effective activations, and for the NVFP4 AVX-512 kernel and the FP8
// AVX512_BF16 one at a copy of them in the kernel's order and type as well.
static int mm_prep(lb_ctx *c, lb_mm *m, const float *x, int act, float input_scale) {
	m->x = x;
	m->xpost = NULL;
	m->xt = NULL;
	m->xb = NULL;
	int xt = m->fmt == LB_W_NVFP4 && c->isa == LB_ISA_AVX512;
	int xb = (m->fmt == LB_W_FP8_CHANNEL || m->fmt == LB_W_FP8_TENSOR || m->fmt == LB_W_FP8_BLOCK) &&
	         lb_fp8_dp(c->isa, act);
	if (act == LB_A_NONE && !xt) return LB_OK;
	int64_t T = m->T, in = m->in;
	// [T, in] activations, [T] scales, then [T, in] reordered (NVFP4) or
	// [T, in / 2] BF16 pairs (FP8), 64-byte aligned.
	size_t n = (size_t)T * (size_t)in, at = (n + (size_t)T + 15) & ~(size_t)15;
	float *buf = lb_scratch(c, (at + (xt ? n : 0) + (xb ? n / 2 + 16 : 0)) * sizeof(float));
	if (!buf) return LB_ERR_NOMEM;
	if (act != LB_A_NONE) {
		int has_post;
		lb_act_prep(c, buf, buf + n, &has_post, x, T, in, act, input_scale);
		m->x = buf;
		m->xpost = has_post ? buf + n : NULL;
	}
	if (xt) {
		lb_nvfp4_xt(buf + at, m->x, T, in);
		m->xt = buf + at;
	}
	if (xb) {
		lb_fp8_xb((uint32_t *)(buf + at), m->x, T, in);
		m->xb = (const uint32_t *)(buf + at);
	}
	return LB_OK;
}

static lb_mm_rows mm_rows(const lb_ctx *c, int fmt, int act) {
	switch (fmt) {
	case LB_W_BF16:
		return lb_mm_bf16_rows(c->isa);
	case LB_W_NVFP4:
		return lb_mm_nvfp4_rows(c->isa);
	}
	return lb_mm_fp8_rows(c->isa, act);
}

// mm_rows_per_task splits m's row groups into tasks by the work rule of
// lb_tasks, a multiple of LB_MM_R rows a task; a GEMV (T = 1) into one task
// a thread at most, so that each thread's LB_MM_R streams of rows run as
// long as they can: on the Zen 5 VM of 2026-12-03 (C calls of lb_matmul in
// a decode step's order, interleaved) one task a thread streamed BF16 at
// 0.80 of the bandwidth probe and FP8 at 0.71, against 0.75-0.76 and 0.66
// with lb_tasks's four a thread.
static int64_t mm_rows_per_task(const lb_ctx *c, const lb_mm *m) {
	int64_t groups = (m->out + LB_MM_R - 1) / LB_MM_R;
	int64_t ntasks = lb_tasks(c, (double)m->T * (double)m->out * (double)m->in, groups);
	if (m->T == 1 && ntasks > c->threads) ntasks = c->threads;
	return LB_MM_R * ((groups + ntasks - 1) / ntasks);
}

int lb_matmul(lb_ctx *c, float *y, const float *x, int64_t T, int fmt, int64_t out, int64_t in,
              const uint8_t *data, const float *scales, float global_scale, int act, float input_scale) {
	if (T <= 0) return LB_OK;
	lb_mm m = {T, in, out, x, NULL, data, scales, fmt, fmt == LB_W_NVFP4 ? global_scale : 1.0f, y, NULL, NULL};
	int rc = mm_prep(c, &m, x, act, input_scale);
	if (rc != LB_OK) return rc;
	mm_job j = {mm_rows(c, fmt, act), &m, mm_rows_per_task(c, &m)};
	lb_pool_run(c->pool, (out + j.rows_per_task - 1) / j.rows_per_task, mm_task, &j);
	return LB_OK;
}

// The products of lb_matmul3 as one task list: weight i owns tasks
// [first[i], first[i+1]).
typedef struct {
	lb_mm_rows rows;
	lb_mm m[3];
	int64_t rows_per_task[3];
	int64_t first[4];
} mm3_job;

static void mm3_task(void *arg, int64_t task, int tid) {
	(void)tid;
	const mm3_job *j = arg;
	int i = task >= j->first[1] ? (task >= j->first[2] ? 2 : 1) : 0;
	const lb_mm *m = &j->m[i];
	int64_t o0 = (task - j->first[i]) * j->rows_per_task[i];
	int64_t o1 = o0 + j->rows_per_task[i] < m->out ? o0 + j->rows_per_task[i] : m->out;
	j->rows(m, o0, o1);
}

int lb_matmul3(lb_ctx *c, int n, const float *x, int64_t T, int fmt, int64_t in, int act, float input_scale,
               float *y0, int64_t out0, const uint8_t *d0, const float *s0, float g0,
               float *y1, int64_t out1, const uint8_t *d1, const float *s1, float g1,
               float *y2, int64_t out2, const uint8_t *d2, const float *s2, float g2) {
	if (T <= 0 || n <= 0) return LB_OK;
	float *ys[3] = {y0, y1, y2};
	int64_t outs[3] = {out0, out1, out2};
	const uint8_t *ds[3] = {d0, d1, d2};
	const float *ss[3] = {s0, s1, s2};
	float gs[3] = {g0, g1, g2};
	mm3_job j = {mm_rows(c, fmt, act), {{0}}, {0}, {0}};
	lb_mm m0 = {T, in, outs[0], x, NULL, NULL, NULL, fmt, 1.0f, NULL, NULL, NULL};
	int rc = mm_prep(c, &m0, x, act, input_scale);
	if (rc != LB_OK) return rc;
	for (int i = 0; i < 3; i++) {
		j.first[i + 1] = j.first[i];
		if (i >= n) continue;
		lb_mm *m = &j.m[i];
		*m = m0;
		m->out = outs[i];
		m->w = ds[i];
		m->ws = ss[i];
		m->wpost = fmt == LB_W_NVFP4 ? gs[i] : 1.0f;
		m->y = ys[i];
		j.rows_per_task[i] = mm_rows_per_task(c, m);
		j.first[i + 1] += (m->out + j.rows_per_task[i] - 1) / j.rows_per_task[i];
	}
	lb_pool_run(c->pool, j.first[3], mm3_task, &j);
	return LB_OK;
}
