// act_quant.cu: activation quantization before a matmul, exactly as
// kernels.ActQuant defines it (the codes are bit-identical to the CPU's):
//   fp8 token / tensor (act 1, 2): s = max|x_t|/448 (1 if 0) or input_scale;
//       xe = e4m3(E4M3(x/s)); scales[t] = s;
//   fp8 group128 (3): per group of 128, s_g = max|x_g|/448 (1 if 0);
//       xe = e4m3(E4M3(x/s_g)); scales[t, g] = s_g;
//   nvfp4 (4): per group of 16, b = e4m3(E4M3(max|x_g|/6·G)) (0.125 if 0),
//       s_g = b/G; xe = e2m1(E2M1(x/s_g)); scales[t, g] = s_g.
// Divisions are IEEE divisions (NVRTC's default -prec-div=true), never
// products with a reciprocal; max propagates NaN as Go's does.
// Layout: x, xe [T, in]; scales [T, in/group] (group = in for token and
// tensor). One block per (token, group) for the grouped kinds and per token
// otherwise; max is exact in any order.
extern "C" __global__ void lb_act_quant(float *xe, float *scales, const float *x, int in, int act, float input_scale) {
	lb_pdl_wait();
	__shared__ float sh[32];
	int group = act == 3 ? 128 : act == 4 ? 16 : in;
	int ng = in / group;
	int t = blockIdx.x / ng, g = blockIdx.x % ng;
	const float *xs = x + (i64)t * in + (i64)g * group;
	float *qs = xe + (i64)t * in + (i64)g * group;
	float amax = 0.0f;
	for (int i = threadIdx.x; i < group; i += blockDim.x) amax = nanmax(amax, fabsf(xs[i]));
	amax = block_max(amax, sh);
	float s;
	if (act == 4) {
		float b = e4m3_to_f32(f32_to_e4m3(amax / 6.0f * input_scale));
		if (b == 0.0f) b = 0.125f;
		s = b / input_scale;
		for (int i = threadIdx.x; i < group; i += blockDim.x) qs[i] = e2m1_to_f32(f32_to_e2m1(xs[i] / s));
	} else {
		if (act == 2) {
			s = input_scale;
		} else {
			s = amax / 448.0f;
			if (amax == 0.0f) s = 1.0f;
		}
		for (int i = threadIdx.x; i < group; i += blockDim.x) qs[i] = e4m3_to_f32(f32_to_e4m3(xs[i] / s));
	}
	if (threadIdx.x == 0) scales[blockIdx.x] = s;
}
