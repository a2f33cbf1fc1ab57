// embed.cu: x[t, :] = float32(table[ids[t], :]), the embedding rows of T
// tokens gathered from a BF16 table [vocab, hidden] (exact: a 16-bit
// shift). One thread per element.
extern "C" __global__ void lb_embed(float *x, const u16 *table, const int *ids, int T, int hidden) {
	lb_pdl_wait();
	i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x;
	if (i >= (i64)T * hidden) return;
	int t = (int)(i / hidden), e = (int)(i % hidden);
	x[i] = bf16_to_f32(table[(i64)ids[t] * hidden + e]);
}
