// qk_norm_rope.cu: a layer's step from q, k, v to the attention's inputs in
// one launch: each q and k head RMS-normalized over head_dim (when qk_norm;
// Qwen3's q_norm/k_norm weights, eps, as lb_rmsnorm), rotated by NeoX RoPE
// (angles in float64 as lb_rope, from the step's table: lb_rope_table), q in
// place, and k and v stored into the paged cache (kv_store's conversions,
// kv_write.cu).
//
// lb_rope_table writes the step's cos and sin once for every layer: cs
// [T][rot/2] float2 (cos, sin) of pos[t]·theta^(−2j/rot), computed in
// float64 and rounded to float32, one thread a (token, j). Computed in each
// layer's launch, the float64 pow, cos and sin took most of its time (0.41
// ms a layer for 8,192 tokens on the H200, 4x its bytes' time).
extern "C" __global__ void lb_rope_table(float2 *cs, const int *pos, int T, int rot, double theta) {
	lb_pdl_wait();
	int half = rot / 2;
	i64 id = (i64)blockIdx.x * blockDim.x + threadIdx.x;
	if (id >= (i64)T * half) return;
	int t = (int)(id / half), j = (int)(id % half);
	double ang = (double)pos[t] * pow(theta, -2.0 * (double)j / (double)rot);
	cs[id] = make_float2((float)cos(ang), (float)sin(ang));
}

// Layout: q [T, H, Dh], k and v [T, KVH, Dh] float32; pos, seq [T] int32;
// tables as lb_kv_write_varlen. One block per token, one warp per head at
// a time (a head's bits do not depend on which warp); Dh ≤ 256. The head's sum of squares is each lane's elements
// lane, lane + 32, … in order, then warp_sum: a fixed order, so a token's
// result does not depend on the batch.
// QKR_WARPS warps a block (Device launches that many): a decode step's
// token has its heads in few rounds (48 heads of Qwen3-8B in two).
#define QKR_WARPS 32
extern "C" __global__ void __launch_bounds__(32 * QKR_WARPS) lb_qk_norm_rope(float *q, float *k, const float *v, const float *qw, const float *kw,
                                           int qk_norm, float eps, const int *pos, int H, int KVH, int Dh, int rot,
                                           const float2 *table, u8 *kp, u8 *vp, int dtype, float kscale, float vscale,
                                           const int *tables, int stride, const int *seq, int bs) {
	lb_pdl_wait();
	__shared__ float cs[128], sn[128], buf[QKR_WARPS][256];
	int t = blockIdx.x, lane = threadIdx.x & 31, wi = threadIdx.x >> 5, nw = blockDim.x >> 5;
	int half = rot / 2, p = pos[t];
	for (int j = threadIdx.x; j < half; j += blockDim.x) {
		float2 c = table[(i64)t * half + j];
		cs[j] = c.x;
		sn[j] = c.y;
	}
	__syncthreads();
	const int *blocks = tables + (i64)seq[t] * stride;
	int row = KVH * Dh;
	for (int hd = wi; hd < H + 2 * KVH; hd += nw) {
		if (hd >= H + KVH) { // v: stored as is
			int e0 = (hd - H - KVH) * Dh;
			for (int i = lane; i < Dh; i += 32)
				kv_put(vp, kv_row(blocks, bs, p) * row + e0 + i, v[(i64)t * row + e0 + i], dtype, vscale);
			continue;
		}
		bool isq = hd < H;
		float *x = isq ? q + ((i64)t * H + hd) * Dh : k + ((i64)t * KVH + hd - H) * Dh;
		const float *w = isq ? qw : kw;
		float *b = buf[wi];
		float r = 1.0f;
		if (qk_norm) {
			float s = 0.0f;
			for (int i = lane; i < Dh; i += 32) s += x[i] * x[i];
			s = warp_sum(s);
			r = 1.0f / sqrtf(s / (float)Dh + eps);
		}
		for (int i = lane; i < Dh; i += 32) b[i] = qk_norm ? x[i] * r * w[i] : x[i];
		__syncwarp();
		for (int j = lane; j < Dh; j += 32) {
			float o = b[j];
			if (j < half) o = b[j] * cs[j] - b[j + half] * sn[j];
			else if (j < rot) o = b[j] * cs[j - half] + b[j - half] * sn[j - half];
			x[j] = o;
		}
		__syncwarp();
		if (!isq) {
			int e0 = (hd - H) * Dh;
			for (int i = lane; i < Dh; i += 32) kv_put(kp, kv_row(blocks, bs, p) * row + e0 + i, x[i], dtype, kscale);
		}
	}
}
