// rope_attention_decode.cu: lb_flash_decode_rope_d<head dim>[_q1][_fp8], a
// decode step's q/k-norm with RoPE, KV-cache write and attention in one
// launch: attention_mma_decode.cu's kernels (fd_run) with fd_rope preparing
// each tile, for batches whose every tile holds all of its sequence's
// tokens of the step (AttentionPlan.OwnRuns: decode steps).
//
// Why: lb_qk_norm_rope_w between a decode step's q/k/v GEMV and its
// attention costs the step a launch and a round trip of q and k through
// memory, 1.4 µs a layer of the Qwen3-8B shape (BENCHMARKS.md: the kernel
// left out of the step).
//
// Bits: those of lb_qk_norm_rope_w followed by lb_flash_decode_*
// (TestFlashDecodeRoPE): both compute a head with qkr_apply.
//   - q: every block normalizes and rotates its tile's q heads (warp w rows
//     w, w + 4, ...) and splits them into terms as fa_stage_q splits the
//     values lb_qk_norm_rope_w stores; q in memory stays as the GEMV wrote
//     it.
//   - k and v: the block that runs the chunk of a token's position
//     normalizes and rotates the token's head kh of k and stores its codes
//     and v's into the cache (kv_put's conversions) and, where the chunk is
//     the block's first, into that chunk's stage in shared memory, which
//     then copies only the rows past the tile's last position (zeros). A
//     later chunk's copy reads the cache after the loop's block barrier. No
//     other block reads those rows: the tile holds the sequence's only
//     tokens of the step, at consecutive positions ending at pmax.
// A warp issues all its loads (q rows, k and v rows, weights, table rows)
// before any arithmetic, so that the step's rows cost one latency.
// RoPE: rot = Dh or 64, from the step's table (lb_rope_table, [T][rot /
// 2]). Query groups of 2 to 16 heads (a tile: 16 / G ≤ 8 tokens, at most
// 2 a warp).
struct fd_rope {
	const float *k, *v, *qw, *kw;
	const float2 *table;
	int qk_norm, rot;
	float eps, kscale, vscale; // the cache's scales (an FP8 cache)

	__device__ __forceinline__ int first_copy(int older, int c, int pmax) const {
		return max(older, min(FA_CHUNK, pmax - c * FA_CHUNK + 1));
	}

	template <int DH, int QT, bool F8>
	__device__ __forceinline__ void stage(u16 *qs, u16 *ks, u16 *vs, u8 *k8, u8 *v8, const float *q, u8 *kp, u8 *vp,
	                                      const i64 *rows0, const int *blocks, int bs, int t0, int n, int G, int kh,
	                                      int H, int KVH, int Z, int pmax) const {
		if (rot == 64)
			prepare<DH, QT, F8, 1>(qs, ks, vs, k8, v8, q, kp, vp, rows0, blocks, bs, t0, n, G, kh, H, KVH, Z, pmax);
		else
			prepare<DH, QT, F8, DH / 64>(qs, ks, vs, k8, v8, q, kp, vp, rows0, blocks, bs, t0, n, G, kh, H, KVH, Z,
			                             pmax);
	}

	template <int DH, int QT, bool F8, int HM>
	__device__ __forceinline__ void prepare(u16 *qs, u16 *ks, u16 *vs, u8 *k8, u8 *v8, const float *q, u8 *kp,
	                                        u8 *vp, const i64 *rows0, const int *blocks, int bs, int t0, int n, int G,
	                                        int kh, int H, int KVH, int Z, int pmax) const {
		constexpr int E = DH / 32, LD = DH + 8, QR = 4, KR = 2; // a warp's q rows and k tokens, at most
		const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, c = blockIdx.z;
		float qx[QR][E], kx[KR][E], vx[KR][E], qwv[E], kwv[E];
		float2 qcs[QR][HM], kcs[KR][HM];
#pragma unroll
		for (int m = 0; m < E; m++) {
			qwv[m] = kwv[m] = 0.0f;
			if (qk_norm) qwv[m] = qw[lane + 32 * m], kwv[m] = kw[lane + 32 * m];
		}
#pragma unroll
		for (int i = 0; i < QR; i++) {
			int r = w + 4 * i, tt = r / G;
			if (tt >= n) continue;
			const float *x = q + ((i64)(t0 + tt) * H + kh * G + r % G) * DH;
			const float2 *cs = table + (i64)(t0 + tt) * (rot / 2);
#pragma unroll
			for (int m = 0; m < E; m++) qx[i][m] = x[lane + 32 * m];
#pragma unroll
			for (int h = 0; h < HM; h++) qcs[i][h] = cs[lane + 32 * h];
		}
#pragma unroll
		for (int j = 0; j < KR; j++) {
			int tt = w + 4 * j;
			if (tt >= n) continue;
			i64 src = ((i64)(t0 + tt) * KVH + kh) * DH;
			const float2 *cs = table + (i64)(t0 + tt) * (rot / 2);
#pragma unroll
			for (int m = 0; m < E; m++) kx[j][m] = k[src + lane + 32 * m], vx[j][m] = v[src + lane + 32 * m];
#pragma unroll
			for (int h = 0; h < HM; h++) kcs[j][h] = cs[lane + 32 * h];
		}
		// q as fa_stage_q's terms: its pair (d, d + 1), d even, is this
		// lane's element and the next lane's.
#pragma unroll
		for (int i = 0; i < QR; i++) {
			int r = w + 4 * i, tt = r / G;
			float o[E];
			if (tt < n) {
				qkr_apply<E, HM>(o, qx[i], qwv, qcs[i], qk_norm, eps);
			} else {
#pragma unroll
				for (int m = 0; m < E; m++) o[m] = 0.0f;
			}
#pragma unroll
			for (int m = 0; m < E; m++) {
				float b = __shfl_down_sync(0xffffffffu, o[m], 1);
				if ((lane & 1) == 0) {
					u32 tm[3];
					mma_terms(o[m], b, &tm[0], &tm[1], &tm[2]);
#pragma unroll
					for (int t = 0; t < QT; t++) *(u32 *)(qs + (t * 16 + r) * LD + lane + 32 * m) = tm[t];
				}
			}
		}
		// The rows of this block's chunks (c, c + Z, ...: p / FA_CHUNK ≡ c).
#pragma unroll
		for (int j = 0; j < KR; j++) {
			int tt = w + 4 * j, p = pmax - (n - 1 - tt);
			if (tt >= n || (p / FA_CHUNK) % Z != c) continue;
			float o[E];
			qkr_apply<E, HM>(o, kx[j], kwv, kcs[j], qk_norm, eps);
			int jr = p - c * FA_CHUNK; // its row in chunk c's stage, if below FA_CHUNK
			bool here = jr < FA_CHUNK;
			i64 dst = here ? rows0[jr] : (kv_row(blocks, bs, p) * KVH + kh) * DH;
#pragma unroll
			for (int m = 0; m < E; m++) {
				int d = lane + 32 * m;
				if (F8) {
					u8 kc = f32_to_e4m3(o[m] / kscale), vc = f32_to_e4m3(vx[j][m] / vscale);
					kp[dst + d] = kc, vp[dst + d] = vc;
					if (here) k8[jr * DH + d] = kc, v8[jr * DH + d] = vc;
				} else {
					u16 kc = f32_to_bf16(o[m]), vc = f32_to_bf16(vx[j][m]);
					((u16 *)kp)[dst + d] = kc, ((u16 *)vp)[dst + d] = vc;
					if (here) ks[jr * LD + d] = kc, vs[jr * LD + d] = vc;
				}
			}
		}
	}
};

#define FDR_PARAMS                                                                                                    \
	FD_PARAMS, const float *k, const float *v, const float *qw, const float *kw, const float2 *table, int qk_norm,    \
	    int rot, float eps, float cache_kscale, float cache_vscale
#define FDR_PREP fd_rope{k, v, qw, kw, table, qk_norm, rot, eps, cache_kscale, cache_vscale}

extern "C" __global__ void __launch_bounds__(128) lb_flash_decode_rope_d64(FDR_PARAMS) { fd_run<64, 3, false>(FD_ARGS, FDR_PREP); }
extern "C" __global__ void __launch_bounds__(128) lb_flash_decode_rope_d64_q1(FDR_PARAMS) { fd_run<64, 1, false>(FD_ARGS, FDR_PREP); }
extern "C" __global__ void __launch_bounds__(128) lb_flash_decode_rope_d128(FDR_PARAMS) { fd_run<128, 3, false>(FD_ARGS, FDR_PREP); }
extern "C" __global__ void __launch_bounds__(128) lb_flash_decode_rope_d128_q1(FDR_PARAMS) { fd_run<128, 1, false>(FD_ARGS, FDR_PREP); }
extern "C" __global__ void __launch_bounds__(128) lb_flash_decode_rope_d64_fp8(FDR_PARAMS) { fd_run<64, 3, true>(FD_ARGS, FDR_PREP); }
extern "C" __global__ void __launch_bounds__(128) lb_flash_decode_rope_d64_q1_fp8(FDR_PARAMS) { fd_run<64, 1, true>(FD_ARGS, FDR_PREP); }
extern "C" __global__ void __launch_bounds__(128) lb_flash_decode_rope_d128_fp8(FDR_PARAMS) { fd_run<128, 3, true>(FD_ARGS, FDR_PREP); }
extern "C" __global__ void __launch_bounds__(128) lb_flash_decode_rope_d128_q1_fp8(FDR_PARAMS) { fd_run<128, 1, true>(FD_ARGS, FDR_PREP); }
