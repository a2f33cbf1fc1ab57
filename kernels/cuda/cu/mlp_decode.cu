// mlp_decode.cu: lb_decode_mlp, the second half of a decoder layer for a
// decode step of up to 8 tokens on BF16 activations, in one launch on
// sm_90: the o projection added into the residual stream x, the
// post-attention RMSNorm, the gate and up GEMVs with SiLU-mul, the down
// projection added into x, then the next layer's input RMSNorm (or the
// RMS tile sums the next q/k/v GEMV normalizes with, or neither). Each
// step computes what its kernel computes alone (mma_gemv_bulk_tile,
// rms_terms_slice, mma_silu_tile), in the same order, so x, the terms
// and the sums have the bits of the five launches it replaces.
//
// Why: at batch 1 a decode step streams weights, and every launch
// boundary leaves HBM idle while the kernel after it becomes resident and
// its first copies land (BENCHMARKS.md: with every short kernel free the
// Qwen3-8B step would be 0.90 of the roofline, and early triggers, gated
// copies and L2 prefetches did not keep HBM busy across the boundaries).
// Here one grid of blocks resident together runs the steps in turn,
// separated by grid barriers, and a block sends the copies of its first
// row tile of the next GEMV as soon as its share of the step before is
// done: the weights stream while the barrier, the norm and the other
// blocks' tails run.
//
// Grid: gridDim.x blocks of 256 threads, all resident at once (the host
// sizes the grid by the driver's occupancy; a barrier with a block not
// resident would never open). Block b takes row tiles b, b + G, ... of
// each GEMV; the norms' slices go to the last blocks (G − 1, G − 2, ...),
// which the GEMVs before them leave idle when their tiles do not fill the
// grid.
//
// Barriers: ctr[k] counts the blocks that have ended step k + 1 (four
// steps end in one), so that step k + 1 has ended everywhere once it
// reaches G (one count a barrier: a block that has no part in a step
// arrives at once, and a single running count would reach a barrier's
// total before every block had ended the step before). ctr[4] counts the
// blocks done; the last one returns all five to zero for the next launch
// (which waits for this one to end before it touches them: lb_pdl_wait).
//
// Memory: weights as lb_mma_gemv_bulk1's; the terms the kernel itself
// writes (xn, xm) are read through L2 (CG), never the read-only path;
// x [T, D] float32. Dynamic shared memory: the largest of the three
// GEMVs' (8 warps' 8 KB slots and their spans' sums).
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900

// dm_arrive counts this block's arrival at the end of a step, after every
// thread's writes of it (made visible to the whole GPU first).
__device__ __forceinline__ void dm_arrive(u32 *ctr) {
	__syncthreads();
	if (threadIdx.x == 0) {
		__threadfence();
		atomicAdd(ctr, 1u);
	}
}

// dm_wait returns to every thread of the block once ctr has reached
// target; the acquire makes the other blocks' writes visible to the
// loads after it (the block's barrier orders them after thread 0's). A barrier still closed after a second means a
// block that never became resident (or a bug): the kernel traps, and the
// launch fails with an error instead of hanging the device.
__device__ __forceinline__ void dm_wait(const u32 *ctr, u32 target) {
	if (threadIdx.x == 0) {
		u32 v;
		u64 t0, t;
		asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
		for (;;) {
			asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(ctr) : "memory");
			if (v >= target) break;
			asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
			if (t - t0 > 1000000000ull) __trap();
		}
	}
	__syncthreads();
}

// dm_norm_slices runs this block's slices of an RMSNorm of x's T rows into
// the terms xs (rms_terms_slice: ⌈D / 512⌉ slices a row), slice j on
// block G − 1 − j mod G. Not inlined: a block may run it while it holds
// a span of weights in registers (mma_bulk_spans's HOLD1), and the norm's
// registers on top of those spilled the GEMVs' loops.
__device__ __noinline__ void dm_norm_slices(const float *x, u32 *xs, const float *w, int D, float eps, int zc, int T,
                                            float *tiles) {
	int nc = D / 16, slices = (nc * 8 + 255) / 256, G = gridDim.x;
	for (int j = G - 1 - (int)blockIdx.x; j < T * slices; j += G) {
		rms_terms_slice(x, xs, w, D, eps, zc, nc, 1, j / slices, j % slices, slices, tiles);
		__syncthreads(); // tiles takes the next slice
	}
}

// dm_norm runs dm_norm_slices once the step that wrote x has ended
// everywhere (its barrier bar), where this block has any slices.
__device__ __forceinline__ void dm_norm(const float *x, u32 *xs, const float *w, int D, float eps, int zc, int T,
                                        u32 *bar, float *tiles) {
	int slices = (D / 16 * 8 + 255) / 256;
	if (gridDim.x - 1 - blockIdx.x >= (unsigned)(T * slices)) return;
	dm_wait(bar, gridDim.x);
	dm_norm_slices(x, xs, w, D, eps, zc, T, tiles);
}

// The steps' readies (mma_bulk_spans): on a block's first tile of a step
// (on), the wait for the step before; its later tiles have nothing to
// wait for. One type a step, so that each GEMV is compiled once.
struct dm_after_pdl { // step 1: the kernel before
	bool on;
	__device__ __forceinline__ void operator()() const {
		if (on) lb_pdl_wait();
	}
};
struct dm_after { // a barrier
	u32 *bar;
	bool on;
	__device__ __forceinline__ void operator()() const {
		if (on) dm_wait(bar, gridDim.x);
	}
};
struct dm_after_norm { // step 3: the post-attention norm (unless it ran first), then its barrier
	const float *x, *w;
	u32 *xs, *bar1, *bar2;
	float *tiles;
	int D, zc, T;
	float eps;
	bool norm, on;
	__device__ __forceinline__ void operator()() const {
		if (!on) return;
		if (norm) {
			dm_norm(x, xs, w, D, eps, zc, T, bar1, tiles);
			dm_arrive(bar2);
		}
		dm_wait(bar2, gridDim.x);
	}
};

// dm_run is lb_decode_mlp's body; HOLD: the GEMVs hold their first span
// in registers (mma_bulk_spans's HOLD1), or not (lb_decode_mlp_nohold).
template <bool HOLD>
__device__ __forceinline__ void dm_run(uint4 *smem, u64 (*bars)[MMA_BULK_RING_MAX], float *tiles, float *x, int D,
                                       int T, const uint2 *xa, const uint4 *wo, int ina, const float *postw, u32 *xn,
                                       const uint4 *wg, const uint4 *wu, int inter, u32 *xm, const uint4 *wd,
                                       float *sums, const float *nextw, u32 *xnext, float eps, int zc, int norm_first,
                                       u32 *ctr) {
	const int G = gridDim.x, b = blockIdx.x, tilesD = (D + 15) / 16, tilesI = (inter + 15) / 16;

	// Step 1: x += o_proj · attention (xa: the attention's terms, written
	// by the kernel before). The first tile's copies go out before
	// lb_pdl_wait, as lb_mma_gemv_bulk1's.
	for (int m = b; m < tilesD; m += G) {
		mma_gemv_bulk_tile<1, false, false, HOLD>(smem, bars, x, wo, D, m, xa, T, ina, 0, 1, 1, 1, (float *)0,
		                                          (rms_in *)0, dm_after_pdl{m == b});
		__syncthreads(); // the spans' sums take the next tile's
	}
	if (b >= tilesD) lb_pdl_wait();
	dm_arrive(ctr);

	// Steps 2 and 3: the post-attention norm into xn on the last blocks,
	// inside the first gate/up tile's ready (so that its copies are out
	// first; norm_first: before them), then gate and up with SiLU-mul into
	// xm.
	if (norm_first) {
		dm_norm(x, xn, postw, D, eps, zc, T, ctr, tiles);
		dm_arrive(ctr + 1);
	}
	dm_after_norm after{x, postw, xn, ctr, ctr + 1, tiles, D, zc, T, eps, !norm_first, true};
	for (int m = b; m < tilesI; m += G) {
		after.on = m == b;
		mma_silu_tile<true, HOLD>(smem, bars, xm, wg, wu, inter, tilesI, 1, (const uint2 *)xn, T, D, 1, m, after);
		__syncthreads();
	}
	if (b >= tilesI) after();
	dm_arrive(ctr + 2);

	// Step 4: x += down · xm, with x's RMS tile sums where the next q/k/v
	// GEMV takes them.
	for (int m = b; m < tilesD; m += G) {
		mma_gemv_bulk_tile<1, false, true, HOLD>(smem, bars, x, wd, D, m, (const uint2 *)xm, T, inter, 0, 1, 1, 1,
		                                         sums, (rms_in *)0, dm_after{ctr + 2, m == b});
		__syncthreads();
	}
	if (b >= tilesD) dm_wait(ctr + 2, G);
	dm_arrive(ctr + 3);

	// Step 5: the next layer's input norm into xnext.
	if (nextw) dm_norm(x, xnext, nextw, D, eps, zc, T, ctr + 3, tiles);

	if (threadIdx.x == 0 && atomicAdd(ctr + 4, 1u) == (u32)G - 1)
		for (int k = 0; k < 5; k++) atomicExch(ctr + k, 0u);
}

#define DM_PARAMS                                                                                                   \
	float *x, int D, int T, const uint2 *xa, const uint4 *wo, int ina, const float *postw, u32 *xn, const uint4 *wg, \
	    const uint4 *wu, int inter, u32 *xm, const uint4 *wd, float *sums, const float *nextw, u32 *xnext,         \
	    float eps, int zc, int norm_first, u32 *ctr
#define DM_ARGS x, D, T, xa, wo, ina, postw, xn, wg, wu, inter, xm, wd, sums, nextw, xnext, eps, zc, norm_first, ctr

extern "C" __global__ void __launch_bounds__(256, 2) lb_decode_mlp(DM_PARAMS) {
	extern __shared__ uint4 smem[];
	__shared__ u64 bars[MMA_BULK_WARPS][MMA_BULK_RING_MAX];
	__shared__ float tiles[RMS_TILES_MAX];
	dm_run<true>(smem, bars, tiles, DM_ARGS);
}

// lb_decode_mlp_nohold: lb_decode_mlp without HOLD1 (64 registers a
// thread fewer, half the weights in flight before a wait), to measure.
extern "C" __global__ void __launch_bounds__(256, 2) lb_decode_mlp_nohold(DM_PARAMS) {
	extern __shared__ uint4 smem[];
	__shared__ u64 bars[MMA_BULK_WARPS][MMA_BULK_RING_MAX];
	__shared__ float tiles[RMS_TILES_MAX];
	dm_run<false>(smem, bars, tiles, DM_ARGS);
}
#endif
