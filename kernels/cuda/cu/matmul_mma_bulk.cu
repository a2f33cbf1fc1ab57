// matmul_mma_bulk.cu: lb_mma_gemv_bulk, the tensor-core GEMV of decode
// steps of up to 16 tokens on sm_90 (which ones: useBulk in matmul.go):
// y[t,o] = Σ_i x[t,i]·w[o,i] on matmul_mma.cu's layouts (weights in mma
// tiles, x in mma terms) with its numerics and reduction order, so that its
// results are bit-identical to lb_mma_gemv's and lb_mma_gemm's.
//
// Why: a decode step's GEMV only streams weights (512 bytes a 16 × 16
// tile, 3 mma a token group). lb_mma_gemv copies each tile by cp.async, 16
// bytes a lane, and holds a span's 16 weight fragments and 48 activation
// fragments in 211 registers: two blocks of 4 warps an SM. A warp's span
// costs the activations' L2 latency plus a chain of 48 dependent mma, so 8
// warps an SM left it at 0.60 of the copy rate. Here the tensor memory
// accelerator copies a whole span (a row tile's 16 consecutive tiles, up to
// 8 KB contiguous) with one instruction (cp.async.bulk), whose completion
// an mbarrier counts in bytes, and each weight fragment is read from shared
// memory by its chunk: 128 registers, 16 warps an SM.
//
// Measured on the H200 (BenchmarkKernels gemv-bf16, one token, graph
// replays): with 4 warps a block, three blocks an SM, one span in flight a
// warp, 12288 × 4096 took 33.5 µs against lb_mma_gemv's 41.0 and the
// 151936 × 4096 head 281.8 against 410.8 (the copy rate); 4096 × 4096 and
// 4096 × 12288 (256 blocks: two an SM) stayed at 14.1 and 40.7 (13.4,
// 40.1). Rings of 2 and 3 spans a warp were slower at every shape (up to
// 1.6x at 3), and so was prefetching the next spans' activations into L1;
// hence blocks of 8 warps, for 16 warps an SM on the 4096-row shapes too:
// 11.2, 32.1, 32.6 and 294.2 µs for the four shapes (0.70-1.00 of the copy
// rate). Reading float32 activations and splitting them here instead of
// after a split launch was 1.2-1.45x slower (BENCHMARKS.md).
//
// Grid and order, as lb_mma_gemv's: one block of nw warps a row tile m
// (blockIdx.x, over up to three weights: mma_pick) and gpb token groups
// (blockIdx.y); warp wi takes spans wi, wi + nw, ...; its k-th span lands
// in slot k mod ring, whose mbarrier completes phase k / ring. A span's
// sums (each from 0: chunk by chunk, hi, mid, lo, mma_span) go to shared
// memory and the spans are added in order from 0 after the block's
// barrier, so y[t,o] has the bits of every other BF16 kernel.
//
// Dynamic shared memory: nw · ring · 8 KB of slots, then the spans' sums
// (spans · gpb · 512 bytes), then what sums or an RMS input take (below);
// the mbarriers are static.
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900
#define MMA_BULK_RING_MAX 2
#define MMA_BULK_WARPS 8

// mbar_init readies an mbarrier for count arrivals a phase.
__device__ __forceinline__ void mbar_init(u64 *bar, u32 count) {
	asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_u32(bar)), "r"(count) : "memory");
	// The tensor memory accelerator (the async proxy) must see the
	// initialized barrier before a copy completes on it.
	asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}

// bulk_copy copies bytes (a multiple of 16, both addresses 16-byte
// aligned) from global to shared memory; it arrives on bar, expecting the
// bytes, and the copy completes the barrier's phase when they have landed.
__device__ __forceinline__ void bulk_copy(void *dst, const void *src, u32 bytes, u64 *bar) {
	u32 b = smem_u32(bar);
	// The slot's previous contents were read by ordinary loads (the generic
	// proxy); order those reads before the asynchronous write.
	asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
	asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(b), "r"(bytes) : "memory");
	asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
	                 smem_u32(dst)),
	             "l"(src), "r"(bytes), "r"(b)
	             : "memory");
}

// mbar_wait returns once bar has completed the phase of the given parity.
__device__ __forceinline__ void mbar_wait(u64 *bar, u32 parity) {
	u32 b = smem_u32(bar), done;
	do {
		asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
		             : "=r"(done)
		             : "r"(b), "r"(parity)
		             : "memory");
	} while (!done);
}

// mbar_waiter waits for an mbarrier's phase of the given parity, or not
// at all with no barrier (mma_bulk_spans's wait; a named type, since NVRTC
// takes no generic lambdas in device code).
struct mbar_waiter {
	u64 *bar;
	u32 parity;
	__device__ __forceinline__ void operator()() const {
		if (bar) mbar_wait(bar, parity);
	}
};

// mma_bulk_spans streams a warp's spans first, first + stride, ... of one
// row tile (wt: its nc weight tiles, one after the other) through the
// warp's ring of slots (bar: an mbarrier a slot) and calls use(s, slot,
// wait, regs) on each in order, wait returning once the slot's tiles have
// landed; the slot takes the span ring spans on once use has returned
// (every lane then holds its fragments of it in registers). The weights
// never change: the ring's first copies start before lb_pdl_wait, while
// the kernel before finishes (programmatic dependent launch); use reads
// the activations after.
//
// HOLD1 (a ring of one slot, two spans or more): before the wait the warp
// also takes its first span out of the slot into registers (64 a lane) and
// sends its second span's copy into the slot, so that twice the weights
// land while the kernel before runs (a decode step's o projection, 33.5 MB
// on Qwen3-8B, then fits in the registers and slots of its blocks); use
// then gets the first span's fragments as regs (else regs is null).
template <bool HOLD1 = false, typename Use>
__device__ __forceinline__ void mma_bulk_spans(uint4 *slots, u64 *bar, const uint4 *wt, int nc, int first,
                                               int stride, int ring, Use use) {
	int lane = threadIdx.x & 31, spans = (nc + MMA_SPAN - 1) / MMA_SPAN;
	int mine = first < spans ? (spans - 1 - first) / stride + 1 : 0;
	auto issue = [&](int k) {
		int c0 = (first + k * stride) * MMA_SPAN, nch = min(MMA_SPAN, nc - c0);
		bulk_copy(slots + (k % ring) * MMA_SPAN * 32, wt + (i64)c0 * 32, nch * 512, &bar[k % ring]);
	};
	if (lane == 0) {
		for (int r = 0; r < ring; r++) mbar_init(&bar[r], 1);
		for (int k = 0; k < min(ring, mine); k++) issue(k);
	}
	__syncwarp();
	uint4 held[HOLD1 ? MMA_SPAN : 1];
	int k0 = 0;
	if (HOLD1 && ring == 1 && mine >= 2) {
		mbar_wait(&bar[0], 0);
		mma_span_load(held, slots, min(MMA_SPAN, nc - first * MMA_SPAN), lane);
		__syncwarp();
		if (lane == 0) issue(1);
		k0 = 1;
	}
	lb_pdl_wait();
	// The first span is in registers: no wait. (Waiting on phase 0's
	// parity again would wait for phase 2 once the second span has landed:
	// a parity names the last two phases only.)
	if (k0) use(first, slots, mbar_waiter{0, 0u}, (const uint4 *)held);
	for (int k = k0; k < mine; k++) {
		use(first + k * stride, slots + (k % ring) * MMA_SPAN * 32, mbar_waiter{&bar[k % ring], (u32)((k / ring) & 1)},
		    (const uint4 *)0);
		__syncwarp();
		if (lane == 0 && k + ring < mine) issue(k + ring);
	}
}

// The decode step's input RMSNorm inside the q/k/v GEMV (BF16
// activations, up to RMS_GEMV_TOKENS tokens): the down projection adds into
// the residual stream x and writes its rows' RMS tile sums
// (lb_mma_gemv_bulk1 with sums: mma_gemv_sums); the next layer's q/k/v
// GEMV (lb_mma_gemv_bulk1_rms) adds the sums up (rms_total), normalizes
// the columns of each span it takes and rounds them to BF16 itself. The
// values are lb_rmsnorm_terms_slices's, bit for bit (the RMS order,
// common.cuh), so the products are too, and the norm launch between the
// two GEMVs is gone. The same for the post-attention norm inside the
// gate/up GEMV (the o projection writing the sums) was built and measured:
// neutral, then 90 µs a Qwen3-8B step slower (BENCHMARKS.md), and removed.
#define RMS_GEMV_TOKENS 2

// rms_in is such a GEMV's input: RMSNorm(x) with x [T, in] float32 (in a
// multiple of 16), sums [T][in / 16] x's RMS tile sums, the norm's weight
// w (gain w, or 1 + w with zc) and eps. r holds each token's 1 / rms once
// a warp has computed it (rms_in_scale).
struct rms_in {
	const float *x, *sums, *w;
	float eps;
	int zc;
	float r[RMS_GEMV_TOKENS];
	bool ready;
};

// rms_in_scale computes the warp's r from the sums, once (after the wait:
// the kernel before wrote them).
__device__ __forceinline__ void rms_in_scale(rms_in &ri, int nc, int T) {
	if (ri.ready) return;
#pragma unroll
	for (int t = 0; t < RMS_GEMV_TOKENS; t++)
		if (t < T) {
			const float *st = ri.sums + (i64)t * nc;
			ri.r[t] = rms_scale(rms_total([&](int m) { return __ldcg(st + m); }, nc), 16 * nc, ri.eps);
		}
	ri.ready = true;
}

// mma_gemv_span_rms is mma_gemv_span (one token group, BF16 terms) on an
// RMS input: the warp's 32 lanes load the span's 16 chunks of x (8 columns
// a lane, a token at a time) and of the gains, normalize and round them
// as lb_rmsnorm_terms_slices does, and put them in the warp's stage
// (shared memory, [16 chunks][8 lanes] B fragments: lanes 4t + q of tokens
// t < RMS_GEMV_TOKENS), from which the live lanes take their fragments.
template <typename Wait>
__device__ __forceinline__ void mma_gemv_span_rms(float *part, const uint4 *slot, rms_in &ri, u32 *stage, int nc,
                                                  int s, int T, int lane, Wait wait, const uint4 *regs) {
	int c0 = s * MMA_SPAN, nch = min(MMA_SPAN, nc - c0), ci = lane >> 1, h = lane & 1;
	int col = (c0 + ci) * 16 + 8 * h, D = 16 * nc;
	float g[8], xv[RMS_GEMV_TOKENS][8];
	if (ci < nch) {
#pragma unroll
		for (int e = 0; e < 8; e += 4) {
			float4 wv = __ldg((const float4 *)(ri.w + col + e));
			g[e] = rms_gain(wv.x, ri.zc), g[e + 1] = rms_gain(wv.y, ri.zc);
			g[e + 2] = rms_gain(wv.z, ri.zc), g[e + 3] = rms_gain(wv.w, ri.zc);
#pragma unroll
			for (int t = 0; t < RMS_GEMV_TOKENS; t++)
				if (t < T) {
					float4 v = __ldcg((const float4 *)(ri.x + (i64)t * D + col + e));
					xv[t][e] = v.x, xv[t][e + 1] = v.y, xv[t][e + 2] = v.z, xv[t][e + 3] = v.w;
				}
		}
	}
	rms_in_scale(ri, nc, T);
	if (ci < nch) {
#pragma unroll
		for (int t = 0; t < RMS_GEMV_TOKENS; t++)
			if (t < T)
#pragma unroll
				for (int p = 0; p < 4; p++) {
					u32 b, zero;
					mma_terms_n(rms_apply(xv[t][2 * p], ri.r[t], g[2 * p]),
					            rms_apply(xv[t][2 * p + 1], ri.r[t], g[2 * p + 1]), &b, &zero, &zero, 1);
					// Columns 8h + 2p, +1: lane 4t + p's word h.
					stage[((ci * 8 + 4 * t + p) << 1) + h] = b;
				}
	}
	__syncwarp();
	bool live = lane < 4 * T;
	const uint2 *st = (const uint2 *)stage;
	wait();
	float acc[4];
	// (Every lane reads inside the stage; the dead lanes' reads are dropped.)
	mma_span<false, 1>(
	    acc, slot, nch, lane,
	    [&](int i, int) {
		    uint2 v = st[i * 8 + (lane & 7)];
		    return live ? v : make_uint2(0u, 0u);
	    },
	    regs);
	__syncwarp(); // the stage takes the warp's next span
	mma_part_put(part, acc, s, 1, 0, lane);
}

// mma_gemv_bulk is lb_mma_gemv_bulk's body on TERMS terms of the
// activations (3, or 1: hi alone, lb_mma_gemv_bulk1), with the block's
// dynamic shared memory smem and its mbarriers bars; with RMS, on the RMS
// input ri instead of xs (one token group, BF16).
template <int TERMS, bool RMS = false>
__device__ __forceinline__ void mma_gemv_bulk(uint4 *smem, u64 (*bars)[MMA_BULK_RING_MAX], float *y0, const uint4 *w0,
                                              int out0, float *y1, const uint4 *w1, int out1, float *y2,
                                              const uint4 *w2, int out2, const uint2 *xs, int T, int in, int gpb,
                                              int ring, int acc, float *sums, rms_in *ri = 0) {
	int lane = threadIdx.x & 31, wi = threadIdx.x >> 5, nw = blockDim.x >> 5;
	int nc = (in + 15) / 16, spans = (nc + MMA_SPAN - 1) / MMA_SPAN, m = blockIdx.x, out;
	float *y;
	const uint4 *w;
	mma_pick(&m, 16, &y, &w, &out, y0, w0, out0, y1, w1, out1, y2, w2, out2);
	int n0 = blockIdx.y * gpb, ng = min(gpb, (T + 7) / 8 - n0);
	float *part = (float *)(smem + nw * ring * MMA_SPAN * 32);
	// After the spans' sums: with RMS the warps' stages, with sums the new y
	// (gpb · 128 floats).
	float *rows = part + spans * gpb * 128;
	u32 *stage = (u32 *)rows + wi * MMA_SPAN * 16;
	// With acc, the residual stream's old values are loaded before the wait
	// (inside mma_bulk_spans): the kernels a decode step runs just before
	// (the attention, the SiLU product) do not write it.
	float held[MMA_ADD_HELD];
	if (acc) mma_gemv_held(held, y, m, out, n0, ng, T);
	// Row tile m: nc tiles of 32 uint4, one after the other; this warp's
	// spans: wi, wi + nw, ...
	// The first span held in registers on BF16 activations only: three
	// terms' 48 activation fragments leave no room for it.
	mma_bulk_spans<TERMS == 1>(smem + wi * ring * MMA_SPAN * 32, bars[wi], w + (i64)m * nc * 32, nc, wi, nw, ring,
	                           [&](int s, const uint4 *slot, mbar_waiter wait, const uint4 *regs) {
		                           if (RMS)
			                           mma_gemv_span_rms(part, slot, *ri, stage, nc, s, T, lane, wait, regs);
		                           else
			                           mma_gemv_span<false, TERMS>(part, slot, xs, nc, s, n0, ng, T, lane, wait, regs);
	                           });
	__syncthreads();
	mma_gemv_add(y, part, m, out, n0, ng, spans, T, acc, acc ? held : 0, sums ? rows : 0);
	if (sums) {
		__syncthreads();
		mma_gemv_sums(sums, rows, m, out, n0, ng, T);
	}
}

// lb_mma_gemv_bulk: blocks of nw = blockDim.x / 32 ≤ MMA_BULK_WARPS warps;
// at most 128 registers a thread (each weight fragment read from its slot
// by its chunk: mma_span<false>), so that two blocks of 8 warps share an SM.
// acc: y += W·x (a decode step's o and down projections add into the
// residual stream, so that the norm after them has no add and spreads
// over blocks: lb_rmsnorm_terms_slices, or goes into the GEMV after:
// lb_mma_gemv_bulk1_rms), y's old values read before the wait: the kernel
// launched just before must not write y. sums (or null): y's new RMS tile
// sums [T][⌈out / 16⌉] (mma_gemv_sums), for lb_mma_gemv_bulk1_rms; its
// block then has gpb · 512 bytes more dynamic shared memory.
extern "C" __global__ void __launch_bounds__(32 * MMA_BULK_WARPS, 2)
    lb_mma_gemv_bulk(float *y0, const uint4 *w0, int out0, float *y1, const uint4 *w1, int out1, float *y2,
                     const uint4 *w2, int out2, const uint2 *xs, int T, int in, int gpb, int ring,
                     int acc, float *sums) {
	extern __shared__ uint4 smem[];
	__shared__ u64 bars[MMA_BULK_WARPS][MMA_BULK_RING_MAX];
	mma_gemv_bulk<3>(smem, bars, y0, w0, out0, y1, w1, out1, y2, w2, out2, xs, T, in, gpb, ring, acc, sums);
}

// lb_mma_gemv_bulk1: lb_mma_gemv_bulk on BF16 activations (terms written
// with nt = 1: hi alone, mid and lo zeros), reading and multiplying hi
// only: a third of the activation loads and mma, so up to 32 tokens (four
// groups: 2 bytes of L2 reads a weight byte) stream. Its sums are those of
// every three-term kernel on the same terms (they add exact zeros).
extern "C" __global__ void __launch_bounds__(32 * MMA_BULK_WARPS, 2)
    lb_mma_gemv_bulk1(float *y0, const uint4 *w0, int out0, float *y1, const uint4 *w1, int out1, float *y2,
                      const uint4 *w2, int out2, const uint2 *xs, int T, int in, int gpb, int ring,
                      int acc, float *sums) {
	extern __shared__ uint4 smem[];
	__shared__ u64 bars[MMA_BULK_WARPS][MMA_BULK_RING_MAX];
	mma_gemv_bulk<1>(smem, bars, y0, w0, out0, y1, w1, out1, y2, w2, out2, xs, T, in, gpb, ring, acc, sums);
}

// lb_mma_gemv_bulk1_rms: lb_mma_gemv_bulk1 (one token group, no acc) on
// the RMS input RMSNorm(x) (rms_in: x [T ≤ RMS_GEMV_TOKENS, in], in a
// multiple of 16, its RMS tile sums, the norm's weight nw, eps, zc) in
// place of BF16 terms: the bits of lb_rmsnorm_terms_slices then
// lb_mma_gemv_bulk1. Dynamic shared memory: lb_mma_gemv_bulk1's with gpb
// 1, then 1 KB a warp (its stage).
extern "C" __global__ void __launch_bounds__(32 * MMA_BULK_WARPS, 2)
    lb_mma_gemv_bulk1_rms(float *y0, const uint4 *w0, int out0, float *y1, const uint4 *w1, int out1, float *y2,
                          const uint4 *w2, int out2, const float *x, const float *sums, const float *nw, float eps,
                          int zc, int T, int in, int ring) {
	extern __shared__ uint4 smem[];
	__shared__ u64 bars[MMA_BULK_WARPS][MMA_BULK_RING_MAX];
	rms_in ri = {x, sums, nw, eps, zc, {0.0f}, false};
	mma_gemv_bulk<1, true>(smem, bars, y0, w0, out0, y1, w1, out1, y2, w2, out2, 0, T, in, 1, ring, 0, 0, &ri);
}

// lb_mma_gemv_bulk1_silu: a decode step's gate and up GEMVs on BF16 terms
// (one token group: up to 8 tokens) with SiLU-mul as their epilogue,
// writing silu(gate)·up as the down projection's terms (xo: nco column
// chunks, nto terms) with no float32 gate and up and no lb_silu_mul_terms
// launch between them and the down GEMV.
//
// Why: a short kernel between two GEMVs costs a decode step more than its
// own work (the GEMV after it starts only when it ends; BENCHMARKS.md:
// SiLU-mul cost the Qwen3-8B step 3.3 µs a layer). An epilogue in
// lb_mma_gemv_bulk1 cannot do it, since a row tile's gate and up rows are
// in different blocks (an arrival between them held every block's exit:
// refuted). Here block m takes row tile m of both weights: warps
// 0 .. nw/2 - 1 the gate tile's spans as lb_mma_gemv_bulk1's warps take a
// tile's, the others the up tile's, each with its own ring; after the
// block's barrier each output pair sums its spans in order from 0 (the
// gate and up values lb_mma_gemv_bulk1 writes, bit for bit) and applies
// lb_silu_mul1 as lb_silu_mul_terms does, zeros past out.
//
// Dynamic shared memory: nw · ring · 8 KB of slots, then the spans' sums
// [2][spans][16 rows][8 tokens].
extern "C" __global__ void __launch_bounds__(32 * MMA_BULK_WARPS, 2)
    lb_mma_gemv_bulk1_silu(u32 *xo, const uint4 *wg, const uint4 *wu, int out, int nco, int nto, const uint2 *xs,
                           int T, int in, int ring) {
	extern __shared__ uint4 smem[];
	__shared__ u64 bars[MMA_BULK_WARPS][MMA_BULK_RING_MAX];
	int lane = threadIdx.x & 31, wi = threadIdx.x >> 5, nw = blockDim.x >> 5, hw = nw >> 1;
	int nc = (in + 15) / 16, spans = (nc + MMA_SPAN - 1) / MMA_SPAN, m = blockIdx.x;
	int up = wi >= hw, hi = wi - up * hw; // which weight, and the warp's place among its half
	float *part = (float *)(smem + nw * ring * MMA_SPAN * 32);
	mma_bulk_spans<true>(smem + wi * ring * MMA_SPAN * 32, bars[wi], (up ? wu : wg) + (i64)m * nc * 32, nc, hi, hw, ring,
	                     [&](int s, const uint4 *slot, mbar_waiter wait, const uint4 *regs) {
		                     mma_gemv_span<false, 1>(part + up * spans * 128, slot, xs, nc, s, 0, 1, T, lane, wait, regs);
	                     });
	__syncthreads();
	// Thread i: rows 16m + r, r + 1 (r even) of token tk.
	for (int i = threadIdx.x; i < 64; i += blockDim.x) {
		int r = (i >> 3) * 2, tk = i & 7;
		if (tk >= T) continue;
		float v[2];
#pragma unroll
		for (int e = 0; e < 2; e++) {
			float g = 0.0f, u = 0.0f;
			for (int s = 0; s < spans; s++) g += part[(s * 16 + r + e) * 8 + tk];
			for (int s = 0; s < spans; s++) u += part[((spans + s) * 16 + r + e) * 8 + tk];
			v[e] = 16 * m + r + e < out ? lb_silu_mul1(g, u) : 0.0f;
		}
		mma_put_terms(xo, nco, tk, 16 * m + r, v[0], v[1], nto);
	}
}

// lb_mma_gemv_tiles1_m2 and _m4: the GEMV of
// decode batches of 9 to 32 tokens on BF16 activations (terms of one term:
// hi alone), on sm_90.
//
// Why: lb_mma_gemv_bulk1 reads a span's activation terms from L2 for every
// 16-row tile: at 32 tokens 2 bytes a weight byte, so that L2 (about 6 TB/s
// of reads on the H200 in all) bounds it at 0.35-0.53 of the copy rate.
// Here a block takes MT row tiles and each warp copies its span of all MT
// (one cp.async.bulk a tile, one mbarrier) and multiplies every activation
// fragment it loads by MT weight fragments: 2/MT bytes of terms a weight
// byte.
//
// Order: the spans go in rounds, one a warp (span k·nw + wi in round k).
// Each warp writes its span's sums (from 0, chunk by chunk: mma_span's
// order) to part; after the block's barrier each output element adds the
// round's sums in span order to its running total in shared memory (from
// 0), so y[t,o] = ((0 + s_0) + s_1) + ...: the bits of every other BF16
// kernel on the same terms. Shared memory: nw · ring · MT spans of 8 KB
// (the copies), then part [nw][groups][MT][16 rows][8 tokens] and the
// totals [groups][MT][16][8], floats.
template <int MT>
__device__ __forceinline__ void mma_gemv_tiles1(uint4 *smem, u64 (*bars)[MMA_BULK_RING_MAX], float *y0,
                                                const uint4 *w0, int out0, float *y1, const uint4 *w1, int out1,
                                                float *y2, const uint4 *w2, int out2, const uint2 *xs, int T, int in,
                                                int ring) {
	int lane = threadIdx.x & 31, wi = threadIdx.x >> 5, nw = blockDim.x >> 5, g = lane >> 2, q = lane & 3;
	int nc = (in + 15) / 16, spans = (nc + MMA_SPAN - 1) / MMA_SPAN, m = blockIdx.x, out;
	float *y;
	const uint4 *w;
	mma_pick(&m, 16 * MT, &y, &w, &out, y0, w0, out0, y1, w1, out1, y2, w2, out2);
	int ng = (T + 7) / 8, rounds = (spans + nw - 1) / nw;
	int mine = wi < spans ? (spans - 1 - wi) / nw + 1 : 0; // this warp's spans: wi, wi + nw, ...
	constexpr int SPAN_U4 = MMA_SPAN * 32;                  // a tile's span, in uint4
	uint4 *slots = smem + wi * ring * MT * SPAN_U4;
	u64 *bar = bars[wi];
	float *part = (float *)(smem + nw * ring * MT * SPAN_U4);
	const int elems = ng * MT * 128; // a round's outputs: [groups][MT][16][8]
	float *total = part + nw * elems;
	const uint4 *wt = w + (i64)m * MT * nc * 32; // row tile m·MT: nc tiles of 32 uint4 each, then tile m·MT + 1, ...
	auto issue = [&](int k) {
		int c0 = (wi + k * nw) * MMA_SPAN, nch = min(MMA_SPAN, nc - c0);
		uint4 *dst = slots + (k % ring) * MT * SPAN_U4;
		for (int j = 0; j < MT; j++)
			bulk_copy(dst + j * SPAN_U4, wt + ((i64)j * nc + c0) * 32, nch * 512, &bar[k % ring]);
	};
	if (lane == 0) {
		// MT copies arrive on a phase: it completes once all MT have
		// arrived with their byte counts and every byte has landed.
		for (int r = 0; r < ring; r++) mbar_init(&bar[r], MT);
		for (int k = 0; k < min(ring, mine); k++) issue(k);
	}
	for (int i = threadIdx.x; i < elems; i += blockDim.x) total[i] = 0.0f;
	__syncwarp();
	lb_pdl_wait();
	for (int k = 0; k < rounds; k++) {
		if (k < mine) {
			int s = wi + k * nw, c0 = s * MMA_SPAN, nch = min(MMA_SPAN, nc - c0);
			const uint4 *slot = slots + (k % ring) * MT * SPAN_U4;
			float *pw = part + wi * elems;
			for (int n = 0; n < ng; n++) {
				const uint2 *bp = xs + (((i64)n * nc + c0) * 3 << 5) + lane;
				bool live = 8 * n + g < T;
				uint2 b[MMA_SPAN];
#pragma unroll
				for (int i = 0; i < MMA_SPAN; i++) {
					b[i].x = b[i].y = 0u;
					if (i < nch && live) b[i] = __ldg(bp + i * 3 * 32);
				}
				if (n == 0) mbar_wait(&bar[k % ring], (k / ring) & 1);
				float acc[MT][4];
#pragma unroll
				for (int j = 0; j < MT; j++) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;
#pragma unroll
				for (int i = 0; i < MMA_SPAN; i++) {
					if (i < nch) {
#pragma unroll
						for (int j = 0; j < MT; j++) mma_bf16(acc[j], slot[(j * MMA_SPAN + i) * 32 + lane], b[i].x, b[i].y);
					}
				}
				// Fragment element e: row g + 8·(e >> 1), token 2q + (e & 1).
#pragma unroll
				for (int j = 0; j < MT; j++)
#pragma unroll
					for (int e = 0; e < 4; e++) pw[((n * MT + j) * 16 + g + 8 * (e >> 1)) * 8 + 2 * q + (e & 1)] = acc[j][e];
			}
			// Every lane has read the slot: it takes the span ring rounds on.
			__syncwarp();
			if (lane == 0 && k + ring < mine) issue(k + ring);
		}
		__syncthreads();
		int live = min(nw, spans - k * nw); // the round's spans, warps 0 .. live-1 in span order
		for (int i = threadIdx.x; i < elems; i += blockDim.x) {
			float sum = total[i];
			for (int v = 0; v < live; v++) sum += part[v * elems + i];
			total[i] = sum;
		}
		__syncthreads();
	}
	for (int i = threadIdx.x; i < elems; i += blockDim.x) {
		int n = i / (MT * 128), j = (i / 128) % MT, r = (i >> 3) & 15, tk = i & 7;
		int row = 16 * (m * MT + j) + r, t = 8 * n + tk;
		if (row < out && t < T) y[(i64)t * out + row] = total[i];
	}
}

// lb_mma_gemv_tiles1_m2 and _m4: mma_gemv_tiles1 on 2 and 4 row tiles a
// block (blocks of up to MMA_BULK_WARPS warps).
extern "C" __global__ void __launch_bounds__(32 * MMA_BULK_WARPS, 1)
    lb_mma_gemv_tiles1_m2(float *y0, const uint4 *w0, int out0, float *y1, const uint4 *w1, int out1, float *y2,
                          const uint4 *w2, int out2, const uint2 *xs, int T, int in, int ring) {
	extern __shared__ uint4 smem[];
	__shared__ u64 bars[MMA_BULK_WARPS][MMA_BULK_RING_MAX];
	mma_gemv_tiles1<2>(smem, bars, y0, w0, out0, y1, w1, out1, y2, w2, out2, xs, T, in, ring);
}

extern "C" __global__ void __launch_bounds__(32 * MMA_BULK_WARPS, 1)
    lb_mma_gemv_tiles1_m4(float *y0, const uint4 *w0, int out0, float *y1, const uint4 *w1, int out1, float *y2,
                          const uint4 *w2, int out2, const uint2 *xs, int T, int in, int ring) {
	extern __shared__ uint4 smem[];
	__shared__ u64 bars[MMA_BULK_WARPS][MMA_BULK_RING_MAX];
	mma_gemv_tiles1<4>(smem, bars, y0, w0, out0, y1, w1, out1, y2, w2, out2, xs, T, in, ring);
}
#endif
