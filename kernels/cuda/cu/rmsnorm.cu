// rmsnorm.cu: y[t,:] = x[t,:] / sqrt(mean(x[t,:]²) + eps) · g, with g = w or
// 1 + w (zero_centered, Qwen3.5).
// Layout: x, y [T, D] float32 (y may alias x); w [D] float32.
// One block per row; the sum of squares is a fixed-order block reduction,
// so a row's result does not depend on T.
extern "C" __global__ void lb_rmsnorm(float *y, const float *x, const float *w, int D, float eps, int zero_centered) {
	lb_pdl_wait();
	__shared__ float sh[32];
	const float *xr = x + (i64)blockIdx.x * D;
	float *yr = y + (i64)blockIdx.x * D;
	float s = 0.0f;
	for (int i = threadIdx.x; i < D; i += blockDim.x) s += xr[i] * xr[i];
	s = block_sum(s, sh);
	float r = 1.0f / sqrtf(s / (float)D + eps);
	for (int i = threadIdx.x; i < D; i += blockDim.x) {
		float g = zero_centered ? 1.0f + w[i] : w[i];
		yr[i] = xr[i] * r * g;
	}
}
