//go:build cgo

// silu_mul.c: the SiLUMul op, the gate of a SwiGLU MLP.
//
// Computes: out[i] = gate[i] / (1 + expf(−gate[i])) · up[i] in float32, in
// that order (expf from the C library).
//
// Layout: flat arrays of n floats; out may alias gate or up (each element
// is read before it is written).
//
// Variants: one portable C version, the same bits on every code path and
// for every element whatever n is. Large n is split over the pool in fixed
// chunks.
//
// Tested by TestSiLUMul and kerneltest.
#include <math.h>

#include "internal.h"

#define CHUNK 16384

typedef struct {
	float *out;
	const float *gate, *up;
	int64_t n;
} silu_job;

static void silu_range(float *out, const float *gate, const float *up, int64_t n) {
	for (int64_t i = 0; i < n; i++) {
		float g = gate[i];
		out[i] = g / (1.0f + expf(-g)) * up[i];
	}
}

static void silu_task(void *arg, int64_t task, int tid) {
	(void)tid;
	const silu_job *j = arg;
	int64_t i = task * CHUNK, n = j->n - i < CHUNK ? j->n - i : CHUNK;
	silu_range(j->out + i, j->gate + i, j->up + i, n);
}

void lb_silu_mul(lb_ctx *c, float *out, const float *gate, const float *up, int64_t n) {
	if (n <= 0) return;
	// expf is worth about 16 multiply-adds.
	if (lb_tasks(c, 16.0 * (double)n, (n + CHUNK - 1) / CHUNK) == 1) {
		silu_range(out, gate, up, n);
		return;
	}
	silu_job j = {out, gate, up, n};
	lb_pool_run(c->pool, (n + CHUNK - 1) / CHUNK, silu_task, &j);
}
