//go:build cgo

// rope.c: the RoPE op, NeoX style (rotate_half), in place.
//
// Computes: for every token t, head h and j < rotary_dim/2, with
//   inv_freq[j] = theta^(-2j/rotary_dim)             (float64, pow)
//   angle       = pos[t] · inv_freq[j]               (float64)
//   c, s        = cos(angle), sin(angle) rounded to float32
// the pair (x0, x1) = (x[t,h,j], x[t,h,j+rotary_dim/2]) becomes
//   (x0·c − x1·s, x1·c + x0·s)                        (float32, no FMA)
// Dimensions from rotary_dim to head_dim are left alone.
//
// Layout: x [T, heads, head_dim]; pos [T].
//
// Variants: one portable C version, the same bits on every code path.
// inv_freq is computed once per call; each token's cos/sin table once per
// token and shared by its heads. Tokens are split over the pool when there
// is enough work.
//
// Tested by TestRoPE and kerneltest.
#include <math.h>

#include "internal.h"

typedef struct {
	float *x;
	const int32_t *pos;
	const double *inv_freq;
	float *cs; // per thread: cos [half], sin [half]
	int64_t T, heads, head_dim, half, tokens_per_task;
} rope_job;

static void rope_task(void *arg, int64_t task, int tid) {
	const rope_job *j = arg;
	float *cs = j->cs + (int64_t)tid * 2 * j->half, *sn = cs + j->half;
	for (int64_t t = task * j->tokens_per_task; t < (task + 1) * j->tokens_per_task && t < j->T; t++) {
		for (int64_t i = 0; i < j->half; i++) {
			double angle = (double)j->pos[t] * j->inv_freq[i];
			cs[i] = (float)cos(angle);
			sn[i] = (float)sin(angle);
		}
		for (int64_t h = 0; h < j->heads; h++) {
			float *p = j->x + (t * j->heads + h) * j->head_dim, *q = p + j->half;
			for (int64_t i = 0; i < j->half; i++) {
				float x0 = p[i], x1 = q[i];
				p[i] = x0 * cs[i] - x1 * sn[i];
				q[i] = x1 * cs[i] + x0 * sn[i];
			}
		}
	}
}

int lb_rope(lb_ctx *c, float *x, int64_t T, int64_t heads, int64_t head_dim, int64_t rotary_dim,
            const int32_t *pos, double theta) {
	int64_t half = rotary_dim / 2;
	if (T <= 0 || heads <= 0 || half <= 0) return LB_OK;
	double *inv = lb_scratch(c, (size_t)half * sizeof(double) + (size_t)c->threads * 2 * (size_t)half * sizeof(float));
	if (!inv) return LB_ERR_NOMEM;
	for (int64_t i = 0; i < half; i++) inv[i] = pow(theta, -(double)(2 * i) / (double)rotary_dim);
	// Each token costs half sin/cos pairs (~40 units each) plus heads·half rotations.
	int64_t ntasks = lb_tasks(c, (double)T * (double)half * (40.0 + 4.0 * (double)heads), T);
	rope_job j = {x, pos, inv, (float *)(inv + half), T, heads, head_dim, half, (T + ntasks - 1) / ntasks};
	lb_pool_run(c->pool, (T + j.tokens_per_task - 1) / j.tokens_per_task, rope_task, &j);
	return LB_OK;
}
