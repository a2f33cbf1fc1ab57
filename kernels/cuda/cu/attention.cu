// attention.cu: causal grouped-query attention of T new tokens over a
// sequence's KV cache, contiguous or paged, online softmax in float32.
//
// Computes, for token t (position p = start + t) and query head h, with KV
// head kh = h / (H / KVH): s[j] = (q·k[j])·scale for j ≤ p;
// out = Σ_j exp(s[j] − m)·v[j] / Σ_j exp(s[j] − m), m = max_j s[j].
//
// Layout: q, out [T, H, Dh] float32, Dh ≤ 256. The pools hold rows
// [KVH, Dh] of float32, BF16 or E4M3 (dtype 0, 1, 2; E4M3 codes times the
// pool's scale); position j is row blocks[j / bs]·bs + j % bs, or row j
// when blocks is null.
//
// Grid (T, H), 4 warps a block, no scratch memory whatever the context:
// warp w takes positions j ≡ w (mod 4) in increasing order and keeps a
// running max, sum and output (flash-attention's rescaling), lanes over
// the head dimension (dot products by a fixed butterfly); the 4 partial
// results are then merged in warp order. The order of every operation is
// fixed by (p, Dh), so a (t, h) result depends only on q[t,h] and the
// cache up to p: the same whatever T, batch or grid produced it.
#define ATT_WARPS 4
#define ATT_MAX_DH 256

__device__ __forceinline__ float kv_load(const u8 *pool, i64 idx, int dtype, float sc) {
	if (dtype == 1) return bf16_to_f32(((const u16 *)pool)[idx]);
	if (dtype == 2) return e4m3_to_f32(pool[idx]) * sc;
	return ((const float *)pool)[idx];
}

__device__ __forceinline__ i64 kv_row(const int *blocks, int bs, int j) {
	return blocks ? (i64)blocks[j / bs] * bs + j % bs : (i64)j;
}

// attend computes one (t, h) whose position is p, reading the sequence's
// block table blocks; both entry points below share it, so they give the
// same bits.
__device__ __forceinline__ void attend(float *out, const float *q, const u8 *kp, const u8 *vp, int dtype, float kscale,
                                       float vscale, const int *blocks, int bs, int p, int H, int KVH, int Dh,
                                       float scale) {
	__shared__ float qs[ATT_MAX_DH];
	__shared__ float wm[ATT_WARPS], wl[ATT_WARPS];
	__shared__ float wacc[ATT_WARPS][ATT_MAX_DH];
	int t = blockIdx.x, h = blockIdx.y, kh = h / (H / KVH);
	int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
	const float *qv = q + ((i64)t * H + h) * Dh;
	for (int d = threadIdx.x; d < Dh; d += blockDim.x) qs[d] = qv[d];
	__syncthreads();
	float m = -__int_as_float(0x7f800000), l = 0.0f, acc[ATT_MAX_DH / 32];
	for (int i = 0; i < ATT_MAX_DH / 32; i++) acc[i] = 0.0f;
	for (int j = warp; j <= p; j += ATT_WARPS) {
		i64 off = (kv_row(blocks, bs, j) * KVH + kh) * Dh;
		float dot = 0.0f;
		for (int d = lane; d < Dh; d += 32) dot += qs[d] * kv_load(kp, off + d, dtype, kscale);
		float s = warp_sum(dot) * scale;
		float mn = nanmax(m, s);
		float corr = expf(m - mn), e = expf(s - mn);
		l = l * corr + e;
#pragma unroll
		for (int i = 0; i < ATT_MAX_DH / 32; i++) {
			int d = lane + 32 * i;
			if (d < Dh) acc[i] = acc[i] * corr + e * kv_load(vp, off + d, dtype, vscale);
		}
		m = mn;
	}
	if (lane == 0) {
		wm[warp] = m;
		wl[warp] = l;
	}
#pragma unroll
	for (int i = 0; i < ATT_MAX_DH / 32; i++) {
		int d = lane + 32 * i;
		if (d < Dh) wacc[warp][d] = acc[i];
	}
	__syncthreads();
	float M = wm[0];
	for (int w = 1; w < ATT_WARPS; w++) M = nanmax(M, wm[w]);
	// A warp without positions (p < w) keeps m = -inf and adds nothing; a
	// NaN score propagates.
	const float ninf = -__int_as_float(0x7f800000);
	float L = 0.0f;
	for (int w = 0; w < ATT_WARPS; w++)
		if (wm[w] != ninf) L += wl[w] * expf(wm[w] - M);
	float *o = out + ((i64)t * H + h) * Dh;
	for (int d = threadIdx.x; d < Dh; d += blockDim.x) {
		float a = 0.0f;
		for (int w = 0; w < ATT_WARPS; w++)
			if (wm[w] != ninf) a += wacc[w][d] * expf(wm[w] - M);
		o[d] = a / L;
	}
}

extern "C" __global__ void lb_attention(float *out, const float *q, const u8 *kp, const u8 *vp, int dtype, float kscale,
                                        float vscale, const int *blocks, int bs, int start, int H, int KVH, int Dh,
                                        float scale) {
	attend(out, q, kp, vp, dtype, kscale, vscale, blocks, bs, start + (int)blockIdx.x, H, KVH, Dh, scale);
}

// lb_attention_varlen serves a whole batch in one launch: token t belongs
// to sequence seq[t], at position pos[t]; sequence s's block table is
// tables[s·stride ..]. A decode step's launch parameters then do not
// change from step to step, so it can be captured in a graph.
extern "C" __global__ void lb_attention_varlen(float *out, const float *q, const u8 *kp, const u8 *vp, int dtype,
                                               float kscale, float vscale, const int *tables, int stride,
                                               const int *seq, const int *pos, int bs, int H, int KVH, int Dh,
                                               float scale) {
	int t = blockIdx.x;
	attend(out, q, kp, vp, dtype, kscale, vscale, tables + (i64)seq[t] * stride, bs, pos[t], H, KVH, Dh, scale);
}
