//go:build cgo

// rmsnorm.c: the RMSNorm op.
//
// Computes: y[t,:] = x[t,:] / sqrt(mean(x[t,:]²) + eps) · g for every row,
// with g = weight or, when zero_centered (Qwen3.5), g = 1 + weight (a
// float32 add). The sum of squares accumulates in float64 (exact products,
// four lanes summed pairwise), the root is taken in float64, and each
// x / rms is rounded to float32 before the float32 multiply by g.
//
// Layout: x, y [T, D]; weight [D]. y may alias x (each element is read
// before it is written).
//
// Variants: one portable C version (the compiler vectorizes the lanes); it
// gives the same bits on every code path. Rows are split over the pool when
// there is enough work; each row's result never depends on the split.
//
// Tested by TestRMSNorm and kerneltest.
#include <math.h>

#include "internal.h"

static void rms_row(float *y, const float *x, const float *w, int64_t D, float eps, int zero_centered) {
	double acc[4] = {0, 0, 0, 0};
	int64_t i = 0;
	for (; i + 4 <= D; i += 4)
		for (int l = 0; l < 4; l++) acc[l] += (double)x[i + l] * (double)x[i + l];
	double ss = (acc[0] + acc[2]) + (acc[1] + acc[3]);
	for (; i < D; i++) ss += (double)x[i] * (double)x[i];
	double rms = sqrt(ss / (double)D + (double)eps);
	for (i = 0; i < D; i++) {
		float g = zero_centered ? 1.0f + w[i] : w[i];
		y[i] = (float)((double)x[i] / rms) * g;
	}
}

typedef struct {
	float *y;
	const float *x, *w;
	int64_t T, D, rows_per_task;
	float eps;
	int zero_centered;
} rms_job;

static void rms_task(void *arg, int64_t task, int tid) {
	(void)tid;
	const rms_job *j = arg;
	for (int64_t t = task * j->rows_per_task; t < (task + 1) * j->rows_per_task && t < j->T; t++)
		rms_row(j->y + t * j->D, j->x + t * j->D, j->w, j->D, j->eps, j->zero_centered);
}

void lb_rmsnorm(lb_ctx *c, float *y, const float *x, const float *w, int64_t T, int64_t D, float eps,
                int zero_centered) {
	if (T <= 0 || D <= 0) return;
	int64_t ntasks = lb_tasks(c, 4.0 * (double)T * (double)D, T);
	rms_job j = {y, x, w, T, D, (T + ntasks - 1) / ntasks, eps, zero_centered};
	lb_pool_run(c->pool, (T + j.rows_per_task - 1) / j.rows_per_task, rms_task, &j);
}
