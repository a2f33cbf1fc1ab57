// add_rmsnorm.cu: the residual add fused with the next RMSNorm:
// x[t,:] += h[t,:], then y[t,:] = x[t,:] / sqrt(mean(x[t,:]²) + eps) · g
// with g = w or 1 + w (zero_centered). The bits of lb_add followed by
// lb_rmsnorm with 256 threads (the same per-thread order and block
// reduction), in one pass over the row.
// Layout: x, h, y [T, D] float32 (y must not alias x or h); w [D]. One
// block per row.
// ar_add_sumsq adds hr into xr and returns this thread's sum of squares
// of the new row, elements threadIdx.x, + blockDim.x, ... in order.
__device__ __forceinline__ float ar_add_sumsq(float *xr, const float *hr, int D) {
	float s = 0.0f;
	for (int i = threadIdx.x; i < D; i += blockDim.x) {
		float v = xr[i] + hr[i];
		xr[i] = v;
		s += v * v;
	}
	return s;
}

extern "C" __global__ void lb_add_rmsnorm(float *x, const float *h, float *y, const float *w, int D, float eps,
                                          int zero_centered) {
	lb_pdl_wait();
	__shared__ float sh[32];
	float *xr = x + (i64)blockIdx.x * D;
	const float *hr = h + (i64)blockIdx.x * D;
	float *yr = y + (i64)blockIdx.x * D;
	float s = block_sum(ar_add_sumsq(xr, hr, D), sh);
	float r = 1.0f / sqrtf(s / (float)D + eps);
	for (int i = threadIdx.x; i < D; i += blockDim.x) {
		float g = zero_centered ? 1.0f + w[i] : w[i];
		yr[i] = xr[i] * r * g;
	}
}

// lb_add_rmsnorm_bf16: lb_add_rmsnorm whose rows below nb write y as BF16
// into yb (row-major [nb, D], D even) instead of float32 into y: the
// prompt rows of a BF16 prefill, which only cuBLASLt matmuls read (the bits
// of lb_add_rmsnorm then lb_to_bf16, one pass).
extern "C" __global__ void lb_add_rmsnorm_bf16(float *x, const float *h, float *y, u32 *yb, const float *w, int D,
                                               float eps, int zero_centered, int nb) {
	lb_pdl_wait();
	__shared__ float sh[32];
	float *xr = x + (i64)blockIdx.x * D;
	const float *hr = h + (i64)blockIdx.x * D;
	float s = block_sum(ar_add_sumsq(xr, hr, D), sh);
	float r = 1.0f / sqrtf(s / (float)D + eps);
	if ((int)blockIdx.x < nb) {
		u32 *ybr = yb + (i64)blockIdx.x * (D / 2);
		for (int p = threadIdx.x; p < D / 2; p += blockDim.x) {
			int i = 2 * p;
			float g0 = zero_centered ? 1.0f + w[i] : w[i], g1 = zero_centered ? 1.0f + w[i + 1] : w[i + 1];
			ybr[p] = (u32)f32_to_bf16(xr[i] * r * g0) | (u32)f32_to_bf16(xr[i + 1] * r * g1) << 16;
		}
		return;
	}
	float *yr = y + (i64)blockIdx.x * D;
	for (int i = threadIdx.x; i < D; i += blockDim.x) {
		float g = zero_centered ? 1.0f + w[i] : w[i];
		yr[i] = xr[i] * r * g;
	}
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
	__shared__ float sh[32];
	float *xr = x + (i64)blockIdx.x * D;
	const float *hr = h ? h + (i64)blockIdx.x * D : 0;
	// A decode step has a row or a few, so a row's latency is the step's:
	// each thread loads all its elements (RN a round: 4,096 in one) before
	// it stores or sums any (a store may alias a later load, which would
	// otherwise wait for it), sums them in lb_add_rmsnorm's order (i = tid,
	// tid + blockDim, ...), and keeps the new row in shared memory for the
	// second pass, which reads no global memory but the weights.
	constexpr int RN = 16;
	const int nt = blockDim.x;
	float *gain = row + D; // the norm's g = w or 1 + w, loaded in the same round
	float s = 0.0f;
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
			gain[i] = zero_centered ? 1.0f + wv[u] : wv[u];
			s += v[u] * v[u];
		}
	}
	s = block_sum(s, sh); // its barriers also make row whole
	float r = 1.0f / sqrtf(s / (float)D + eps);
	constexpr int PN = 8;
	for (int p0 = threadIdx.x; p0 < nc * 8; p0 += PN * nt) {
		float v[PN][2];
#pragma unroll
		for (int u = 0; u < PN; u++)
#pragma unroll
			for (int k = 0; k < 2; k++) {
				int i = 2 * (p0 + u * nt) + k;
				v[u][k] = i < D ? row[i] * r * gain[i] : 0.0f;
			}
#pragma unroll
		for (int u = 0; u < PN; u++)
			if (p0 + u * nt < nc * 8) mma_put_terms(xs, nc, blockIdx.x, 2 * (p0 + u * nt), v[u][0], v[u][1], terms);
	}
}

// lb_rmsnorm_terms_slices: lb_add_rmsnorm_terms without the add (the
// residual already added into x: lb_mma_gemv_bulk's acc), each row's
// output spread over gridDim.y blocks of 256 threads, at most one column
// pair a thread. Every block sums its whole row's squares in
// lb_add_rmsnorm_terms's order (the same r, bit for bit) and writes the
// terms of its share of the pairs. A decode step's row then runs on
// several SMs: on one block, its load rounds and stores held a Qwen3-8B
// step for 9.7 µs a launch, a seventh of the step (BENCHMARKS.md).
extern "C" __global__ void __launch_bounds__(256) lb_rmsnorm_terms_slices(const float *x, u32 *xs, const float *w,
                                                                            int D, float eps, int zero_centered,
                                                                            int nc, int terms) {
	lb_pdl_wait();
	__shared__ float sh[32];
	const float *xr = x + (i64)blockIdx.x * D;
	const int nt = blockDim.x, per = (nc * 8 + gridDim.y - 1) / gridDim.y;
	// This thread's pair, loaded with the row's first round.
	int p = blockIdx.y * per + threadIdx.x;
	bool mine = threadIdx.x < per && p < nc * 8;
	float pv[2] = {0.0f, 0.0f}, pg[2] = {0.0f, 0.0f};
	if (mine)
#pragma unroll
		for (int k = 0; k < 2; k++) {
			int i = 2 * p + k;
			if (i < D) pv[k] = xr[i], pg[k] = zero_centered ? 1.0f + w[i] : w[i];
		}
	constexpr int RN = 16;
	float s = 0.0f;
	for (int i0 = threadIdx.x; i0 < D; i0 += RN * nt) {
		float v[RN];
#pragma unroll
		for (int u = 0; u < RN; u++) {
			int i = i0 + u * nt;
			v[u] = i < D ? xr[i] : 0.0f;
		}
#pragma unroll
		for (int u = 0; u < RN; u++) {
			if (i0 + u * nt >= D) break;
			s += v[u] * v[u];
		}
	}
	s = block_sum(s, sh);
	float r = 1.0f / sqrtf(s / (float)D + eps);
	if (mine)
		mma_put_terms(xs, nc, blockIdx.x, 2 * p, 2 * p < D ? pv[0] * r * pg[0] : 0.0f,
		              2 * p + 1 < D ? pv[1] * r * pg[1] : 0.0f, terms);
}
