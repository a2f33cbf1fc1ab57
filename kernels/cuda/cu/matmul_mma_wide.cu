// matmul_mma_wide.cu: lb_mma_gemv_wide, the tensor-core GEMV of decode
// batches of 9 to 32 tokens (which ones: useWide in matmul.go): y[t,o] = Σ_i x[t,i]·w[o,i] on matmul_mma.cu's
// layouts (weights in mma tiles, x in mma terms) with its numerics and
// reduction order, so that its results are bit-identical to lb_mma_gemv's
// and lb_mma_gemm's for every row and token.
//
// Why: lb_mma_gemv gives each block one 16-row tile, so a token group's
// activation terms (768 bytes a chunk of 16 columns) are read from L2 once
// for every 512 bytes of weights: at 32 tokens, 6 bytes of L2 traffic a
// byte of weights, and the step ran at 0.8 of 4.2 TB/s. Here a block takes
// MMA_WIDE_ROWS = 128 rows (8 tiles), so each activation byte serves 8
// tiles: 3 KB of terms (4 groups) a chunk beside 4 KB of weights, 0.75 L2
// bytes a weight byte.
//
// Bytes a decode step of 32 tokens (Qwen3-8B, 36 layers, BF16 weights
// 16.4 GB): DRAM: the weights once (16.4 GB) plus, per matmul, the terms
// (3 KB a chunk: 0.8 MB for in = 4096) and y (0.5-3 MB); L2 → SM: the
// weights plus 0.75× as many bytes of terms (12.3 GB; 1.5 KB a chunk,
// 0.375×, at 9-16 tokens), against 6× (98 GB) in lb_mma_gemv. No global
// scratch: the split below adds its partial sums through distributed
// shared memory (DSMEM: the spans' sums, 4 bytes an output a span).
//
// Grid: too few blocks otherwise (4096 rows are 32 blocks of 128 for 132
// SMs), so the spans are split over the MMA_WIDE_SPLIT = 8 blocks of a
// thread-block cluster (sm_90): cluster rank k takes spans [k·S/8,
// (k+1)·S/8) of the S spans of its 128 rows (blockIdx.x, over up to three
// weights as lb_mma_gemv's tiles are); 4096 × 4096 is 256 blocks. Each
// block streams its chunks by cp.async, MMA_WIDE_STAGES = 3 stages of
// MMA_WIDE_KC = 2 chunks (8 tiles and the groups' terms: 14 KB a stage at
// 32 tokens), as mma_gemm does; its 4 warps form 2 × 2: warp (wr, wc)
// multiplies tiles 4wr..4wr+3 by token groups 2wc, 2wc+1 (groups past the
// batch are skipped), 24 mma a chunk, and writes each span's sums (a
// float32 fragment from 0: chunk by chunk, hi, mid, lo) to its shared
// memory. After a cluster barrier, block k adds, for a k-th of the row
// block's fragments, the spans' sums in span order from 0 (reading the
// other blocks' shared memory: mapa), and writes y. The order of every
// addition is thus the header's of matmul_mma.cu.
//
// Dynamic shared memory: 42 KB of stages + ceil(S/8) · groups · 4 KB (the
// spans' sums: 32 KB at in = 4096 and 32 tokens, 96 KB at in = 12288):
// three blocks an SM at in = 4096, one at in = 12288 and 32 tokens.
//
// Measured on the H200 (of the copy rate; lb_mma_gemv in parentheses),
// T = 32: 0.34 (0.22) on 4096 × 4096, 0.41 (0.23) on 12288 × 4096, 0.21
// (0.12) on 4096 × 12288. Not yet the weights' stream: ncu shows the
// clusters of 8 fit 15 to a wave at one block an SM (30 at two, 45 at
// three; 120 of the 132 SMs), so 32 row blocks take 2 waves where 30 fit,
// and the SMs issue about 0.36 instructions a cycle a scheduler (measured
// on an 8-warp layout of the same design). Smaller sums (fewer spans a block, cluster of 16)
// and a finer unit of work than a 128-row block are the next steps.
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900
#define MMA_WIDE_ROWS 128
#define MMA_WIDE_SPLIT 8
#define MMA_WIDE_KC 2
#define MMA_WIDE_STAGES 3
#define MMA_WIDE_THREADS 128

// cluster_rank is the block's rank in its cluster.
__device__ __forceinline__ u32 cluster_rank() {
	u32 r;
	asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
	return r;
}

// cluster_sync is a barrier of every thread of the cluster; shared-memory
// writes before it are visible to the cluster's reads after it.
__device__ __forceinline__ void cluster_sync() {
	asm volatile("barrier.cluster.arrive;\n\tbarrier.cluster.wait;" ::: "memory");
}

// cluster_map returns the address of what p points to in the shared memory
// of the cluster's block rank.
__device__ __forceinline__ const float4 *cluster_map(const float4 *p, u32 rank) {
	const float4 *d;
	asm("mapa.u64 %0, %1, %2;" : "=l"(d) : "l"(p), "r"(rank));
	return d;
}

// Shared-memory accesses by 32-bit shared addresses: in a cluster kernel a
// generic pointer into shared memory costs a window computation an access.
__device__ __forceinline__ void mma_wide_cp(u32 dst, const void *src) {
	asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(dst), "l"(src) : "memory");
}
__device__ __forceinline__ uint4 mma_wide_lds4(u32 a) {
	uint4 v;
	asm volatile("ld.shared.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(a) : "memory");
	return v;
}
__device__ __forceinline__ uint2 mma_wide_lds2(u32 a) {
	uint2 v;
	asm volatile("ld.shared.v2.u32 {%0,%1}, [%2];" : "=r"(v.x), "=r"(v.y) : "r"(a) : "memory");
	return v;
}

// mma_wide_chunk multiplies a chunk's 4 weight tiles by NL token groups'
// terms: each accumulator sees hi, mid and lo in that order.
template <int NL>
__device__ __forceinline__ void mma_wide_chunk(float (&acc)[4][2][4], const uint4 (&a)[4], const uint2 (&b)[2][3]) {
#pragma unroll
	for (int j = 0; j < 3; j++)
#pragma unroll
		for (int r = 0; r < 4; r++)
#pragma unroll
			for (int n = 0; n < NL; n++) mma_bf16(acc[r][n], a[r], b[n][j].x, b[n][j].y);
}

extern "C" __global__ void __cluster_dims__(1, MMA_WIDE_SPLIT, 1) __launch_bounds__(MMA_WIDE_THREADS, 1)
    lb_mma_gemv_wide(float *y0, const uint4 *w0, int out0, float *y1, const uint4 *w1, int out1, float *y2,
                     const uint4 *w2, int out2, const uint2 *xs, int T, int in) {
	extern __shared__ uint4 smem[];
	lb_pdl_wait();
	constexpr int KC = MMA_WIDE_KC, ST = MMA_WIDE_STAGES, RT = MMA_WIDE_ROWS / 16, G = MMA_GEMV_GROUPS;
	constexpr int A_U4 = KC * RT * 32; // a stage's weight tiles, in uint4
	constexpr int B_U4 = KC * G * 48;  // its activation terms (3 terms × 32 lanes × 8 bytes a group)
	constexpr int STAGE = A_U4 + B_U4;
	static_assert(MMA_WIDE_THREADS == 128 && RT == 8 && G * 48 <= 2 * MMA_WIDE_THREADS, "the copies below");
	int tid = threadIdx.x, lane = tid & 31, wi = tid >> 5, wr = wi & 1, wc = wi >> 1;
	int nc = (in + 15) / 16, spans = (nc + MMA_SPAN - 1) / MMA_SPAN, ng = min(G, (T + 7) / 8);
	int nl = min(2, max(0, ng - 2 * wc)); // live token groups of this warp
	int m = blockIdx.x, out;
	float *y;
	const uint4 *w;
	mma_pick(&m, MMA_WIDE_ROWS, &y, &w, &out, y0, w0, out0, y1, w1, out1, y2, w2, out2);
	u32 rank = cluster_rank();
	// This block's spans [s0, s1) and chunks [c0, c1); s0 < spans, so c0 < nc.
	int s0 = (int)rank * spans / MMA_WIDE_SPLIT, s1 = ((int)rank + 1) * spans / MMA_WIDE_SPLIT;
	int c0 = s0 * MMA_SPAN, c1 = min(s1 * MMA_SPAN, nc), nk = (c1 - c0 + KC - 1) / KC;
	// A chunk's copies: thread tid takes tiles wi and wi + 4 (lane; rows are
	// padded to MMA_ROW_PAD, so the row block's 8 tiles exist) and words
	// tid and tid + 128 of the ng·48 of the groups' terms.
	const uint4 *pa = w + ((i64)(m * RT + wi) * nc + c0) * 32 + lane;
	i64 pa4 = (i64)4 * nc * 32;
	int e0 = tid, e1 = tid + MMA_WIDE_THREADS;
	bool b0 = e0 < ng * 48, b1 = e1 < ng * 48;
	const uint4 *pb0 = (const uint4 *)xs + ((i64)(b0 ? e0 / 48 : 0) * nc + c0) * 48 + e0 % 48;
	const uint4 *pb1 = (const uint4 *)xs + ((i64)(b1 ? e1 / 48 : 0) * nc + c0) * 48 + e1 % 48;
	u32 sbase = smem_u32(smem);
	// part[span − s0][group][tile][lane]: a span's sums as fragments.
	float4 *part = (float4 *)(smem + ST * STAGE);
	auto load = [&](int kt) {
		u32 sa = sbase + (kt % ST) * STAGE * 16, sb = sa + A_U4 * 16;
#pragma unroll
		for (int cc = 0; cc < KC; cc++) {
			int k = kt * KC + cc;
			if (c0 + k < c1) {
				mma_wide_cp(sa + ((cc * RT + wi) * 32 + lane) * 16, pa + (i64)k * 32);
				mma_wide_cp(sa + ((cc * RT + wi + 4) * 32 + lane) * 16, pa + pa4 + (i64)k * 32);
				if (b0) mma_wide_cp(sb + (cc * G * 48 + e0) * 16, pb0 + (i64)k * 48);
				if (b1) mma_wide_cp(sb + (cc * G * 48 + e1) * 16, pb1 + (i64)k * 48);
			}
		}
	};
	// This lane's fragments in a stage: tiles 4wr + r, groups 2wc + n.
	u32 la = sbase + ((wr * 4) * 32 + lane) * 16, lb = sbase + A_U4 * 16 + ((wc * 2 * 3) * 32 + lane) * 8;
	float acc[4][2][4];
#pragma unroll
	for (int r = 0; r < 4; r++)
#pragma unroll
		for (int n = 0; n < 2; n++)
#pragma unroll
			for (int e = 0; e < 4; e++) acc[r][n][e] = 0.0f;
#pragma unroll
	for (int s = 0; s < ST - 1; s++) {
		if (s < nk) load(s);
		cp_async_commit();
	}
	for (int kt = 0; kt < nk; kt++) {
		cp_async_wait<ST - 2>(); // stage kt has landed
		__syncthreads();         // and every warp is done with the stage the next load overwrites
		if (kt + ST - 1 < nk) load(kt + ST - 1);
		cp_async_commit();
		u32 so = (kt % ST) * STAGE * 16;
#pragma unroll
		for (int cc = 0; cc < KC; cc++) {
			int c = c0 + kt * KC + cc;
			if (c >= c1) break;
			uint4 a[4];
			uint2 b[2][3];
#pragma unroll
			for (int r = 0; r < 4; r++) a[r] = mma_wide_lds4(la + so + (cc * RT + r) * 32 * 16);
#pragma unroll
			for (int n = 0; n < 2; n++)
#pragma unroll
				for (int j = 0; j < 3; j++) b[n][j] = mma_wide_lds2(lb + so + ((cc * G + n) * 3 + j) * 32 * 8);
			if (nl == 2)
				mma_wide_chunk<2>(acc, a, b);
			else if (nl == 1)
				mma_wide_chunk<1>(acc, a, b);
			if ((c + 1) % MMA_SPAN == 0 || c + 1 == nc) { // the end of span c / 16
				int sl = c / MMA_SPAN - s0;
#pragma unroll
				for (int r = 0; r < 4; r++)
#pragma unroll
					for (int n = 0; n < 2; n++) {
						if (n < nl)
							part[((sl * ng + wc * 2 + n) * RT + wr * 4 + r) * 32 + lane] =
							    make_float4(acc[r][n][0], acc[r][n][1], acc[r][n][2], acc[r][n][3]);
#pragma unroll
						for (int e = 0; e < 4; e++) acc[r][n][e] = 0.0f;
					}
			}
		}
	}
	cluster_sync(); // every block's spans are in its shared memory
	// Fragment f = (group·RT + tile)·32 + lane of span s is part[(s −
	// s0(j))·frags + f] in the block j that holds s: block rank adds the
	// rank-th eighth of the fragments, span by span from 0, 8 loads at once.
	int frags = RT * 32 * ng, per = frags / MMA_WIDE_SPLIT, f = (int)rank * per + tid;
	if (tid < per) {
		float4 sum = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
		for (int sb = 0; sb < spans; sb += 8) {
			float4 v[8];
#pragma unroll
			for (int u = 0; u < 8; u++) {
				int s = sb + u;
				if (s < spans) {
					int j = (MMA_WIDE_SPLIT * (s + 1) + spans - 1) / spans - 1; // j·spans/8 ≤ s < (j+1)·spans/8
					v[u] = cluster_map(part, (u32)j)[(s - j * spans / MMA_WIDE_SPLIT) * frags + f];
				}
			}
#pragma unroll
			for (int u = 0; u < 8; u++)
				if (sb + u < spans) {
					sum.x += v[u].x;
					sum.y += v[u].y;
					sum.z += v[u].z;
					sum.w += v[u].w;
				}
		}
		// Fragment element e: row g + 8·(e >> 1), token 2q + (e & 1).
		int l = f & 31, g = l >> 2, q = l & 3, tile = (f >> 5) % RT, grp = f / (RT * 32);
		int row = m * MMA_WIDE_ROWS + tile * 16 + g, t = 8 * grp + 2 * q;
		if (t < T) {
			if (row < out) y[(i64)t * out + row] = sum.x;
			if (row + 8 < out) y[(i64)t * out + row + 8] = sum.z;
		}
		if (t + 1 < T) {
			if (row < out) y[(i64)(t + 1) * out + row] = sum.y;
			if (row + 8 < out) y[(i64)(t + 1) * out + row + 8] = sum.w;
		}
	}
	cluster_sync(); // no block leaves while another reads its shared memory
}
#endif
