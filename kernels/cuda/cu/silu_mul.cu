// silu_mul.cu: out[i] = silu(gate[i])·up[i] = gate/(1+exp(-gate))·up, and
// add: out[i] = a[i] + b[i]. Flat float32 arrays of n elements; out may
// alias an input. One thread per element.
extern "C" __global__ void lb_silu_mul(float *out, const float *gate, const float *up, i64 n) {
	i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n) {
		float g = gate[i];
		out[i] = g / (1.0f + expf(-g)) * up[i];
	}
}

extern "C" __global__ void lb_add(float *out, const float *a, const float *b, i64 n) {
	i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n) out[i] = a[i] + b[i];
}
