// gather.cu: dst[r, :] = src[rows[r], :] for r < n, rows of width float32:
// the rows of a batch that return logits. One thread per element.
extern "C" __global__ void lb_gather_rows(float *dst, const float *src, const int *rows, int n, int width) {
	lb_pdl_wait();
	i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x;
	if (i >= (i64)n * width) return;
	int r = (int)(i / width), e = (int)(i % width);
	dst[i] = src[(i64)rows[r] * width + e];
}
