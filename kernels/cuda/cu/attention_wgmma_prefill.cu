// attention_wgmma_prefill.cu: attention_mma_prefill.cu's kernel (the BF16
// prefill's whole mode: q and P as one BF16 term over a BF16 cache) for
// head dim 128 on Hopper's warpgroup tensor-core instructions (wgmma,
// sm_90a). The same arithmetic, in the same order, per row: s = q·k over
// the head dims in steps of 16 from 0, o_c = P·v over the chunk's positions
// in steps of 16 from 0, both accumulated in float32 by the tensor cores;
// fa_softmax's max, mask, exponent and l_c; the P rounding; fp_fold's
// fold. TestFlashVariants holds it to the one-warp kernels' bits.
//
// Why: attention_mma_prefill.cu issues a chunk as 2 × 64 mma.sync and the
// ldmatrix feeding them, a warp at a time, and was bound by instruction
// issue at 227 TFLOP/s on the H200 (SDPA: about 600). Here a warpgroup (4
// warps, 64 rows) multiplies a chunk by 8 wgmma for s and 4 for o_c, with
// q and P from registers and k and v read by the tensor cores from shared
// memory. It gives the mma.sync kernels' bits (so wgmma's float32
// accumulation of a k16 step is mma.sync's) but not yet their speed: 150.2
// against 226.3 TFLOP/s at 8,192 tokens, 69.6 against 86.6 at 1,024 (one
// block of two warpgroups: 172.7 and 74.9). Each warpgroup waits on its
// wgmma before its softmax and its softmax before the next wgmma, and the
// unswizzled layout is the tensor cores' slowest; FlashAttention-3's
// answers are 128-byte swizzling, the next chunk's s issued before this
// chunk's softmax, and producer warps. So flashPrefillWG is off.
//
// Layout: attention_mma.cu's arguments (FA_PARAMS, whole mode). Two blocks
// of one warpgroup (4 warps) a work-list entry, so that two independent
// blocks share an SM and one's softmax overlaps the other's wgmma (in one
// block of two warpgroups, its barriers kept them in step: 172.7 TFLOP/s
// at 8,192 on the H200 against attention_mma_prefill.cu's 226.4): block
// 2e + h takes entry e's half h, its warp w the R = 16 / G tokens from
// t0 + (4h + w)·R (one m-tile, as attention_mma_prefill.cu's warp (4h +
// w)/2, m-tile w%2: the same work list).
// Shared memory, dynamic, in u16: two stages of k and v, each [64 positions]
// [128 dims] in 8 × 8 "core matrices" of 128 contiguous bytes (position
// octet p/8, dim octet d/8 at ((p/8)·16 + d/8)·64 elements; row p%8 of 16
// bytes inside), the layout wgmma reads without swizzling: along the dims
// core matrices are 128 bytes apart, along the positions 2,048; then each
// warp's q, [4][16][Dh + 8] (ldmatrix's layout, as fa_stage_q writes it).
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define FW_DH 128
#define FW_KV (FA_CHUNK * FW_DH) // one k or v chunk, in u16

// wg_desc is a wgmma shared-memory matrix descriptor without swizzling:
// start address, leading-dimension byte offset (between core matrices along
// K) and stride byte offset (along M or N), each in units of 16 bytes.
__device__ __forceinline__ u64 wg_desc(u32 addr, u32 lbo, u32 sbo) {
	return (u64)((addr & 0x3FFFF) >> 4) | ((u64)((lbo >> 4) & 0x3FFF) << 16) | ((u64)((sbo >> 4) & 0x3FFF) << 32);
}

__device__ __forceinline__ void wg_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wg_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wg_wait0() { asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory"); }

// wg_s accumulates d (64 × 64 float32 over the warpgroup: 32 a thread,
// d[4j + e] is mma.sync's fragment element e of columns 8j..8j+7) += A·B,
// A a 64 × 16 BF16 fragment in registers (mma.sync's A fragment of this
// warp's 16 rows), B 16 × 64 from shared memory, K-major (desc).
__device__ __forceinline__ void wg_s(float (&d)[32], const u32 (&a)[4], u64 desc) {
	asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
	             "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
	             "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
	             "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
	             "{%32, %33, %34, %35}, %36, p, 1, 1, 0;\n}\n"
	             : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
	               "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]),
	               "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]),
	               "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]),
	               "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
	             : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "r"(1));
}

// wg_o accumulates d (64 × 128 float32: 64 a thread, laid out as wg_s's)
// += A·B, A 64 × 16 in registers, B 16 × 128 from shared memory, MN-major
// (transposed: desc's rows are B's columns).
__device__ __forceinline__ void wg_o(float (&d)[64], const u32 (&a)[4], u64 desc) {
	asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
	             "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
	             "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
	             "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
	             "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
	             "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
	             "{%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}\n"
	             : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
	               "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]),
	               "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]),
	               "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]),
	               "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]),
	               "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]),
	               "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]),
	               "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]),
	               "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
	             : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "r"(1));
}

// fw_copy starts copying the chunk's cache rows rows[j] (−1: zeros) into
// the core-matrix layout by cp.async (uncommitted).
__device__ __forceinline__ void fw_copy(u16 *ks, u16 *vs, const u8 *kp, const u8 *vp, const i64 *rows) {
	for (int i = threadIdx.x; i < FA_CHUNK * FW_DH / 8; i += blockDim.x) {
		int j = i >> 4, u = i & 15, at = (((j >> 3) << 4) + u) * 64 + (j & 7) * 8;
		if (rows[j] >= 0) {
			i64 off = (rows[j] + u * 8) * 2;
			cp_async16(ks + at, kp + off);
			cp_async16(vs + at, vp + off);
		} else {
			uint4 z;
			z.x = z.y = z.z = z.w = 0u;
			*(uint4 *)(ks + at) = z;
			*(uint4 *)(vs + at) = z;
		}
	}
}

// fw_fold is fp_fold for one m-tile with o_c already summed (oc, wg_o's
// layout): M and L by the chunk's (mx, l), O = fma(o_c, b, O·a), O·a
// skipped where no row of the warp moved its max; CHECK skips the rows
// with no position in the chunk.
template <bool CHECK>
__device__ __forceinline__ void fw_fold(float (&oacc)[64], float M[2], float L[2], const float mx[2],
                                        const float l[2], const float (&oc)[64], const int prow[2], int c0) {
	float fa[2], fb[2];
	bool same = true;
#pragma unroll
	for (int e2 = 0; e2 < 2; e2++) {
		if (CHECK && prow[e2] < c0) continue;
		fa_weights(&M[e2], mx[e2], &fa[e2], &fb[e2]);
		L[e2] = fa_mix(L[e2], fa[e2], l[e2], fb[e2]);
		same = same && fa[e2] == 1.0f;
	}
	if (!__all_sync(0xffffffffu, same))
#pragma unroll
		for (int i = 0; i < 64; i++)
			if (!CHECK || prow[(i >> 1) & 1] >= c0) oacc[i] = __fmul_rn(oacc[i], fa[(i >> 1) & 1]);
#pragma unroll
	for (int i = 0; i < 64; i++) {
		int e2 = (i >> 1) & 1;
		if (CHECK && prow[e2] < c0) continue;
		oacc[i] = __fmaf_rn(oc[i], fb[e2], oacc[i]);
	}
}

// lb_flash_prefill_wg_d128_q1: 4 warps (a warpgroup) a block, two blocks a
// work-list entry. swap exchanges the two byte offsets of k's (bit 0) and
// v's (bit 1) descriptors: a test hook.
extern "C" __global__ void __launch_bounds__(128, 2)
    lb_flash_prefill_wg_d128_q1(float *out, const float *q, const u8 *kp, const u8 *vp, const int *tables, int stride,
                                const int *seq, const int *pos, const int *work, int bs, int H, int KVH, float scale,
                                int swap) {
	lb_pdl_wait();
	constexpr int DH = FW_DH, LD = DH + 8, KV = FW_KV;
	extern __shared__ uint4 fw_smem[];
	__shared__ i64 rows[2][FA_CHUNK];
	int tid = threadIdx.x, lane = tid & 31, g = lane >> 2, qd = lane & 3;
	int kh = blockIdx.y, G = H / KVH, R = 16 / G, half = blockIdx.x & 1;
	int wi = gridDim.x / 2 - 1 - (blockIdx.x >> 1); // the longest contexts first
	int t0 = work[2 * wi], n = work[2 * wi + 1];
	int w = 4 * half + (tid >> 5); // the warp's m-tile in the entry
	if (4 * half * R >= n) return;  // the entry's second half is empty
	u16 *kv0 = (u16 *)fw_smem, *qs = kv0 + 4 * KV + (tid >> 5) * 16 * LD;
	const int *blocks = tables ? tables + (i64)seq[t0] * stride : 0;
	// The block's last position: its chunks end there.
	int pmax = pos[t0 + min(n, 4 * (half + 1) * R) - 1];
	fa_rows(rows[0], blocks, bs, KVH, kh, DH, 0, pmax);
	__syncthreads();
	fw_copy(kv0, kv0 + KV, kp, vp, rows[0]);
	cp_async_commit();
	fa_rows(rows[1], blocks, bs, KVH, kh, DH, FA_CHUNK, pmax);
	// Rows g and g + 8 of the warp's m-tile: position (−1: past the tokens).
	int prow[2], hrow[2];
	int wfirst = w * R, wn = min(R, n - wfirst);
#pragma unroll
	for (int e = 0; e < 2; e++) {
		int r = g + 8 * e, tt = r / G;
		prow[e] = (r < R * G && tt < wn) ? pos[t0 + wfirst + tt] : -1;
		hrow[e] = kh * G + r % G;
	}
	int wpmin = wn > 0 ? pos[t0 + wfirst] : -1;
	fa_stage_q<DH, 1>(qs, q, t0 + wfirst, wn, G, kh, H, lane, 32);
	__syncwarp();
	u32 qa[DH / 16][4];
	u32 qa0 = smem_u32(qs) + 2 * ((lane & 15) * LD + (lane >> 4) * 8);
#pragma unroll
	for (int dc = 0; dc < DH / 16; dc++) ldsm_x4_at(qa[dc], qa0 + 2 * dc * 16);
	const float ninf = -__int_as_float(0x7f800000), sl = fa_log2e_scale(scale);
	u32 klbo = 128, ksbo = 2048, vlbo = 2048, vsbo = 128;
	if (swap & 1) klbo = 2048, ksbo = 128;
	if (swap & 2) vlbo = 128, vsbo = 2048;
	float M[2] = {ninf, ninf}, L[2] = {0.0f, 0.0f}, oacc[64];
#pragma unroll
	for (int i = 0; i < 64; i++) oacc[i] = 0.0f;
	for (int c = 0; c * FA_CHUNK <= pmax; c++) {
		int b = c & 1;
		__syncthreads(); // every warp is done with chunk c − 1's buffers; rows[b ^ 1] is written
		if ((c + 1) * FA_CHUNK <= pmax) fw_copy(kv0 + 2 * (b ^ 1) * KV, kv0 + (2 * (b ^ 1) + 1) * KV, kp, vp, rows[b ^ 1]);
		cp_async_commit();
		int pn = (c + 2) * FA_CHUNK + tid, tb = tid < FA_CHUNK ? fa_entry(blocks, bs, pn, pmax) : 0;
		cp_async_wait1();
		// The tensor cores read shared memory through the async proxy: make
		// this thread's copies and zeros visible to it before the barrier.
		asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
		__syncthreads();
		{
			u32 ka = smem_u32(kv0 + 2 * b * KV), va = smem_u32(kv0 + (2 * b + 1) * KV);
			float s[32];
#pragma unroll
			for (int i = 0; i < 32; i++) s[i] = 0.0f;
			wg_fence();
#pragma unroll
			for (int dc = 0; dc < DH / 16; dc++) wg_s(s, qa[dc], wg_desc(ka + 256 * dc, klbo, ksbo));
			wg_commit();
			wg_wait0();
			bool masked = c * FA_CHUNK + FA_CHUNK - 1 > wpmin; // some row of the warp ends inside the chunk
			float(&sj)[8][4] = *reinterpret_cast<float(*)[8][4]>(s);
			float mx[2], l[2];
			fa_softmax(sj, prow, c * FA_CHUNK, qd, scale, sl, masked, mx, l);
			u32 pa[4][4];
#pragma unroll
			for (int kc = 0; kc < 4; kc++) {
				u32 t1, t2;
				mma_terms(sj[2 * kc][0], sj[2 * kc][1], &pa[kc][0], &t1, &t2);
				mma_terms(sj[2 * kc][2], sj[2 * kc][3], &pa[kc][1], &t1, &t2);
				mma_terms(sj[2 * kc + 1][0], sj[2 * kc + 1][1], &pa[kc][2], &t1, &t2);
				mma_terms(sj[2 * kc + 1][2], sj[2 * kc + 1][3], &pa[kc][3], &t1, &t2);
			}
			float oc[64];
#pragma unroll
			for (int i = 0; i < 64; i++) oc[i] = 0.0f;
			wg_fence();
#pragma unroll
			for (int kc = 0; kc < 4; kc++) wg_o(oc, pa[kc], wg_desc(va + 4096 * kc, vlbo, vsbo));
			wg_commit();
			wg_wait0();
			if (masked)
				fw_fold<true>(oacc, M, L, mx, l, oc, prow, c * FA_CHUNK);
			else
				fw_fold<false>(oacc, M, L, mx, l, oc, prow, c * FA_CHUNK);
		}
		if (tid < FA_CHUNK) rows[b][tid] = fa_row_of(tb, blocks, bs, pn, pmax, KVH, kh, DH);
	}
#pragma unroll
	for (int e2 = 0; e2 < 2; e2++) {
		if (prow[e2] < 0) continue;
		float *ov = out + ((i64)(t0 + wfirst + (g + 8 * e2) / G) * H + hrow[e2]) * DH;
#pragma unroll
		for (int nn = 0; nn < DH / 8; nn++) {
			ov[8 * nn + 2 * qd] = __fdiv_rn(oacc[4 * nn + 2 * e2], L[e2]);
			ov[8 * nn + 2 * qd + 1] = __fdiv_rn(oacc[4 * nn + 2 * e2 + 1], L[e2]);
		}
	}
}
#endif
