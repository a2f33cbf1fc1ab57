//go:build cgo

// log_softmax.c: the LogSoftmax op over the vocabulary.
//
// Computes, per row: m = max_i x[i] (float32); sum = Σ_i expf(x[i] − m)
// accumulated in float64 in order of i; lse = m + log(sum) (float64);
// out[i] = x[i] − lse evaluated in float64 and rounded to float32.
//
// Layout: logits, out [T, V]; out may alias logits.
//
// Variants: one portable C version, the same bits on every code path. Rows
// are split over the pool when there is enough work.
//
// Tested by TestLogSoftmax and kerneltest.
#include <math.h>

#include "internal.h"

static void lsm_row(float *out, const float *x, int64_t V) {
	float m = -INFINITY;
	for (int64_t i = 0; i < V; i++) m = x[i] > m ? x[i] : m;
	double sum = 0;
	for (int64_t i = 0; i < V; i++) sum += expf(x[i] - m);
	double lse = (double)m + log(sum);
	for (int64_t i = 0; i < V; i++) out[i] = (float)((double)x[i] - lse);
}

typedef struct {
	float *out;
	const float *x;
	int64_t T, V, rows_per_task;
} lsm_job;

static void lsm_task(void *arg, int64_t task, int tid) {
	(void)tid;
	const lsm_job *j = arg;
	for (int64_t t = task * j->rows_per_task; t < (task + 1) * j->rows_per_task && t < j->T; t++)
		lsm_row(j->out + t * j->V, j->x + t * j->V, j->V);
}

void lb_log_softmax(lb_ctx *c, float *out, const float *logits, int64_t T, int64_t V) {
	if (T <= 0 || V <= 0) return;
	int64_t ntasks = lb_tasks(c, 16.0 * (double)T * (double)V, T);
	lsm_job j = {out, logits, T, V, (T + ntasks - 1) / ntasks};
	lb_pool_run(c->pool, (T + j.rows_per_task - 1) / j.rows_per_task, lsm_task, &j);
}
