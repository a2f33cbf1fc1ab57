// matmul_mma_bulk.cu: lb_mma_gemv_bulk, the tensor-core GEMV of decode
// steps of up to 8 tokens on sm_90 (which ones: useBulk in matmul.go):
// y[t,o] = Σ_i x[t,i]·w[o,i] on matmul_mma.cu's layouts (weights in mma
// tiles, x in mma terms) with its numerics and reduction order, so that its
// results are bit-identical to lb_mma_gemv's and lb_mma_gemm's.
//
// Why: a decode step's GEMV only streams weights (512 bytes a 16 × 16 tile,
// 3 mma a token group), so its speed is the bytes in flight an SM. In
// lb_mma_gemv each lane copies its 16 bytes of a tile by cp.async, 16 of
// them a span, and a warp keeps one span (8 KB) ahead of the one it
// multiplies: it ran at 0.60 of the copy rate on the Qwen3-8B shapes.
// Here the tensor memory accelerator copies a whole span (a row tile's 16
// consecutive tiles, up to 8 KB contiguous in memory) with one instruction
// (cp.async.bulk), whose completion an mbarrier counts in bytes, and each
// warp keeps a ring of `ring` spans in flight (ring = 3: 24 KB a warp, 96
// KB a block, two blocks an SM).
//
// Grid and order, as lb_mma_gemv's: one block of MMA_GEMV_WARPS warps a row
// tile m (blockIdx.x, over up to three weights: mma_pick) and gpb token
// groups (blockIdx.y); warp wi takes spans wi, wi + 4, ...; its k-th span
// lands in slot k mod ring, whose mbarrier completes phase k / ring. A
// span's sums (each from 0: chunk by chunk, hi, mid, lo, mma_span) go to
// shared memory and the spans are added in order from 0 after the block's
// barrier, so y[t,o] has the bits of every other BF16 kernel.
//
// Dynamic shared memory: MMA_GEMV_WARPS · ring · 8 KB of slots, then the
// spans' sums (spans · gpb · 512 bytes); the mbarriers are static.
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900
#define MMA_BULK_RING_MAX 4

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

// mma_terms_prefetch asks L1 for span s's activation terms of ng token
// groups from n0, the live tokens' only (those below T: the first 32 bytes
// of a chunk's term per token, one 128-byte line up to 4 tokens, two up
// to 8), spread over the warp's lanes: a line each. Fire and forget (no
// register waits on it), so that mma_gemv_span's loads of the span, spans
// later, hit L1 instead of waiting for L2 behind the weights' stream.
__device__ __forceinline__ void mma_terms_prefetch(const uint2 *xs, int nc, int s, int n0, int ng, int T, int lane) {
	int c0 = s * MMA_SPAN, nch = min(MMA_SPAN, nc - c0);
	for (int n = 0; n < ng; n++) {
		int lpc = T - 8 * (n0 + n) > 4 ? 2 : 1; // lines a chunk's term
		for (int l = lane; l < nch * 3 * lpc; l += 32) {
			const uint2 *p = xs + (((i64)(n0 + n) * nc + c0 + l / (3 * lpc)) * 3 + (l / lpc) % 3) * 32 + (l % lpc) * 16;
			asm volatile("prefetch.global.L1 [%0];" ::"l"(p));
		}
	}
}

template <bool HOLD>
__device__ __forceinline__ void mma_gemv_bulk(float *y0, const uint4 *w0, int out0, float *y1, const uint4 *w1, int out1,
                                              float *y2, const uint4 *w2, int out2, const uint2 *xs, int T, int in,
                                              int gpb, int ring, int ahead) {
	extern __shared__ uint4 smem[];
	__shared__ u64 bars[MMA_GEMV_WARPS][MMA_BULK_RING_MAX];
	int lane = threadIdx.x & 31, wi = threadIdx.x >> 5;
	int nc = (in + 15) / 16, spans = (nc + MMA_SPAN - 1) / MMA_SPAN, m = blockIdx.x, out;
	float *y;
	const uint4 *w;
	mma_pick(&m, 16, &y, &w, &out, y0, w0, out0, y1, w1, out1, y2, w2, out2);
	int n0 = blockIdx.y * gpb, ng = min(gpb, (T + 7) / 8 - n0);
	int mine = wi < spans ? (spans - 1 - wi) / MMA_GEMV_WARPS + 1 : 0; // this warp's spans
	uint4 *slots = smem + wi * ring * MMA_SPAN * 32;
	u64 *bar = bars[wi];
	float *part = (float *)(smem + MMA_GEMV_WARPS * ring * MMA_SPAN * 32);
	const uint4 *wt = w + (i64)m * nc * 32; // row tile m: nc tiles of 32 uint4, one after the other
	// issue starts the copy of this warp's k-th span into its slot.
	auto issue = [&](int k) {
		int c0 = (wi + k * MMA_GEMV_WARPS) * MMA_SPAN, nch = min(MMA_SPAN, nc - c0);
		bulk_copy(slots + (k % ring) * MMA_SPAN * 32, wt + (i64)c0 * 32, nch * 512, &bar[k % ring]);
	};
	if (lane == 0) {
		for (int r = 0; r < ring; r++) mbar_init(&bar[r], 1);
		// The weights never change: they stream in while the kernel before
		// finishes (programmatic dependent launch); the activations only
		// after it has.
		for (int k = 0; k < min(ring, mine); k++) issue(k);
	}
	__syncwarp();
	lb_pdl_wait();
	for (int k = 0; k < min(ahead, mine); k++) mma_terms_prefetch(xs, nc, wi + k * MMA_GEMV_WARPS, n0, ng, T, lane);
	for (int k = 0; k < mine; k++) {
		if (ahead > 0 && k + ahead < mine)
			mma_terms_prefetch(xs, nc, wi + (k + ahead) * MMA_GEMV_WARPS, n0, ng, T, lane);
		mma_gemv_span<HOLD>(part, slots + (k % ring) * MMA_SPAN * 32, xs, nc, wi + k * MMA_GEMV_WARPS, n0, ng, T, lane,
		              [&] { mbar_wait(&bar[k % ring], (k / ring) & 1); });
		// Every lane has its fragments of the slot in registers (the mma
		// consumed them): the slot takes the span ring spans on.
		__syncwarp();
		if (lane == 0 && k + ring < mine) issue(k + ring);
	}
	__syncthreads();
	mma_gemv_add(y, part, m, out, n0, ng, spans, T);
}

#define MMA_BULK_ARGS                                                                                               \
	float *y0, const uint4 *w0, int out0, float *y1, const uint4 *w1, int out1, float *y2, const uint4 *w2, int out2, \
	    const uint2 *xs, int T, int in, int gpb, int ring, int ahead
extern "C" __global__ void __launch_bounds__(128, 2) lb_mma_gemv_bulk(MMA_BULK_ARGS) {
	mma_gemv_bulk<true>(y0, w0, out0, y1, w1, out1, y2, w2, out2, xs, T, in, gpb, ring, ahead);
}
// lb_mma_gemv_bulk3 and lb_mma_gemv_bulk4: the same with each weight
// fragment read by its chunk, in at most 170 and 128 registers: three and
// four blocks an SM.
extern "C" __global__ void __launch_bounds__(128, 3) lb_mma_gemv_bulk3(MMA_BULK_ARGS) {
	mma_gemv_bulk<false>(y0, w0, out0, y1, w1, out1, y2, w2, out2, xs, T, in, gpb, ring, ahead);
}
extern "C" __global__ void __launch_bounds__(128, 4) lb_mma_gemv_bulk4(MMA_BULK_ARGS) {
	mma_gemv_bulk<false>(y0, w0, out0, y1, w1, out1, y2, w2, out2, xs, T, in, gpb, ring, ahead);
}
#endif
