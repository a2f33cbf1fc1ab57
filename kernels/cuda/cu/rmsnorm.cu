// rmsnorm.cu: y[t,:] = x[t,:] / sqrt(mean(x[t,:]²) + eps) · g, with g = w or
// 1 + w (zero_centered, Qwen3.5).
// Layout: x, y [T, D] float32 (y may alias x); w [D] float32; D ≤ 16384.
// One block per row; the sum of squares in the RMS order (common.cuh), so a
// row's result depends on nothing but the row, and every norm kernel gives
// its bits.
extern "C" __global__ void lb_rmsnorm(float *y, const float *x, const float *w, int D, float eps, int zero_centered) {
	lb_pdl_wait();
	__shared__ float tiles[RMS_TILES_MAX];
	const float *xr = x + (i64)blockIdx.x * D;
	float *yr = y + (i64)blockIdx.x * D;
	float r = rms_scale(block_rms_sumsq(xr, D, tiles), D, eps);
	for (int i = threadIdx.x; i < D; i += blockDim.x) yr[i] = rms_apply(xr[i], r, rms_gain(w[i], zero_centered));
}
