// silu_mul.cu: out[i] = silu(gate[i])·up[i] = gate/(1+exp(-gate))·up, and
// add: out[i] = a[i] + b[i]. Flat float32 arrays of n elements; out may
// alias an input. One thread per element.
extern "C" __global__ void lb_silu_mul(float *out, const float *gate, const float *up, i64 n) {
	lb_pdl_wait();
	i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n) {
		float g = gate[i];
		out[i] = g / (1.0f + expf(-g)) * up[i];
	}
}

extern "C" __global__ void lb_add(float *out, const float *a, const float *b, i64 n) {
	lb_pdl_wait();
	i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n) out[i] = a[i] + b[i];
}

// lb_silu_mul_terms: lb_silu_mul over [T, D] writing mma terms
// (matmul_mma.cu) for nc column chunks instead of float32 (terms 1: BF16
// activations, mma_terms_n); one thread per (token, column pair), columns
// past D zeros.
extern "C" __global__ void lb_silu_mul_terms(u32 *xs, const float *gate, const float *up, int T, int D, int nc,
                                             int terms) {
	lb_pdl_wait();
	i64 id = (i64)blockIdx.x * blockDim.x + threadIdx.x;
	if (id >= (i64)T * nc * 8) return;
	int t = (int)(id / (nc * 8)), p = (int)(id % (nc * 8));
	float v[2];
#pragma unroll
	for (int k = 0; k < 2; k++) {
		int i = 2 * p + k;
		float g = i < D ? gate[(i64)t * D + i] : 0.0f;
		v[k] = i < D ? lb_silu_mul1(g, up[(i64)t * D + i]) : 0.0f;
	}
	mma_put_terms(xs, nc, t, 2 * p, v[0], v[1], terms);
}

// lb_silu_mul_bf16: lb_silu_mul over n elements whose first nb (even) go
// out as BF16 pairs into outb instead of float32 into out: the prompt rows
// of a BF16 prefill, which only a cuBLASLt matmul reads (the bits of
// lb_silu_mul then lb_to_bf16, one pass). One thread per pair.
extern "C" __global__ void lb_silu_mul_bf16(float *out, u32 *outb, const float *gate, const float *up, i64 nb, i64 n) {
	lb_pdl_wait();
	i64 j = (i64)blockIdx.x * blockDim.x + threadIdx.x, i = 2 * j;
	if (i >= n) return;
	float g0 = gate[i], v0 = g0 / (1.0f + expf(-g0)) * up[i];
	if (i + 1 >= n) {
		out[i] = v0;
		return;
	}
	float g1 = gate[i + 1], v1 = g1 / (1.0f + expf(-g1)) * up[i + 1];
	if (i < nb) {
		outb[j] = (u32)f32_to_bf16(v0) | (u32)f32_to_bf16(v1) << 16;
	} else {
		out[i] = v0;
		out[i + 1] = v1;
	}
}
