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

// The arithmetic both kernels below share, so that they give the same
// bits: a head's sum of squares is fma(x, x, s) over each lane's elements
// lane, lane + 32, … in order from 0, then warp_sum (a fixed order: a
// token's result does not depend on the batch); the normalized element is
// (x·r)·w, two roundings; NeoX RoPE's element j < half is fma(a, cos,
// −(b·sin)) with b the element half ahead, j in [half, rot) fma(a, cos,
// b·sin) with b the element half behind (cos and sin of j mod half).
__device__ __forceinline__ float qkr_normed(float x, float r, float w) { return __fmul_rn(__fmul_rn(x, r), w); }
__device__ __forceinline__ float qkr_rotate(float a, float b, float2 cs, bool first) {
	float bs = __fmul_rn(b, cs.y);
	return __fmaf_rn(a, cs.x, first ? -bs : bs);
}
__device__ __forceinline__ float qkr_rsqrt(float s, int Dh, float eps) {
	return 1.0f / sqrtf(__fadd_rn(__fdiv_rn(s, (float)Dh), eps));
}

// Layout: q [T, H, Dh], k and v [T, KVH, Dh] float32; pos, seq [T] int32;
// tables as lb_kv_write_varlen.
//
// Two variants, the same bits (TestQKNormRoPE):
//
// lb_qk_norm_rope_w, for the (Dh, rot) pairs of its switch (Qwen3's 128
// and 128 among them; qkNormRoPEWarpFits in launch.go lists them): one
// warp a (token, head), QKRW_WARPS a block. Lane l holds elements l, l +
// 32, … in registers; an element's RoPE partner, half away, is then in the
// same lane, HM = half/32 registers along (both template arguments, so
// that no register array is indexed at run time). A head costs one load
// and one store of its elements and no barrier. On Qwen3-8B's 8,192-token
// prefill chunk the one-block-a-token kernel below ran at about a quarter
// of the copy rate (0.36 ms a layer): its 1,024-thread blocks (54
// registers a thread) fit one an SM, and the second of a token's two
// rounds of 32 heads left half its warps idle.
//
// lb_qk_norm_rope: any even rot ≤ Dh ≤ 256. One block per token, one warp
// per head at a time (a head's bits do not depend on which warp), the
// normalized head staged in shared memory for the rotation. QKR_WARPS
// warps a block (Device launches that many): a decode step's token has its
// heads in few rounds (48 heads of Qwen3-8B in two).
#define QKR_WARPS 32
#define QKRW_WARPS 8

// qkr_head_w is lb_qk_norm_rope_w's work for one q or k head x (in place)
// of E·32 elements, the first HM·64 rotated; kp, when not null, is the
// key cache, and kdst the index of the head's first element there.
template <int E, int HM>
__device__ __forceinline__ void qkr_head_w(float *x, const float *w, int qk_norm, float eps, const float2 *cs, u8 *kp,
                                           i64 kdst, int dtype, float kscale) {
	const int lane = threadIdx.x & 31;
	float v[E], o[E];
#pragma unroll
	for (int m = 0; m < E; m++) v[m] = x[lane + 32 * m];
	if (qk_norm) {
		float s = 0.0f;
#pragma unroll
		for (int m = 0; m < E; m++) s = __fmaf_rn(v[m], v[m], s);
		float r = qkr_rsqrt(warp_sum(s), E * 32, eps);
#pragma unroll
		for (int m = 0; m < E; m++) v[m] = qkr_normed(v[m], r, w[lane + 32 * m]);
	}
#pragma unroll
	for (int m = 0; m < E; m++) {
		if (m < HM) o[m] = qkr_rotate(v[m], v[m + HM], cs[lane + 32 * m], true);
		else if (m < 2 * HM) o[m] = qkr_rotate(v[m], v[m - HM], cs[lane + 32 * (m - HM)], false);
		else o[m] = v[m];
	}
#pragma unroll
	for (int m = 0; m < E; m++) x[lane + 32 * m] = o[m];
	if (kp) {
#pragma unroll
		for (int m = 0; m < E; m++) kv_put(kp, kdst + lane + 32 * m, o[m], dtype, kscale);
	}
}

template <int E, int HM>
__device__ __forceinline__ void qkr_unit_w(float *q, float *k, const float *v, const float *qw, const float *kw,
                                           int qk_norm, float eps, int t, int hd, int H, int KVH, const float2 *cs,
                                           u8 *kp, u8 *vp, i64 dst, int dtype, float kscale, float vscale) {
	const int Dh = E * 32, row = KVH * Dh, lane = threadIdx.x & 31;
	if (hd >= H + KVH) { // v: stored as is
		int e0 = (hd - H - KVH) * Dh;
		float x[E];
#pragma unroll
		for (int m = 0; m < E; m++) x[m] = v[(i64)t * row + e0 + lane + 32 * m];
#pragma unroll
		for (int m = 0; m < E; m++) kv_put(vp, dst + e0 + lane + 32 * m, x[m], dtype, vscale);
		return;
	}
	if (hd < H)
		qkr_head_w<E, HM>(q + ((i64)t * H + hd) * Dh, qw, qk_norm, eps, cs, nullptr, 0, dtype, kscale);
	else
		qkr_head_w<E, HM>(k + (i64)t * row + (hd - H) * Dh, kw, qk_norm, eps, cs, kp, dst + (hd - H) * Dh, dtype,
		                  kscale);
}

extern "C" __global__ void __launch_bounds__(32 * QKRW_WARPS)
    lb_qk_norm_rope_w(float *q, float *k, const float *v, const float *qw, const float *kw, int qk_norm, float eps,
                      const int *pos, int H, int KVH, int Dh, int rot, const float2 *table, u8 *kp, u8 *vp, int dtype,
                      float kscale, float vscale, const int *tables, int stride, const int *seq, int bs, int T) {
	lb_pdl_wait();
	int nh = H + 2 * KVH;
	i64 unit = (i64)blockIdx.x * QKRW_WARPS + (threadIdx.x >> 5);
	if (unit >= (i64)T * nh) return;
	int t = (int)(unit / nh), hd = (int)(unit % nh);
	const float2 *cs = table + (i64)t * (rot / 2);
	i64 dst = kv_row(tables + (i64)seq[t] * stride, bs, pos[t]) * (KVH * Dh);
#define QKR_CASE(E, HM)                                                                                         \
	case E * 16 + HM:                                                                                       \
		qkr_unit_w<E, HM>(q, k, v, qw, kw, qk_norm, eps, t, hd, H, KVH, cs, kp, vp, dst, dtype, kscale, vscale); \
		break;
	switch ((Dh >> 5) * 16 + (rot >> 6)) {
		QKR_CASE(2, 1) // 64, 64
		QKR_CASE(4, 1) // 128, 64
		QKR_CASE(4, 2) // 128, 128
		QKR_CASE(8, 1) // 256, 64
		QKR_CASE(8, 2) // 256, 128
		QKR_CASE(8, 4) // 256, 256
	}
#undef QKR_CASE
}

extern "C" __global__ void __launch_bounds__(32 * QKR_WARPS) lb_qk_norm_rope(float *q, float *k, const float *v, const float *qw, const float *kw,
                                           int qk_norm, float eps, const int *pos, int H, int KVH, int Dh, int rot,
                                           const float2 *table, u8 *kp, u8 *vp, int dtype, float kscale, float vscale,
                                           const int *tables, int stride, const int *seq, int bs) {
	lb_pdl_wait();
	__shared__ float2 cs[128];
	__shared__ float buf[QKR_WARPS][256];
	int t = blockIdx.x, lane = threadIdx.x & 31, wi = threadIdx.x >> 5, nw = blockDim.x >> 5;
	int half = rot / 2, p = pos[t];
	for (int j = threadIdx.x; j < half; j += blockDim.x) cs[j] = table[(i64)t * half + j];
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
			for (int i = lane; i < Dh; i += 32) s = __fmaf_rn(x[i], x[i], s);
			r = qkr_rsqrt(warp_sum(s), Dh, eps);
		}
		for (int i = lane; i < Dh; i += 32) b[i] = qk_norm ? qkr_normed(x[i], r, w[i]) : x[i];
		__syncwarp();
		for (int j = lane; j < Dh; j += 32) {
			float o = b[j];
			if (j < half) o = qkr_rotate(b[j], b[j + half], cs[j], true);
			else if (j < rot) o = qkr_rotate(b[j], b[j - half], cs[j - half], false);
			x[j] = o;
		}
		__syncwarp();
		if (!isq) {
			int e0 = (hd - H) * Dh;
			for (int i = lane; i < Dh; i += 32) kv_put(kp, kv_row(blocks, bs, p) * row + e0 + i, x[i], dtype, kscale);
		}
	}
}
