//go:build cgo

// add.c: the Add op, a residual connection.
//
// Computes: out[i] = a[i] + b[i] in float32.
//
// Layout: flat arrays of n floats; out may alias a or b.
//
// Variants: one portable C loop, which the compiler vectorizes; it is
// memory-bound, so no per-ISA version would be faster. Large n is split
// over the pool in fixed chunks.
//
// Tested by TestAdd and kerneltest.
#include "internal.h"

#define CHUNK 65536

typedef struct {
	float *out;
	const float *a, *b;
	int64_t n;
} add_job;

static void add_range(float *out, const float *a, const float *b, int64_t n) {
	for (int64_t i = 0; i < n; i++) out[i] = a[i] + b[i];
}

static void add_task(void *arg, int64_t task, int tid) {
	(void)tid;
	const add_job *j = arg;
	int64_t i = task * CHUNK, n = j->n - i < CHUNK ? j->n - i : CHUNK;
	add_range(j->out + i, j->a + i, j->b + i, n);
}

void lb_add(lb_ctx *c, float *out, const float *a, const float *b, int64_t n) {
	if (n <= 0) return;
	if (lb_tasks(c, (double)n / 4, (n + CHUNK - 1) / CHUNK) == 1) {
		add_range(out, a, b, n);
		return;
	}
	add_job j = {out, a, b, n};
	lb_pool_run(c->pool, (n + CHUNK - 1) / CHUNK, add_task, &j);
}
