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
// (TestFlashDecodeRoPE). Both call qkr_vals.
//   - q: every block normalizes and rotates its tile's q heads (warp w rows
//     w, w + 4, ...) and splits them into terms as fa_stage_q splits the
//     values lb_qk_norm_rope_w stores; q in memory stays as the GEMV wrote
//     it.
//   - k and v: the block that runs the chunk of a token's position
//     normalizes and rotates the token's head kh of k and stores it and v
//     into the cache (kv_put) before its copies of the chunk's rows, after a
//     block barrier (cp.async.cg reads L2, where the stores went). No other
//     block reads that row: the tile holds the sequence's only tokens of the
//     step.
// RoPE: rot = Dh or 64, from the step's table (lb_rope_table, [T][rot / 2]).
struct fd_rope {
	const float *k, *v, *qw, *kw;
	const float2 *table;
	int qk_norm, rot, dtype;
	float eps, kscale, vscale; // the cache's scales (an FP8 cache)

	// vals is qkr_vals for token t's head x of E·32 elements.
	template <int E>
	__device__ __forceinline__ void vals(float o[E], const float *x, const float *w, int t) const {
		const float2 *cs = table + (i64)t * (rot / 2);
		if (rot == 64)
			qkr_vals<E, 1>(o, x, w, qk_norm, eps, cs);
		else
			qkr_vals<E, E / 2>(o, x, w, qk_norm, eps, cs);
	}

	template <int DH>
	__device__ __forceinline__ void rows(u8 *kp, u8 *vp, const int *blocks, int bs, const int *pos, int t0, int n,
	                                     int kh, int KVH, int Z) const {
		constexpr int E = DH / 32;
		int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
		for (int tt = w; tt < n; tt += nw) {
			int t = t0 + tt, p = pos[t];
			if ((p / FA_CHUNK) % Z != (int)blockIdx.z) continue; // another block's chunk
			i64 dst = (kv_row(blocks, bs, p) * KVH + kh) * DH, src = ((i64)t * KVH + kh) * DH;
			float o[E];
			vals<E>(o, k + src, kw, t);
#pragma unroll
			for (int m = 0; m < E; m++) {
				kv_put(kp, dst + lane + 32 * m, o[m], dtype, kscale);
				kv_put(vp, dst + lane + 32 * m, v[src + lane + 32 * m], dtype, vscale);
			}
		}
		__syncthreads();
	}

	template <int DH, int QT>
	__device__ __forceinline__ void stage(u16 *qs, const float *q, int t0, int n, int G, int kh, int H) const {
		constexpr int E = DH / 32, LD = DH + 8;
		int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
		for (int r = w; r < 16; r += nw) {
			int tt = r / G;
			float o[E];
			if (tt < n) {
				vals<E>(o, q + ((i64)(t0 + tt) * H + kh * G + r % G) * DH, qw, t0 + tt);
			} else {
#pragma unroll
				for (int m = 0; m < E; m++) o[m] = 0.0f;
			}
#pragma unroll
			for (int m = 0; m < E; m++) {
				// fa_stage_q's pair (d, d + 1), d even: this lane's element
				// and the next lane's.
				float b = __shfl_down_sync(0xffffffffu, o[m], 1);
				if ((lane & 1) == 0) {
					u32 tm[3];
					mma_terms(o[m], b, &tm[0], &tm[1], &tm[2]);
#pragma unroll
					for (int j = 0; j < QT; j++) *(u32 *)(qs + (j * 16 + r) * LD + lane + 32 * m) = tm[j];
				}
			}
		}
	}
};

#define FDR_PARAMS                                                                                                    \
	FD_PARAMS, const float *k, const float *v, const float *qw, const float *kw, const float2 *table, int qk_norm,    \
	    int rot, int dtype, float eps, float cache_kscale, float cache_vscale
#define FDR_PREP fd_rope{k, v, qw, kw, table, qk_norm, rot, dtype, eps, cache_kscale, cache_vscale}

extern "C" __global__ void __launch_bounds__(128) lb_flash_decode_rope_d64(FDR_PARAMS) { fd_run<64, 3, false>(FD_ARGS, FDR_PREP); }
extern "C" __global__ void __launch_bounds__(128) lb_flash_decode_rope_d64_q1(FDR_PARAMS) { fd_run<64, 1, false>(FD_ARGS, FDR_PREP); }
extern "C" __global__ void __launch_bounds__(128) lb_flash_decode_rope_d128(FDR_PARAMS) { fd_run<128, 3, false>(FD_ARGS, FDR_PREP); }
extern "C" __global__ void __launch_bounds__(128) lb_flash_decode_rope_d128_q1(FDR_PARAMS) { fd_run<128, 1, false>(FD_ARGS, FDR_PREP); }
extern "C" __global__ void __launch_bounds__(128) lb_flash_decode_rope_d64_fp8(FDR_PARAMS) { fd_run<64, 3, true>(FD_ARGS, FDR_PREP); }
extern "C" __global__ void __launch_bounds__(128) lb_flash_decode_rope_d64_q1_fp8(FDR_PARAMS) { fd_run<64, 1, true>(FD_ARGS, FDR_PREP); }
extern "C" __global__ void __launch_bounds__(128) lb_flash_decode_rope_d128_fp8(FDR_PARAMS) { fd_run<128, 3, true>(FD_ARGS, FDR_PREP); }
extern "C" __global__ void __launch_bounds__(128) lb_flash_decode_rope_d128_q1_fp8(FDR_PARAMS) { fd_run<128, 1, true>(FD_ARGS, FDR_PREP); }
