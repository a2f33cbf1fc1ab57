// to_bf16.cu: dst[i] = BF16(src[i]) rounded to nearest even, for n float32
// elements (the activations the cuBLASLt prefill matmul reads, lt.go).
// Flat arrays; one thread per pair of elements.
extern "C" __global__ void lb_to_bf16(u32 *dst, const float *src, i64 n) {
	lb_pdl_wait();
	i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x;
	if (2 * i + 1 < n) {
		dst[i] = (u32)f32_to_bf16(src[2 * i]) | (u32)f32_to_bf16(src[2 * i + 1]) << 16;
	} else if (2 * i < n) {
		((u16 *)dst)[2 * i] = f32_to_bf16(src[2 * i]);
	}
}
