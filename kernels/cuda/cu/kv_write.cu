// kv_write.cu: stores the new tokens' keys and values into a paged KV
// cache, converted to its dtype (0 float32, 1 BF16 round to nearest even,
// 2 E4M3 of value/scale saturated to ±448): the bytes of kernels.WriteKV.
// Layout: k, v [T, KVH·Dh] float32 for positions start..start+T-1; pools
// of rows [KVH, Dh]; position p is row blocks[p / bs]·bs + p % bs. One
// thread per element.
// kv_put stores one element at pool index dst in the cache's dtype.
__device__ __forceinline__ void kv_put(u8 *pool, i64 dst, float val, int dtype, float scale) {
	if (dtype == 1) ((u16 *)pool)[dst] = f32_to_bf16(val);
	else if (dtype == 2) pool[dst] = f32_to_e4m3(val / scale);
	else ((float *)pool)[dst] = val;
}


__device__ __forceinline__ void kv_store(u8 *kp, u8 *vp, const float *k, const float *v, int dtype, float kscale,
                                         float vscale, const int *blocks, int bs, int p, i64 idx, int e, int row_elems) {
	i64 dst = kv_row(blocks, bs, p) * row_elems + e;
	kv_put(kp, dst, k[idx], dtype, kscale);
	kv_put(vp, dst, v[idx], dtype, vscale);
}

extern "C" __global__ void lb_kv_write(u8 *kp, u8 *vp, const float *k, const float *v, int dtype, float kscale,
                                       float vscale, const int *blocks, int bs, int T, int start, int row_elems) {
	lb_pdl_wait();
	i64 idx = (i64)blockIdx.x * blockDim.x + threadIdx.x;
	if (idx >= (i64)T * row_elems) return;
	int t = (int)(idx / row_elems), e = (int)(idx % row_elems);
	kv_store(kp, vp, k, v, dtype, kscale, vscale, blocks, bs, start + t, idx, e, row_elems);
}

// lb_kv_write_varlen: a whole batch in one launch (token t of sequence
// seq[t] at position pos[t]; tables as in lb_attention_varlen).
extern "C" __global__ void lb_kv_write_varlen(u8 *kp, u8 *vp, const float *k, const float *v, int dtype, float kscale,
                                              float vscale, const int *tables, int stride, const int *seq,
                                              const int *pos, int bs, int T, int row_elems) {
	lb_pdl_wait();
	i64 idx = (i64)blockIdx.x * blockDim.x + threadIdx.x;
	if (idx >= (i64)T * row_elems) return;
	int t = (int)(idx / row_elems), e = (int)(idx % row_elems);
	kv_store(kp, vp, k, v, dtype, kscale, vscale, tables + (i64)seq[t] * stride, bs, pos[t], idx, e, row_elems);
}
