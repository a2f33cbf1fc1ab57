//go:build cgo

// threadpool.c: a fixed pool of pthreads that runs one parallel loop at a
// time.
//
// Computes: lb_pool_run(p, n, fn, arg) calls fn(arg, i, tid) for i < n, each
// exactly once, on the pool's workers and the calling thread (tid 0), and
// returns when every call has returned. Tasks are handed out in order, so a
// slow thread takes fewer of them.
//
// Layout: the pool holds threads-1 workers, created by lb_pool_new and
// joined by lb_pool_free. A job is published as one 64-bit word, its
// generation in the high half and the next task's index in the low half;
// a thread takes task i by a compare-and-swap of (gen, i) to (gen, i+1),
// which fails once a newer job has replaced the word, so a worker that
// wakes late can neither block a job nor take a task of the wrong one. The
// caller waits only until the job's tasks are done, not for every worker:
// a descheduled worker (a busy machine, the Go runtime's own threads) costs
// a job nothing unless it holds a task. Workers spin for about LB_SPIN_NS
// after a job before sleeping on a condition variable, so that the ops of
// a decode step do not each pay for a wake-up; they never spin when the
// pool has more threads than the machine has CPUs. A caller whose wait
// drags on yields its CPU. Workers block all signals: they never run Go
// code.
//
// Which thread runs a task never changes a result: the ops give each task
// a fixed part of the output and fix every reduction's order inside it.
//
// Tested by TestThreadsInvariance (results bit-identical for 1, 2, 3 and 5
// threads, more threads than CPUs included), TestPoolHandoff (a call never
// returns before its tasks are done) and by every op test.
#ifndef _GNU_SOURCE
#define _GNU_SOURCE // pthreads, clock_gettime, madvise
#endif
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

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
	_Atomic int sleepers;
	_Atomic int stop;

	// The current job: work is gen << 32 | next task (UINT32_MAX once the
	// job is closed); fn, arg and ntasks are written after the previous
	// job's word is closed and before work publishes a new generation.
	_Atomic uint64_t work;
	_Atomic(lb_task) fn;
	_Atomic(void *) arg;
	_Atomic int64_t ntasks;
	_Atomic int64_t done;
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

// run_tasks takes and runs tasks of generation gen until none is left.
static void run_tasks(lb_pool *p, uint32_t gen, int tid) {
	uint64_t w = atomic_load(&p->work);
	for (;;) {
		if ((uint32_t)(w >> 32) != gen) return;
		int64_t i = (int64_t)(uint32_t)w;
		lb_task fn = atomic_load_explicit(&p->fn, memory_order_acquire);
		void *arg = atomic_load_explicit(&p->arg, memory_order_acquire);
		if (i >= atomic_load_explicit(&p->ntasks, memory_order_acquire)) return;
		// On failure w is reloaded: another thread took task i, or the job
		// was closed or replaced (then fn, arg and ntasks may be the next
		// job's, unused). A worker that read the next job's fields cannot
		// succeed: lb_pool_run closes the word before writing them.
		if (atomic_compare_exchange_weak(&p->work, &w, w + 1)) {
			fn(arg, i, tid);
			atomic_fetch_add_explicit(&p->done, 1, memory_order_release);
			w = atomic_load(&p->work);
		}
	}
}

static uint32_t gen_of(lb_pool *p) { return (uint32_t)(atomic_load(&p->work) >> 32); }

// wait_job returns the generation of the next job after `seen`, or of the
// stop request.
static uint32_t wait_job(lb_pool *p, uint32_t seen) {
	if (p->spin) {
		int64_t deadline = now_ns() + LB_SPIN_NS;
		for (uint32_t i = 1;; i++) {
			uint32_t g = gen_of(p);
			if (g != seen) return g;
			cpu_relax();
			if ((i & 1023) == 0 && now_ns() > deadline) break;
		}
	}
	pthread_mutex_lock(&p->mu);
	atomic_fetch_add(&p->sleepers, 1);
	uint32_t g;
	while ((g = gen_of(p)) == seen) pthread_cond_wait(&p->cv, &p->mu);
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
	uint32_t seen = 0;
	for (;;) {
		seen = wait_job(p, seen);
		if (atomic_load(&p->stop)) return NULL;
		run_tasks(p, seen, w->id);
	}
}

// publish starts generation gen with ntasks tasks and wakes sleeping
// workers. The seq_cst order of work and sleepers means a worker about to
// sleep either sees the new generation or is counted in sleepers and gets
// the broadcast.
static void publish(lb_pool *p, uint32_t gen) {
	atomic_store(&p->work, (uint64_t)gen << 32);
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
	publish(p, gen_of(p) + 1);
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
	uint32_t gen = gen_of(p) + 1;
	// Close the previous job's word first. A worker may still hold it with
	// every task taken, (gen-1, n): had it read the new, larger ntasks
	// below, its compare-and-swap to (gen-1, n+1) would succeed before the
	// new word is published, and it would run task n of the new job early
	// and count it twice in done, so this call could return while a task
	// still ran (seen as outputs missing once in about a million MatMuls,
	// and as a crash when the task read the returned caller's stack).
	atomic_store(&p->work, (uint64_t)(gen - 1) << 32 | UINT32_MAX);
	atomic_store_explicit(&p->fn, fn, memory_order_release);
	atomic_store_explicit(&p->arg, arg, memory_order_release);
	atomic_store_explicit(&p->ntasks, ntasks, memory_order_release);
	atomic_store_explicit(&p->done, 0, memory_order_relaxed);
	publish(p, gen);
	run_tasks(p, gen, 0);
	for (uint32_t i = 1; atomic_load_explicit(&p->done, memory_order_acquire) < ntasks; i++) {
		cpu_relax();
		if (i > 4096 || !p->spin) sched_yield();
	}
}
