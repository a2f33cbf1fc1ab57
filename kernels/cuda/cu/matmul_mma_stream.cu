// matmul_mma_stream.cu: lb_mma_gemv_stream and lb_mma_gemv_stream1, the
// tensor-core GEMV of decode steps of a few tokens on sm_90 (which ones:
// gemvStream in matmul.go): y[t,o] = Σ_i x[t,i]·w[o,i] on matmul_mma.cu's
// layouts and reduction order (each span's sums from 0, chunk by chunk;
// the spans added in order from 0), so its results are bit-identical to
// every other BF16 kernel's. _stream1 reads BF16 terms (hi alone).
//
// Why: lb_mma_gemv_bulk gives each block one row tile and each warp one
// span in flight. Every warp of a wave starts together, waits for its span
// together and multiplies together, so an SM's copies drain while its
// warps compute and the memory system idles at each block's start and end:
// on the H200 a 4096-row GEMV reached 0.70 of the copy rate and the
// 4096 × 12288 down projection (six spans a warp, in lockstep) 0.69, where
// the 151,936-row head (36 waves, blocks out of step) reached 0.99. Here
// the grid is persistent (at most as many blocks as fit the SMs), each
// block walks row tiles blockIdx.x, blockIdx.x + gridDim.x, ..., and each
// warp keeps a ring of `ring` spans in flight across its tiles: while it
// multiplies one span the next ring − 1 are on their way, and the copies
// of the next tile start before the block's barrier at the end of this one.
//
// Order: warp wi takes a tile's spans wi, wi + nw, ...; its k-th span
// overall (tile k / mine, the (k mod mine)-th of its spans there) lands in
// slot k mod ring, whose mbarrier completes phase k / ring. The spans' sums
// go to shared memory (two buffers, by tile parity, so one barrier a tile
// suffices) and, after the barrier, each output adds its spans in order
// (mma_gemv_add), as lb_mma_gemv_bulk does.
//
// Dynamic shared memory: nw · ring · 8 KB of slots, then two buffers of
// spans · groups · 512 bytes; the mbarriers are static. One token group
// block carries all groups (gridDim.y is 1).
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900
#define MMA_STREAM_RING_MAX 4

template <int TERMS>
__device__ __forceinline__ void mma_gemv_stream(uint4 *smem, u64 (*bars)[MMA_STREAM_RING_MAX], float *y0,
                                                const uint4 *w0, int out0, float *y1, const uint4 *w1, int out1,
                                                float *y2, const uint4 *w2, int out2, const uint2 *xs, int T, int in,
                                                int ring) {
	int lane = threadIdx.x & 31, wi = threadIdx.x >> 5, nw = blockDim.x >> 5;
	int nc = (in + 15) / 16, spans = (nc + MMA_SPAN - 1) / MMA_SPAN, ng = (T + 7) / 8;
	int tiles = (out0 + 15) / 16 + (out1 + 15) / 16 + (out2 + 15) / 16;
	int blockTiles = blockIdx.x < tiles ? (tiles - 1 - blockIdx.x) / gridDim.x + 1 : 0;
	int mine = wi < spans ? (spans - 1 - wi) / nw + 1 : 0; // this warp's spans of a tile
	int items = blockTiles * mine;
	uint4 *slots = smem + wi * ring * MMA_SPAN * 32;
	u64 *bar = bars[wi];
	float *parts = (float *)(smem + nw * ring * MMA_SPAN * 32);
	const int partFloats = spans * ng * 128;
	// issue starts the copy of this warp's k-th span into its slot.
	auto issue = [&](int k) {
		int m = blockIdx.x + (k / mine) * gridDim.x, out;
		float *y;
		const uint4 *w;
		mma_pick(&m, 16, &y, &w, &out, y0, w0, out0, y1, w1, out1, y2, w2, out2);
		int c0 = (wi + (k % mine) * nw) * MMA_SPAN, nch = min(MMA_SPAN, nc - c0);
		bulk_copy(slots + (k % ring) * MMA_SPAN * 32, w + ((i64)m * nc + c0) * 32, nch * 512, &bar[k % ring]);
	};
	if (lane == 0) {
		for (int r = 0; r < ring; r++) mbar_init(&bar[r], 1);
		// The weights never change: they stream in while the kernel before
		// finishes (programmatic dependent launch); the activations only
		// after it has.
		for (int k = 0; k < min(ring, items); k++) issue(k);
	}
	__syncwarp();
	lb_pdl_wait();
	for (int j = 0; j < blockTiles; j++) {
		float *part = parts + (j & 1) * partFloats;
		for (int u = 0; u < mine; u++) {
			int k = j * mine + u;
			mma_gemv_span<false, TERMS>(part, slots + (k % ring) * MMA_SPAN * 32, xs, nc, wi + u * nw, 0, ng, T,
			                            lane, [&] { mbar_wait(&bar[k % ring], (k / ring) & 1); });
			// Every lane has its fragments of the slot in registers (the
			// mma consumed them): the slot takes the span ring spans on.
			__syncwarp();
			if (lane == 0 && k + ring < items) issue(k + ring);
		}
		// The tile's span sums are all in part. The other buffer's last
		// readers (tile j − 1's sums) passed this barrier before any warp
		// writes tile j + 1's there.
		__syncthreads();
		int m = blockIdx.x + j * gridDim.x, out;
		float *y;
		const uint4 *w;
		mma_pick(&m, 16, &y, &w, &out, y0, w0, out0, y1, w1, out1, y2, w2, out2);
		mma_gemv_add(y, part, m, out, 0, ng, spans, T);
	}
}

// lb_mma_gemv_stream (three-term activations) and lb_mma_gemv_stream1 (BF16
// terms, hi alone): blocks of up to MMA_BULK_WARPS warps, at most 128
// registers a thread, so that two blocks share an SM when their shared
// memory does.
extern "C" __global__ void __launch_bounds__(32 * MMA_BULK_WARPS, 2)
    lb_mma_gemv_stream(float *y0, const uint4 *w0, int out0, float *y1, const uint4 *w1, int out1, float *y2,
                       const uint4 *w2, int out2, const uint2 *xs, int T, int in, int ring) {
	extern __shared__ uint4 smem[];
	__shared__ u64 bars[MMA_BULK_WARPS][MMA_STREAM_RING_MAX];
	mma_gemv_stream<3>(smem, bars, y0, w0, out0, y1, w1, out1, y2, w2, out2, xs, T, in, ring);
}

extern "C" __global__ void __launch_bounds__(32 * MMA_BULK_WARPS, 2)
    lb_mma_gemv_stream1(float *y0, const uint4 *w0, int out0, float *y1, const uint4 *w1, int out1, float *y2,
                        const uint4 *w2, int out2, const uint2 *xs, int T, int in, int ring) {
	extern __shared__ uint4 smem[];
	__shared__ u64 bars[MMA_BULK_WARPS][MMA_STREAM_RING_MAX];
	mma_gemv_stream<1>(smem, bars, y0, w0, out0, y1, w1, out1, y2, w2, out2, xs, T, in, ring);
}
#endif
