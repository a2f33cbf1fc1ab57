// add_rmsnorm.cu: the residual add fused with the next RMSNorm:
// x[t,:] += h[t,:], then y[t,:] = x[t,:] / sqrt(mean(x[t,:]²) + eps) · g
// with g = w or 1 + w (zero_centered). The bits of lb_add followed by
// lb_rmsnorm (the sum of squares in the RMS order, common.cuh), one launch.
// Layout: x, h, y [T, D] float32 (y must not alias x or h); w [D]; D ≤
// 16384. One block per row.
// ar_add adds hr into xr; the block's barrier after it makes the new row
// whole for block_rms_sumsq.
__device__ __forceinline__ void ar_add(float *xr, const float *hr, int D) {
	for (int i = threadIdx.x; i < D; i += blockDim.x) xr[i] = xr[i] + hr[i];
	__syncthreads();
}

extern "C" __global__ void lb_add_rmsnorm(float *x, const float *h, float *y, const float *w, int D, float eps,
                                          int zero_centered) {
	lb_pdl_wait();
	__shared__ float tiles[RMS_TILES_MAX];
	float *xr = x + (i64)blockIdx.x * D;
	const float *hr = h + (i64)blockIdx.x * D;
	float *yr = y + (i64)blockIdx.x * D;
	ar_add(xr, hr, D);
	float r = rms_scale(block_rms_sumsq(xr, D, tiles), D, eps);
	for (int i = threadIdx.x; i < D; i += blockDim.x) yr[i] = rms_apply(xr[i], r, rms_gain(w[i], zero_centered));
}

// lb_add_rmsnorm_bf16: lb_add_rmsnorm whose rows below nb write y as BF16
// into yb (row-major [nb, D], D even) instead of float32 into y: the
// prompt rows of a BF16 prefill, which only cuBLASLt matmuls read (the bits
// of lb_add_rmsnorm then lb_to_bf16, one pass).
extern "C" __global__ void lb_add_rmsnorm_bf16(float *x, const float *h, float *y, u32 *yb, const float *w, int D,
                                               float eps, int zero_centered, int nb) {
	lb_pdl_wait();
	__shared__ float tiles[RMS_TILES_MAX];
	float *xr = x + (i64)blockIdx.x * D;
	const float *hr = h + (i64)blockIdx.x * D;
	ar_add(xr, hr, D);
	float r = rms_scale(block_rms_sumsq(xr, D, tiles), D, eps);
	if ((int)blockIdx.x < nb) {
		u32 *ybr = yb + (i64)blockIdx.x * (D / 2);
		for (int p = threadIdx.x; p < D / 2; p += blockDim.x) {
			int i = 2 * p;
			ybr[p] = (u32)f32_to_bf16(rms_apply(xr[i], r, rms_gain(w[i], zero_centered))) |
			         (u32)f32_to_bf16(rms_apply(xr[i + 1], r, rms_gain(w[i + 1], zero_centered))) << 16;
		}
		return;
	}
	float *yr = y + (i64)blockIdx.x * D;
	for (int i = threadIdx.x; i < D; i += blockDim.x) yr[i] = rms_apply(xr[i], r, rms_gain(w[i], zero_centered));
}

// lb_add_rmsnorm_terms: lb_add_rmsnorm (without the add when h is null)
// writing y as mma terms (matmul_mma.cu) for a matrix of nc column chunks
// instead of float32: the same values, split as lb_mma_split would; the
// columns past D are zeros; terms 1 writes BF16 activations (hi alone:
// mma_terms_n). Dynamic shared memory: the new row x and the gains, 2·D
// floats.
extern "C" __global__ void lb_add_rmsnorm_terms(float *x, const float *h, u32 *xs, const float *w, int D, float eps,
                                                int zero_centered, int nc, int terms) {
	lb_pdl_wait();
	extern __shared__ float row[];
	__shared__ float tiles[RMS_TILES_MAX];
	float *xr = x + (i64)blockIdx.x * D;
	const float *hr = h ? h + (i64)blockIdx.x * D : 0;
	// A decode step has a row or a few, so a row's latency is the step's:
	// each thread loads all its elements (RN a round: 4,096 in one) before
	// it stores any (a store may alias a later load, which would otherwise
	// wait for it), and keeps the new row in shared memory for the sum and
	// the second pass, which read no global memory but the weights.
	constexpr int RN = 16;
	const int nt = blockDim.x;
	float *gain = row + D; // the norm's g = w or 1 + w, loaded in the same round
	for (int i0 = threadIdx.x; i0 < D; i0 += RN * nt) {
		float v[RN], wv[RN];
#pragma unroll
		for (int u = 0; u < RN; u++) {
			int i = i0 + u * nt;
			v[u] = i < D ? xr[i] : 0.0f;
			wv[u] = i < D ? w[i] : 0.0f;
			if (hr && i < D) v[u] += hr[i];
		}
#pragma unroll
		for (int u = 0; u < RN; u++) {
			int i = i0 + u * nt;
			if (i >= D) break;
			if (hr) xr[i] = v[u];
			row[i] = v[u];
			gain[i] = rms_gain(wv[u], zero_centered);
		}
	}
	__syncthreads();
	float r = rms_scale(block_rms_sumsq(row, D, tiles), D, eps);
	constexpr int PN = 8;
	for (int p0 = threadIdx.x; p0 < nc * 8; p0 += PN * nt) {
		float v[PN][2];
#pragma unroll
		for (int u = 0; u < PN; u++)
#pragma unroll
			for (int k = 0; k < 2; k++) {
				int i = 2 * (p0 + u * nt) + k;
				v[u][k] = i < D ? rms_apply(row[i], r, gain[i]) : 0.0f;
			}
#pragma unroll
		for (int u = 0; u < PN; u++)
			if (p0 + u * nt < nc * 8) mma_put_terms(xs, nc, blockIdx.x, 2 * (p0 + u * nt), v[u][0], v[u][1], terms);
	}
}

// lb_rmsnorm_terms_slices: lb_add_rmsnorm_terms without the add (the
// residual already added into x: lb_mma_gemv_bulk's acc), each row's
// output spread over gridDim.y blocks of 256 threads, at most one column
// pair a thread. Every block sums its whole row's squares (the RMS order:
// the same r, bit for bit) and writes the terms of its share of the pairs.
// A decode step's row then runs on several SMs: on one block, its load
// rounds and stores held a Qwen3-8B step for 9.7 µs a launch, a seventh of
// the step (BENCHMARKS.md).
extern "C" __global__ void __launch_bounds__(256) lb_rmsnorm_terms_slices(const float *x, u32 *xs, const float *w,
                                                                            int D, float eps, int zero_centered,
                                                                            int nc, int terms) {
	lb_pdl_wait();
	__shared__ float tiles[RMS_TILES_MAX];
	const float *xr = x + (i64)blockIdx.x * D;
	const int per = (nc * 8 + gridDim.y - 1) / gridDim.y;
	// This thread's pair, loaded with the row's tiles.
	int p = blockIdx.y * per + threadIdx.x;
	bool mine = threadIdx.x < per && p < nc * 8;
	float pv[2] = {0.0f, 0.0f}, pg[2] = {0.0f, 0.0f};
	if (mine)
#pragma unroll
		for (int k = 0; k < 2; k++) {
			int i = 2 * p + k;
			if (i < D) pv[k] = xr[i], pg[k] = rms_gain(w[i], zero_centered);
		}
	float r = rms_scale(block_rms_sumsq(xr, D, tiles), D, eps);
	if (mine)
		mma_put_terms(xs, nc, blockIdx.x, 2 * p, 2 * p < D ? rms_apply(pv[0], r, pg[0]) : 0.0f,
		              2 * p + 1 < D ? rms_apply(pv[1], r, pg[1]) : 0.0f, terms);
}
