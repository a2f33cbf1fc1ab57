//go:build cgo

// bandwidth.c: the memory-bandwidth probe, the roofline of decode.
//
// Computes: lb_memory_bandwidth(c, bytes) allocates a buffer of `bytes`
// rounded down to whole 2 MiB chunks (at least one), 2 MiB aligned and
// advised to use huge pages, writes every byte of it from the pool's
// threads (so its pages exist and sit near the threads that touched them),
// reads it once to warm up, then times BW_REPS full read passes and
// returns bytes / (fastest pass in seconds). A pass hands the 2 MiB chunks
// to the pool's threads like a matmul hands out weight rows, and each
// thread XORs every 64-byte line into registers, walking BW_STREAMS equal
// parts of the chunk side by side: read-only streams, the access pattern
// of a decode GEMV over its weights. With a buffer much
// larger than the last-level cache (the Go benchmarks use 1 GiB) this is
// DRAM read bandwidth for this pool's thread count; a buffer that fits in
// cache measures cache bandwidth instead. Returns 0 when the buffer cannot
// be allocated.
//
// Variants: the read loop per code path: _avx512 (64-byte loads), _avx2
// (32-byte), _generic (8-byte words).
//
// Tested by TestMemoryBandwidth; used by the GEMV and GEMM benchmarks.
#ifndef _GNU_SOURCE
#define _GNU_SOURCE // pthreads, clock_gettime, madvise
#endif
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>

#include "internal.h"

#define BW_CHUNK ((int64_t)2 << 20)
#define BW_REPS 5

typedef uint64_t (*read_fn)(const uint8_t *p, int64_t n);

typedef struct {
	uint8_t *buf;
	read_fn read;
	uint64_t *sink; // one cache line per thread
} bw_job;

// BW_STREAMS is how many parts of its chunk a read task walks through side
// by side. The decode GEMVs read that way (LB_MM_ROWS: four runs of rows a
// task), and so do the fastest reads on the Zen 5 VM of 2026-12-03: with 2
// threads, 1 GiB read as 1 stream a thread gave median passes of 64-71
// GB/s, 2 to 8 streams a thread 77-90 (81-90 at 4), and 34 against 46-48
// while other guests loaded the host's memory. A probe slower than the
// kernels' own pattern would flatter every ratio against it.
#define BW_STREAMS 4

static uint64_t read_generic(const uint8_t *p, int64_t n) {
	const int64_t part = n / BW_STREAMS;
	uint64_t a[BW_STREAMS] = {0};
	for (int64_t i = 0; i < part; i += 32)
		for (int s = 0; s < BW_STREAMS; s++) {
			const uint64_t *q = (const uint64_t *)(p + s * part + i);
			a[s] ^= q[0] ^ q[1] ^ q[2] ^ q[3];
		}
	uint64_t r = 0;
	for (int s = 0; s < BW_STREAMS; s++) r ^= a[s];
	return r;
}

#ifdef LB_X86
LB_AVX2 static uint64_t read_avx2(const uint8_t *p, int64_t n) {
	const int64_t part = n / BW_STREAMS;
	__m256i a[BW_STREAMS];
	for (int s = 0; s < BW_STREAMS; s++) a[s] = _mm256_setzero_si256();
	for (int64_t i = 0; i < part; i += 128)
		for (int s = 0; s < BW_STREAMS; s++) {
			const uint8_t *q = p + s * part + i;
			__m256i v = _mm256_xor_si256(_mm256_load_si256((const __m256i *)q), _mm256_load_si256((const __m256i *)(q + 32)));
			v = _mm256_xor_si256(v, _mm256_load_si256((const __m256i *)(q + 64)));
			a[s] = _mm256_xor_si256(a[s], _mm256_xor_si256(v, _mm256_load_si256((const __m256i *)(q + 96))));
		}
	__m256i r = a[0];
	for (int s = 1; s < BW_STREAMS; s++) r = _mm256_xor_si256(r, a[s]);
	return (uint64_t)_mm256_extract_epi64(r, 0) ^ (uint64_t)_mm256_extract_epi64(r, 3);
}

LB_AVX512 static uint64_t read_avx512(const uint8_t *p, int64_t n) {
	const int64_t part = n / BW_STREAMS;
	__m512i a[BW_STREAMS];
	for (int s = 0; s < BW_STREAMS; s++) a[s] = _mm512_setzero_si512();
	for (int64_t i = 0; i < part; i += 256)
		for (int s = 0; s < BW_STREAMS; s++) {
			const uint8_t *q = p + s * part + i;
			__m512i v = _mm512_xor_si512(_mm512_load_si512((const void *)q), _mm512_load_si512((const void *)(q + 64)));
			v = _mm512_xor_si512(v, _mm512_load_si512((const void *)(q + 128)));
			a[s] = _mm512_xor_si512(a[s], _mm512_xor_si512(v, _mm512_load_si512((const void *)(q + 192))));
		}
	__m512i r = a[0];
	for (int s = 1; s < BW_STREAMS; s++) r = _mm512_xor_si512(r, a[s]);
	return (uint64_t)_mm512_reduce_or_epi64(r);
}
#endif

static void touch_task(void *arg, int64_t task, int tid) {
	(void)tid;
	const bw_job *j = arg;
	memset(j->buf + task * BW_CHUNK, (int)(task & 0x7F) + 1, (size_t)BW_CHUNK);
}

static void read_task(void *arg, int64_t task, int tid) {
	const bw_job *j = arg;
	j->sink[8 * tid] += j->read(j->buf + task * BW_CHUNK, BW_CHUNK);
}

static double seconds(void) {
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

double lb_memory_bandwidth(lb_ctx *c, int64_t bytes) {
	int64_t chunks = bytes / BW_CHUNK > 0 ? bytes / BW_CHUNK : 1;
	size_t size = (size_t)(chunks * BW_CHUNK);
	void *buf = NULL;
	if (posix_memalign(&buf, (size_t)BW_CHUNK, size) != 0) return 0;
#ifdef MADV_HUGEPAGE
	madvise(buf, size, MADV_HUGEPAGE);
#endif
	uint64_t *sink = calloc((size_t)c->threads * 8, sizeof *sink);
	if (!sink) {
		free(buf);
		return 0;
	}
	bw_job j = {buf, read_generic, sink};
#ifdef LB_X86
	if (c->isa == LB_ISA_AVX512) j.read = read_avx512;
	if (c->isa == LB_ISA_AVX2) j.read = read_avx2;
#endif
	lb_pool_run(c->pool, chunks, touch_task, &j);
	lb_pool_run(c->pool, chunks, read_task, &j);
	double best = 0;
	for (int rep = 0; rep < BW_REPS; rep++) {
		double t0 = seconds();
		lb_pool_run(c->pool, chunks, read_task, &j);
		double dt = seconds() - t0;
		if (rep == 0 || dt < best) best = dt;
	}
	// Keep the reads observable.
	volatile uint64_t keep = 0;
	for (int i = 0; i < c->threads; i++) keep ^= sink[8 * i];
	(void)keep;
	free(sink);
	free(buf);
	return best > 0 ? (double)size / best : 0;
}
