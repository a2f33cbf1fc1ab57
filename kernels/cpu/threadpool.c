//go:build cgo

// threadpool.c: a fixed pool of pthreads that runs one parallel loop at a
// time.
//
// Computes: lb_pool_run(p, n, fn, arg) calls fn(arg, i, tid) for i < n, each
// exactly once, on the pool's workers and the calling thread (tid 0), and
// returns when every call has returned. Tasks are handed out in order from
// an atomic counter, so a slow thread takes fewer of them.
//
// Layout: the pool holds threads-1 workers, created by lb_pool_new and
// joined by lb_pool_free. A job is published by bumping a generation
// counter; every worker checks in for every job (the `pending` count), so a
// job's fields are never rewritten while a worker may still read them.
// Workers spin for about LB_SPIN_NS after a job before sleeping on a
// condition variable, so that back-to-back ops of a decode step do not pay
// for a wake-up each; they never spin when the pool has more threads than
// the machine has CPUs. Workers block all signals: they never run Go code.
//
// Which thread runs a task never changes a result: the ops give each task
// a fixed part of the output and fix every reduction's order inside it.
//
// Tested by TestThreadsInvariance (results bit-identical for 1, 2 and 3
// threads) and by every op test.
#ifndef _GNU_SOURCE
#define _GNU_SOURCE // pthreads, clock_gettime, madvise
#endif
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
#include <sched.h>

#include "internal.h"

#define LB_SPIN_NS 200000

typedef struct {
	lb_pool *pool;
	int id;
} lb_worker;

struct lb_pool {
	int threads;
	int spin; // whether idle workers spin before sleeping
	pthread_t *tids;
	lb_worker *workers;
	int started; // workers created

	pthread_mutex_t mu;
	pthread_cond_t cv;
	_Atomic uint64_t gen;
	_Atomic int sleepers;
	_Atomic int pending;
	_Atomic int stop;

	// The current job, written before gen is bumped.
	lb_task fn;
	void *arg;
	int64_t ntasks;
	_Atomic int64_t next;
};

static inline void cpu_relax(void) {
#ifdef LB_X86
	_mm_pause();
#endif
}

static int64_t now_ns(void) {
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void run_tasks(lb_pool *p, int tid) {
	for (;;) {
		int64_t i = atomic_fetch_add_explicit(&p->next, 1, memory_order_relaxed);
		if (i >= p->ntasks) return;
		p->fn(p->arg, i, tid);
	}
}

// wait_job returns the generation of the next job after `seen`, or of the
// stop request.
static uint64_t wait_job(lb_pool *p, uint64_t seen) {
	if (p->spin) {
		int64_t deadline = now_ns() + LB_SPIN_NS;
		for (uint32_t i = 1;; i++) {
			uint64_t g = atomic_load(&p->gen);
			if (g != seen) return g;
			cpu_relax();
			if ((i & 1023) == 0 && now_ns() > deadline) break;
		}
	}
	pthread_mutex_lock(&p->mu);
	atomic_fetch_add(&p->sleepers, 1);
	uint64_t g;
	while ((g = atomic_load(&p->gen)) == seen) pthread_cond_wait(&p->cv, &p->mu);
	atomic_fetch_sub(&p->sleepers, 1);
	pthread_mutex_unlock(&p->mu);
	return g;
}

static void *worker_main(void *a) {
	lb_worker *w = a;
	lb_pool *p = w->pool;
	sigset_t all;
	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, NULL);
	uint64_t seen = 0;
	for (;;) {
		seen = wait_job(p, seen);
		if (atomic_load(&p->stop)) return NULL;
		run_tasks(p, w->id);
		atomic_fetch_sub_explicit(&p->pending, 1, memory_order_release);
	}
}

// wake publishes a new generation and wakes sleeping workers. The seq_cst
// order of gen and sleepers means a worker about to sleep either sees the
// new generation or is counted in sleepers and gets the broadcast.
static void wake(lb_pool *p) {
	atomic_fetch_add(&p->gen, 1);
	if (atomic_load(&p->sleepers) > 0) {
		pthread_mutex_lock(&p->mu);
		pthread_cond_broadcast(&p->cv);
		pthread_mutex_unlock(&p->mu);
	}
}

lb_pool *lb_pool_new(int threads) {
	if (threads < 1) return NULL;
	lb_pool *p = calloc(1, sizeof *p);
	if (!p) return NULL;
	p->threads = threads;
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	p->spin = cpus < 1 || threads <= cpus;
	pthread_mutex_init(&p->mu, NULL);
	pthread_cond_init(&p->cv, NULL);
	p->tids = calloc((size_t)threads, sizeof *p->tids);
	p->workers = calloc((size_t)threads, sizeof *p->workers);
	if (!p->tids || !p->workers) {
		lb_pool_free(p);
		return NULL;
	}
	for (int i = 1; i < threads; i++) {
		p->workers[i] = (lb_worker){p, i};
		if (pthread_create(&p->tids[i], NULL, worker_main, &p->workers[i]) != 0) {
			lb_pool_free(p);
			return NULL;
		}
		p->started = i;
	}
	return p;
}

void lb_pool_free(lb_pool *p) {
	if (!p) return;
	atomic_store(&p->stop, 1);
	wake(p);
	for (int i = 1; i <= p->started; i++) pthread_join(p->tids[i], NULL);
	pthread_cond_destroy(&p->cv);
	pthread_mutex_destroy(&p->mu);
	free(p->tids);
	free(p->workers);
	free(p);
}

int lb_pool_threads(const lb_pool *p) { return p->threads; }

void lb_pool_run(lb_pool *p, int64_t ntasks, lb_task fn, void *arg) {
	if (ntasks <= 0) return;
	if (p->threads == 1 || ntasks == 1) {
		for (int64_t i = 0; i < ntasks; i++) fn(arg, i, 0);
		return;
	}
	p->fn = fn;
	p->arg = arg;
	p->ntasks = ntasks;
	atomic_store_explicit(&p->next, 0, memory_order_relaxed);
	atomic_store_explicit(&p->pending, p->threads - 1, memory_order_relaxed);
	wake(p);
	run_tasks(p, 0);
	for (uint32_t i = 1; atomic_load_explicit(&p->pending, memory_order_acquire) != 0; i++) {
		cpu_relax();
		if (!p->spin && (i & 63) == 0) sched_yield();
	}
}
