// attention.cu: causal grouped-query attention of T new tokens over their
// sequences' KV caches, contiguous or paged, online softmax in float32,
// split over the context (flash-decoding) so that a decode step has work
// for every multiprocessor.
//
// Computes, for token t (position p) and query head h, with KV head
// kh = h / (H / KVH): s[j] = (q·k[j])·scale for j ≤ p;
// out = Σ_j exp(s[j] − m)·v[j] / Σ_j exp(s[j] − m), m = max_j s[j].
//
// Layout: q, out [T, H, Dh] float32, Dh ≤ 256. The pools hold rows
// [KVH, Dh] of float32, BF16 or E4M3 (dtype 0, 1, 2; E4M3 codes times the
// pool's scale). Token t belongs to sequence seq[t] at position pos[t];
// sequence s's block table is tables[s·stride ..], position j being row
// table[j / bs]·bs + j % bs, or row j when tables is null (a contiguous
// cache).
//
// Two launches. lb_attention_split, grid (T, H, ATT_SPLITS): block z takes
// the positions of chunk z up to p, chunks being att_chunk(p) positions (a
// multiple of 32, at least 32, so that p's context is split in at most
// ATT_SPLITS chunks), its warp w those ≡ w (mod 4) in increasing order
// with a running max, sum and output (lane l holding the Dh/32 consecutive
// dimensions from l·Dh/32, so a warp reads a row in one contiguous span);
// the 4 warps merge in warp order and the chunk's (max, sum, output)
// goes to partials [part_off[t] + z, H, Dh + 2]. lb_attention_merge, grid (T, H),
// merges chunks 0 .. p / att_chunk(p) in order. Token t's chunks are stored
// from partial index part_off[t] on (a prefix sum of the tokens' chunk
// counts, so prefill chunks take memory for the positions they have, not
// for the longest). How the context is split
// depends only on p, so a (t, h) result depends only on q[t,h] and its
// cache up to p: the same whatever T, batch, table or grid produced it.
#define ATT_WARPS 4
#define ATT_MAX_DH 256

__device__ __forceinline__ float kv_load(const u8 *pool, i64 idx, int dtype, float sc) {
	if (dtype == 1) return bf16_to_f32(((const u16 *)pool)[idx]);
	if (dtype == 2) return e4m3_to_f32(pool[idx]) * sc;
	return ((const float *)pool)[idx];
}

#define ATT_SPLITS 64

// att_chunk is the chunk size for position p: the context p + 1 split in
// at most ATT_SPLITS chunks of a multiple of 32 positions. It depends on p
// alone (batch invariance); kernels/cuda's attChunk computes the same.
__device__ __forceinline__ int att_chunk(int p) {
	int per = (p + 1 + ATT_SPLITS - 1) / ATT_SPLITS;
	return max(32, (per + 31) / 32 * 32);
}

extern "C" __global__ void lb_attention_split(float *partials, const float *q, const u8 *kp, const u8 *vp, int dtype,
                                              float kscale, float vscale, const int *tables, int stride,
                                              const int *seq, const int *pos, const int *part_off, int bs, int H,
                                              int KVH, int Dh, float scale) {
	lb_pdl_wait();
	__shared__ float qs[ATT_MAX_DH];
	__shared__ float wm[ATT_WARPS], wl[ATT_WARPS];
	__shared__ float wacc[ATT_WARPS][ATT_MAX_DH];
	int t = blockIdx.x, h = blockIdx.y, z = blockIdx.z, kh = h / (H / KVH);
	int p = pos[t], chunk = att_chunk(p), begin = z * chunk;
	if (begin > p) return; // chunks past the position are never merged
	int end = min(begin + chunk, p + 1);
	const int *blocks = tables ? tables + (i64)seq[t] * stride : 0;
	int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
	const float *qv = q + ((i64)t * H + h) * Dh;
	for (int d = threadIdx.x; d < Dh; d += blockDim.x) qs[d] = qv[d];
	__syncthreads();
	const float ninf = -__int_as_float(0x7f800000);
	float m = ninf, l = 0.0f, acc[ATT_MAX_DH / 32];
#pragma unroll
	for (int i = 0; i < ATT_MAX_DH / 32; i++) acc[i] = 0.0f;
	const int per = (Dh + 31) / 32, d0 = lane * per; // lanes past Dh idle
	for (int j = begin + warp; j < end; j += ATT_WARPS) {
		i64 off = (kv_row(blocks, bs, j) * KVH + kh) * Dh + d0;
		float dot = 0.0f;
#pragma unroll
		for (int i = 0; i < ATT_MAX_DH / 32; i++)
			if (i < per && d0 + i < Dh) dot += qs[d0 + i] * kv_load(kp, off + i, dtype, kscale);
		float s = warp_sum(dot) * scale;
		float mn = nanmax(m, s);
		float corr = expf(m - mn), e = expf(s - mn);
		l = l * corr + e;
#pragma unroll
		for (int i = 0; i < ATT_MAX_DH / 32; i++)
			if (i < per && d0 + i < Dh) acc[i] = acc[i] * corr + e * kv_load(vp, off + i, dtype, vscale);
		m = mn;
	}
	if (lane == 0) {
		wm[warp] = m;
		wl[warp] = l;
	}
#pragma unroll
	for (int i = 0; i < ATT_MAX_DH / 32; i++)
		if (i < per && d0 + i < Dh) wacc[warp][d0 + i] = acc[i];
	__syncthreads();
	// A warp without positions keeps m = -inf and adds nothing; a NaN score
	// propagates.
	float M = wm[0];
	for (int w = 1; w < ATT_WARPS; w++) M = nanmax(M, wm[w]);
	float *part = partials + (((i64)part_off[t] + z) * H + h) * (Dh + 2);
	if (threadIdx.x == 0) {
		float L = 0.0f;
		for (int w = 0; w < ATT_WARPS; w++)
			if (wm[w] != ninf) L += wl[w] * expf(wm[w] - M);
		part[0] = M;
		part[1] = L;
	}
	for (int d = threadIdx.x; d < Dh; d += blockDim.x) {
		float a = 0.0f;
		for (int w = 0; w < ATT_WARPS; w++)
			if (wm[w] != ninf) a += wacc[w][d] * expf(wm[w] - M);
		part[2 + d] = a;
	}
}

extern "C" __global__ void lb_attention_merge(float *out, const float *partials, const int *pos, const int *part_off,
                                              int H, int Dh) {
	lb_pdl_wait();
	int t = blockIdx.x, h = blockIdx.y, n = pos[t] / att_chunk(pos[t]) + 1;
	i64 zs = (i64)H * (Dh + 2); // from one chunk's partial to the next
	const float *part = partials + ((i64)part_off[t] * H + h) * (Dh + 2);
	float M = part[0];
	for (int z = 1; z < n; z++) M = nanmax(M, part[z * zs]);
	float L = 0.0f;
	for (int z = 0; z < n; z++) L += part[z * zs + 1] * expf(part[z * zs] - M);
	float *o = out + ((i64)t * H + h) * Dh;
	for (int d = threadIdx.x; d < Dh; d += blockDim.x) {
		float a = 0.0f;
		for (int z = 0; z < n; z++) a += part[z * zs + 2 + d] * expf(part[z * zs] - M);
		o[d] = a / L;
	}
}
