// matmul_bf16.cu: y[t,o] = Σ_i x[t,i]·w[o,i] for BF16 weights and float32
// activations (ActNone) with in a multiple of 8: the memory-bound decode
// path, with 16-byte loads.
//
// Layout: x [T, in], y [T, out] float32; w [out, in] BF16, rows 16-byte
// aligned (in % 8 == 0). Grid (ceil(out / 8), ceil(T / MM_TT)); each warp
// computes one row o for up to MM_TT tokens, so each weight is loaded once
// for them.
//
// Reduction order: lane l takes the 8 elements 8l .. 8l+7 of each
// 256-column chunk, chunks in order, the 8 products of a chunk in order;
// the lanes then reduce by a fixed butterfly. It depends only on in, not
// on T or on which tokens share a warp, so results are batch invariant.
// (It differs from matmul.cu's order, which serves every other format; a
// weight always takes the same kernel, chosen by its format and shape.)
#define MM_TT 4

extern "C" __global__ void lb_matmul_bf16(float *__restrict__ y, const float *__restrict__ x,
                                          const u16 *__restrict__ w, int T, int out, int in) {
	int lane = threadIdx.x & 31;
	int o = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
	int t0 = blockIdx.y * MM_TT;
	if (o >= out) return;
	int nt = min(MM_TT, T - t0);
	const uint4 *wr = (const uint4 *)(w + (i64)o * in);
	float acc[MM_TT];
#pragma unroll
	for (int j = 0; j < MM_TT; j++) acc[j] = 0.0f;
	int chunks = in / 8; // 16-byte pieces of the row
#pragma unroll 4
	for (int c = lane; c < chunks; c += 32) {
		uint4 p = __ldg(wr + c);
		float wv[8];
		wv[0] = __uint_as_float(p.x << 16);
		wv[1] = __uint_as_float(p.x & 0xFFFF0000u);
		wv[2] = __uint_as_float(p.y << 16);
		wv[3] = __uint_as_float(p.y & 0xFFFF0000u);
		wv[4] = __uint_as_float(p.z << 16);
		wv[5] = __uint_as_float(p.z & 0xFFFF0000u);
		wv[6] = __uint_as_float(p.w << 16);
		wv[7] = __uint_as_float(p.w & 0xFFFF0000u);
#pragma unroll
		for (int j = 0; j < MM_TT; j++) {
			if (j < nt) {
				const float4 *xr = (const float4 *)(x + (i64)(t0 + j) * in) + 2 * c;
				float4 a = __ldg(xr), b = __ldg(xr + 1);
				float s = acc[j];
				s += a.x * wv[0];
				s += a.y * wv[1];
				s += a.z * wv[2];
				s += a.w * wv[3];
				s += b.x * wv[4];
				s += b.y * wv[5];
				s += b.z * wv[6];
				s += b.w * wv[7];
				acc[j] = s;
			}
		}
	}
#pragma unroll
	for (int j = 0; j < MM_TT; j++) {
		float s = warp_sum(acc[j]);
		if (lane == 0 && j < nt) y[(i64)(t0 + j) * out + o] = s;
	}
}
