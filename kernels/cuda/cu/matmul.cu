// matmul.cu: y[t,o] = Σ_i xe[t,i]·w[o,i] with the weight's and the
// activations' numerics (kernels.Weight, kernels.ActQuant): the reference
// CUDA path, CUDA cores in float32, one warp per output element.
//
// Weight formats (fmt, as kernels/cpu's LB_W_*): 1 BF16; 2 FP8 with one
// scale per row; 3 FP8 with one scale; 4 FP8 with 128×128 block scales; 5
// NVFP4 (E2M1 codes, low nibble first, float32 block scales per 16, a global
// scale). Activations (act): 0 float32; 1, 2 FP8 with one scale per token
// (xs[t]); 3 FP8 with one scale per 128 (xs[t, g]); 4 NVFP4 with one scale
// per 16 (xs[t, g]); xe holds the decoded codes (act_quant.cu).
//
// Layout: xe [T, in], y [T, out] float32; w [out, in] as stored; ws the
// weight scales; grid (ceil(out / warps), T), one warp per (t, o).
//
// Reduction order: lane l takes elements i0 + 4l .. i0 + 4l + 3 of each
// 128-column chunk i0 (so a chunk is one FP8 block column or activation
// group), sums them in order, scales the chunk's partial by the chunk's
// block scales, and accumulates chunks in order; the 32 lanes then reduce
// by a fixed butterfly. Row scales (FP8 per row or tensor, NVFP4's global,
// per-token activation scales) multiply the total. The order depends only
// on in, so (t, o) gets the same bits whatever T, the batch or the grid.
__device__ __forceinline__ float weight_value(const u8 *w, const float *ws, int fmt, i64 idx) {
	switch (fmt) {
	case 1:
		return bf16_to_f32(((const u16 *)w)[idx]);
	case 5: {
		u32 b = w[idx >> 1];
		return e2m1_to_f32((idx & 1) ? b >> 4 : b & 15u) * ws[idx >> 4];
	}
	default:
		return e4m3_to_f32(w[idx]);
	}
}

extern "C" __global__ void lb_matmul(float *y, const float *xe, const float *xs, const u8 *w, const float *ws,
                                     float global, int T, int out, int in, int fmt, int act) {
	lb_pdl_wait();
	int lane = threadIdx.x & 31;
	int o = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
	int t = blockIdx.y;
	if (o >= out) return;
	const float *xr = xe + (i64)t * in;
	i64 row = (i64)o * in;
	int chunks = (in + 127) / 128;
	float acc = 0.0f;
	for (int c = 0; c < chunks; c++) {
		int i0 = c * 128 + lane * 4;
		float part = 0.0f;
		for (int k = 0; k < 4; k++) {
			int i = i0 + k;
			if (i < in) {
				float xv = xr[i];
				if (act == 4) xv *= xs[(i64)t * (in / 16) + i / 16];
				part += xv * weight_value(w, ws, fmt, row + i);
			}
		}
		float f = 1.0f;
		if (fmt == 4) f *= ws[(i64)(o / 128) * chunks + c];
		if (act == 3) f *= xs[(i64)t * (in / 128) + c];
		acc += part * f;
	}
	acc = warp_sum(acc);
	if (lane != 0) return;
	if (fmt == 2) acc *= ws[o];
	if (fmt == 3) acc *= ws[0];
	if (fmt == 5) acc *= global;
	if (act == 1 || act == 2) acc *= xs[t];
	y[(i64)t * out + o] = acc;
}
