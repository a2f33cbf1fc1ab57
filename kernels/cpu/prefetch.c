//go:build cgo

// prefetch.c: the hint of the weights the next matmul will stream, and the
// prefetches that start reading them while the memory bus would idle.
//
// Why: a decode step alternates GEMVs, which stream weights at 20-25 GB/s,
// with latency-bound work that leaves the bus mostly idle: attention (about
// 120 µs a layer at 18 GB/s on the 2-core VM), the norms, RoPE and SiLU (the
// pool's worker spins while the caller runs them alone), and the Go side
// between ops. Each GEMV then starts from DRAM. The runtime names the
// weights of the next matmul (kernels/cpu Ops.Prefetch); until that matmul
// starts, the idle pool workers (threadpool.c) and attention's tasks
// (attention.c) prefetch its first rows into L2, so part of it is read from
// cache instead of DRAM.
//
// Computes nothing: a prefetch never faults and changes no result, which is
// also why the hint holds addresses (uintptr_t), not pointers: Go may pass
// memory it later frees, and a stale hint costs only useless prefetches.
// Readers and the writer race on purpose, through atomics: a reader that
// sees half of a new hint prefetches a wrong row, nothing worse.
//
// Layout: claims are in rows of the weights' task order (weight 0's rows,
// then weight 1's, ...), so the prefix that gets prefetched is the part of
// the matmul its first tasks read; row r of weight i is bytes
// [r·data_bytes/out, (r+1)·data_bytes/out) of its data and the same share
// of its scales.
#include "internal.h"

void lb_hint_clear(lb_hint *h) { atomic_store_explicit(&h->rows, 0, memory_order_release); }

void lb_hint_set(lb_hint *h, int n, const uintptr_t *data, const int64_t *dbytes, const uintptr_t *scales,
                 const int64_t *sbytes, const int64_t *out, const int64_t *rpt, int64_t head, int64_t cap) {
	atomic_store_explicit(&h->rows, 0, memory_order_release);
	int64_t rows = 0;
	for (int i = 0; i < 3; i++) {
		atomic_store_explicit(&h->first[i], rows, memory_order_relaxed);
		if (i >= n || out[i] <= 0) continue;
		int64_t per_row = (dbytes[i] + sbytes[i]) / out[i] + 1;
		// Rows to claim: a prefix of the matmul, or head rows of each task.
		int64_t want = out[i];
		if (head > 0 && rpt[i] > head) want = ((out[i] + rpt[i] - 1) / rpt[i]) * head;
		int64_t r = cap / per_row < want ? cap / per_row : want;
		cap -= r * per_row;
		atomic_store_explicit(&h->data[i], data[i], memory_order_relaxed);
		atomic_store_explicit(&h->scales[i], scales[i], memory_order_relaxed);
		atomic_store_explicit(&h->dbytes[i], dbytes[i], memory_order_relaxed);
		atomic_store_explicit(&h->sbytes[i], sbytes[i], memory_order_relaxed);
		atomic_store_explicit(&h->out[i], out[i], memory_order_relaxed);
		atomic_store_explicit(&h->rpt[i], rpt[i], memory_order_relaxed);
		rows += r;
	}
	atomic_store_explicit(&h->first[3], rows, memory_order_relaxed);
	atomic_store_explicit(&h->head, head, memory_order_relaxed);
	atomic_store_explicit(&h->next, 0, memory_order_relaxed);
	atomic_store_explicit(&h->rows, rows, memory_order_release);
}

// span prefetches bytes [lo, hi) from base into L2, a line at a time.
static inline void span(uintptr_t base, int64_t lo, int64_t hi) {
	for (int64_t b = lo & ~(int64_t)63; b < hi; b += 64) lb_prefetch_l2((const uint8_t *)(base + (uintptr_t)b));
}

int lb_hint_step(lb_hint *h, int64_t n) {
	int64_t rows = atomic_load_explicit(&h->rows, memory_order_acquire);
	if (rows <= 0 || atomic_load_explicit(&h->next, memory_order_relaxed) >= rows) return 0;
	int64_t k = atomic_fetch_add_explicit(&h->next, n, memory_order_relaxed);
	if (k >= rows) return 0;
	int64_t e = k + n < rows ? k + n : rows;
	for (; k < e; k++) {
		int i = 0;
		while (i < 2 && k >= atomic_load_explicit(&h->first[i + 1], memory_order_relaxed)) i++;
		int64_t r = k - atomic_load_explicit(&h->first[i], memory_order_relaxed);
		int64_t out = atomic_load_explicit(&h->out[i], memory_order_relaxed);
		int64_t head = atomic_load_explicit(&h->head, memory_order_relaxed);
		int64_t rpt = atomic_load_explicit(&h->rpt[i], memory_order_relaxed);
		if (head > 0 && rpt > head) r = (r / head) * rpt + r % head; // task r/head's row r%head
		if (r >= out) continue;
		if (out <= 0) return 0;
		int64_t db = atomic_load_explicit(&h->dbytes[i], memory_order_relaxed);
		int64_t sb = atomic_load_explicit(&h->sbytes[i], memory_order_relaxed);
		span(atomic_load_explicit(&h->data[i], memory_order_relaxed), r * db / out, (r + 1) * db / out);
		if (sb > 0) span(atomic_load_explicit(&h->scales[i], memory_order_relaxed), r * sb / out, (r + 1) * sb / out);
	}
	return 1;
}
