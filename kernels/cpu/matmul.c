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
// thread (lb_tasks).
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
// activation quantizations × code paths, against float64 loops), and by
// TestBatchInvariance and TestThreadsInvariance.
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

int lb_matmul(lb_ctx *c, float *y, const float *x, int64_t T, int fmt, int64_t out, int64_t in,
              const uint8_t *data, const float *scales, float global_scale, int act, float input_scale) {
	if (T <= 0) return LB_OK;
	lb_mm m = {T, in, out, x, NULL, data, scales, fmt, fmt == LB_W_NVFP4 ? global_scale : 1.0f, y};
	if (act != LB_A_NONE) {
		float *buf = lb_scratch(c, ((size_t)T * (size_t)in + (size_t)T) * sizeof(float));
		if (!buf) return LB_ERR_NOMEM;
		int has_post;
		lb_act_prep(c, buf, buf + T * in, &has_post, x, T, in, act, input_scale);
		m.x = buf;
		m.xpost = has_post ? buf + T * in : NULL;
	}
	lb_mm_rows rows;
	switch (fmt) {
	case LB_W_BF16:
		rows = lb_mm_bf16_rows(c->isa);
		break;
	case LB_W_NVFP4:
		rows = lb_mm_nvfp4_rows(c->isa);
		break;
	default:
		rows = lb_mm_fp8_rows(c->isa);
	}
	int64_t groups = (out + LB_MM_R - 1) / LB_MM_R;
	int64_t ntasks = lb_tasks(c, (double)T * (double)out * (double)in, groups);
	mm_job j = {rows, &m, LB_MM_R * ((groups + ntasks - 1) / ntasks)};
	lb_pool_run(c->pool, (out + j.rows_per_task - 1) / j.rows_per_task, mm_task, &j);
	return LB_OK;
}
