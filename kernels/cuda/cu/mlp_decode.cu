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
// Barriers: ctr[0] counts arrivals; a block arrives once at the end of
// each step (four), so that step k has ended everywhere once the count
// reaches k · G. ctr[1] counts blocks done; the last one returns both to
// zero for the next launch (which waits for this one to end before it
// touches them: lb_pdl_wait).
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
// target; the acquire and fence make the other blocks' writes visible to
// the loads after it. A barrier still closed after a second means a
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
		__threadfence();
	}
	__syncthreads();
}

// dm_slices runs this block's slices of an RMSNorm of x's T rows into the
// terms xs (rms_terms_slice: ⌈D / 512⌉ slices a row), slice j on block
// G − 1 − j mod G, after waiting for target (the step that wrote x).
__device__ __forceinline__ void dm_slices(const float *x, u32 *xs, const float *w, int D, float eps, int zc, int T,
                                          const u32 *ctr, u32 target, float *tiles) {
	int nc = D / 16, slices = (nc * 8 + 255) / 256, G = gridDim.x;
	int first = G - 1 - (int)blockIdx.x;
	if (first >= T * slices) return;
	dm_wait(ctr, target);
	for (int j = first; j < T * slices; j += G) {
		rms_terms_slice(x, xs, w, D, eps, zc, nc, 1, j / slices, j % slices, slices, tiles);
		__syncthreads(); // tiles takes the next slice
	}
}

// dm_noop is the ready of a block's later tiles in a step: it waited
// before its first.
struct dm_noop {
	__device__ __forceinline__ void operator()() const {}
};

extern "C" __global__ void __launch_bounds__(256, 2)
    lb_decode_mlp(float *x, int D, int T, const uint2 *xa, const uint4 *wo, int ina, const float *postw, u32 *xn,
                  const uint4 *wg, const uint4 *wu, int inter, u32 *xm, const uint4 *wd, float *sums,
                  const float *nextw, u32 *xnext, float eps, int zc, u32 *ctr) {
	extern __shared__ uint4 smem[];
	__shared__ u64 bars[MMA_BULK_WARPS][MMA_BULK_RING_MAX];
	__shared__ float tiles[RMS_TILES_MAX];
	const int G = gridDim.x, b = blockIdx.x, tilesD = (D + 15) / 16, tilesI = (inter + 15) / 16;
	const u32 g = (u32)G;

	// Step 1: x += o_proj · attention (xa: the attention's terms, written
	// by the kernel before). The first tile's copies go out before
	// lb_pdl_wait, as lb_mma_gemv_bulk1's.
	if (b < tilesD) {
		for (int m = b; m < tilesD; m += G) {
			if (m == b)
				mma_gemv_bulk_tile<1>(smem, bars, x, wo, D, m, xa, T, ina, 0, 1, 1, 1, (float *)0);
			else
				mma_gemv_bulk_tile<1, false, false>(smem, bars, x, wo, D, m, xa, T, ina, 0, 1, 1, 1, (float *)0,
				                                    (rms_in *)0, dm_noop());
			__syncthreads(); // the spans' sums take the next tile's
		}
	} else {
		lb_pdl_wait();
	}
	dm_arrive(ctr);

	// Steps 2 and 3: the post-attention norm into xn (on the last blocks,
	// inside the first gate/up tile's ready, so that its copies are out
	// first), then gate and up with SiLU-mul into xm.
	auto norm_then_wait = [&] {
		dm_slices(x, xn, postw, D, eps, zc, T, ctr, g, tiles);
		dm_arrive(ctr);
		dm_wait(ctr, 2 * g);
	};
	if (b < tilesI) {
		for (int m = b; m < tilesI; m += G) {
			if (m == b)
				mma_silu_tile<true>(smem, bars, xm, wg, wu, inter, tilesI, 1, (const uint2 *)xn, T, D, 1, m,
				                    norm_then_wait);
			else
				mma_silu_tile<true>(smem, bars, xm, wg, wu, inter, tilesI, 1, (const uint2 *)xn, T, D, 1, m, dm_noop());
			__syncthreads();
		}
	} else {
		norm_then_wait();
	}
	dm_arrive(ctr);

	// Step 4: x += down · xm, with x's RMS tile sums where the next q/k/v
	// GEMV takes them.
	auto wait3 = [&] { dm_wait(ctr, 3 * g); };
	if (b < tilesD) {
		for (int m = b; m < tilesD; m += G) {
			if (m == b)
				mma_gemv_bulk_tile<1, false, true>(smem, bars, x, wd, D, m, (const uint2 *)xm, T, inter, 0, 1, 1, 1,
				                                   sums, (rms_in *)0, wait3);
			else
				mma_gemv_bulk_tile<1, false, true>(smem, bars, x, wd, D, m, (const uint2 *)xm, T, inter, 0, 1, 1, 1,
				                                   sums, (rms_in *)0, dm_noop());
			__syncthreads();
		}
	} else {
		wait3();
	}
	dm_arrive(ctr);

	// Step 5: the next layer's input norm into xnext.
	if (nextw) dm_slices(x, xnext, nextw, D, eps, zc, T, ctr, 4 * g, tiles);

	if (threadIdx.x == 0 && atomicAdd(ctr + 1, 1u) == g - 1) {
		atomicExch(ctr, 0u);
		atomicExch(ctr + 1, 0u);
	}
}
#endif
