// log_softmax.cu: out[t,:] = logits[t,:] - (m + log Σ exp(logits[t,:] - m)),
// m the row's max; sums in float32 by a fixed-order block reduction.
// Layout: logits, out [T, V] float32; out may alias logits. One block per
// row.
extern "C" __global__ void lb_log_softmax(float *out, const float *logits, int V) {
	lb_pdl_wait();
	__shared__ float sh[32];
	const float *x = logits + (i64)blockIdx.x * V;
	float *o = out + (i64)blockIdx.x * V;
	float m = -__int_as_float(0x7f800000);
	for (int i = threadIdx.x; i < V; i += blockDim.x) m = nanmax(m, x[i]);
	m = block_max(m, sh);
	float s = 0.0f;
	for (int i = threadIdx.x; i < V; i += blockDim.x) s += expf(x[i] - m);
	s = block_sum(s, sh);
	float lse = m + logf(s);
	for (int i = threadIdx.x; i < V; i += blockDim.x) o[i] = x[i] - lse;
}
