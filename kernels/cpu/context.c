//go:build cgo

// context.c: creation and destruction of an lb_ctx, its scratch memory, and
// the rule that decides how many tasks an op is split into.
//
// Computes: lb_ctx_new(&c, isa, threads) makes a context for one code path
// with a pool of `threads` threads (the caller included); lb_ctx_free joins
// the threads and frees everything. lb_scratch hands out one growable
// 64-byte-aligned buffer: ops run one at a time on a context (Go holds a
// mutex), so they share it. It grows only when an op needs more than any op
// before it, so steady-state calls do not allocate.
//
// Tested through every op test (tests create and close contexts for each
// code path and thread count).
#ifndef _GNU_SOURCE
#define _GNU_SOURCE // pthreads, clock_gettime, madvise
#endif
#include <stdlib.h>

#include "internal.h"

// Below this much work (multiply-adds or comparable units) an op runs on the
// calling thread: waking the pool costs a few microseconds.
#define LB_SERIAL_WORK 32768.0

int lb_ctx_new(lb_ctx **out, int isa, int threads) {
	*out = NULL;
	if (!lb_isa_supported(isa)) return LB_ERR_ISA;
	lb_ctx *c = calloc(1, sizeof *c);
	if (!c) return LB_ERR_NOMEM;
	c->isa = isa;
	c->threads = threads;
	c->pool = lb_pool_new(threads);
	if (!c->pool) {
		free(c);
		return LB_ERR_THREADS;
	}
	*out = c;
	return LB_OK;
}

void lb_ctx_free(lb_ctx *c) {
	if (!c) return;
	lb_pool_free(c->pool);
	free(c->scratch);
	free(c);
}

void *lb_scratch(lb_ctx *c, size_t bytes) {
	if (bytes <= c->scratch_bytes) return c->scratch;
	size_t n = (bytes + 63) & ~(size_t)63;
	void *p = NULL;
	if (posix_memalign(&p, 64, n) != 0) return NULL;
	free(c->scratch);
	c->scratch = p;
	c->scratch_bytes = n;
	return p;
}

int64_t lb_tasks(const lb_ctx *c, double work, int64_t max_tasks) {
	if (c->threads == 1 || work < LB_SERIAL_WORK || max_tasks <= 1) return 1;
	int64_t n = 4 * (int64_t)c->threads;
	// Keep each task worth at least a few serial thresholds.
	int64_t by_work = (int64_t)(work / (4 * LB_SERIAL_WORK)) + 1;
	if (n > by_work) n = by_work;
	if (n < c->threads) n = c->threads;
	return n < max_tasks ? n : max_tasks;
}
