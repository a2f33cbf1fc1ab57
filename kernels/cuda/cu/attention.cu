// attention.cu: causal grouped-query attention of T new tokens over a
// sequence's KV cache, contiguous or paged, two-pass softmax in float32.
//
// Computes, for token t (position p = start + t) and query head h, with KV
// head kh = h / (H / KVH): s[j] = (q·k[j])·scale for j ≤ p; m = max s;
// e[j] = expf(s[j] − m); out = Σ_j e[j]·v[j] / Σ_j e[j].
//
// Layout: q, out [T, H, Dh] float32. The pools hold rows [KVH, Dh] of
// float32, BF16 or E4M3 (dtype 0, 1, 2; E4M3 codes times the pool's scale);
// position j is row blocks[j / bs]·bs + j % bs, or row j when blocks is
// null. scratch holds [T·H, ctx] scores. Grid (T, H); one block per
// (t, h): each warp scores positions j ≡ warp (mod warps), lanes over the
// head dimension with a fixed butterfly; max and sum are fixed-order block
// reductions; each thread accumulates its output dimensions over j in
// order. A (t, h) result depends only on q[t,h] and the cache up to p.
__device__ __forceinline__ float kv_load(const u8 *pool, i64 idx, int dtype, float sc) {
	if (dtype == 1) return bf16_to_f32(((const u16 *)pool)[idx]);
	if (dtype == 2) return e4m3_to_f32(pool[idx]) * sc;
	return ((const float *)pool)[idx];
}

__device__ __forceinline__ i64 kv_row(const int *blocks, int bs, int j) {
	return blocks ? (i64)blocks[j / bs] * bs + j % bs : (i64)j;
}

extern "C" __global__ void lb_attention(float *out, const float *q, const u8 *kp, const u8 *vp, int dtype, float kscale,
                                        float vscale, const int *blocks, int bs, int start, int H, int KVH, int Dh,
                                        float scale, float *scratch, int ctx) {
	__shared__ float sh[32];
	extern __shared__ float qs[];
	int t = blockIdx.x, h = blockIdx.y, p = start + t, kh = h / (H / KVH);
	int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
	const float *qv = q + ((i64)t * H + h) * Dh;
	float *s = scratch + ((i64)t * H + h) * ctx;
	for (int d = threadIdx.x; d < Dh; d += blockDim.x) qs[d] = qv[d];
	__syncthreads();
	for (int j = warp; j <= p; j += nw) {
		i64 off = (kv_row(blocks, bs, j) * KVH + kh) * Dh;
		float dot = 0.0f;
		for (int d = lane; d < Dh; d += 32) dot += qs[d] * kv_load(kp, off + d, dtype, kscale);
		dot = warp_sum(dot);
		if (lane == 0) s[j] = dot * scale;
	}
	__syncthreads();
	float m = -__int_as_float(0x7f800000);
	for (int j = threadIdx.x; j <= p; j += blockDim.x) m = nanmax(m, s[j]);
	m = block_max(m, sh);
	float sum = 0.0f;
	for (int j = threadIdx.x; j <= p; j += blockDim.x) {
		float e = expf(s[j] - m);
		s[j] = e;
		sum += e;
	}
	sum = block_sum(sum, sh);
	__syncthreads();
	float *o = out + ((i64)t * H + h) * Dh;
	for (int d = threadIdx.x; d < Dh; d += blockDim.x) {
		float a = 0.0f;
		for (int j = 0; j <= p; j++) a += s[j] * kv_load(vp, (kv_row(blocks, bs, j) * KVH + kh) * Dh + d, dtype, vscale);
		o[d] = a / sum;
	}
}
