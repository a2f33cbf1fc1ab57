// matmul_mma_rows.cu: lb_mma_gemv_rows1, the GEMV of decode steps of many
// tokens (up to 32) on BF16 activations (mma terms of one term: hi alone),
// on sm_90: y[t,o] = Σ_i x[t,i]·w[o,i] on matmul_mma.cu's layouts with its
// reduction order, so that its results are bit-identical to every other
// BF16 kernel's on the same terms.
//
// Why: lb_mma_gemv_bulk1 gives each 16-row tile a block whose warps split
// the spans, so every block reads all the activations from L2: at 32
// tokens 2 bytes a weight byte. Nsight Compute on 12288 × 4096 at 32
// tokens (48.2 µs, 0.49 of the copy rate): DRAM 45%, L2 48%, 16 warps an
// SM with 65% of the scheduler's cycles without an eligible warp, waiting
// on the activations' loads from L2 in each span. Here a block's warps
// each take one row tile (W of them, consecutive) and march through the
// spans together: each span's activation terms (tokens × 16 chunks, 256
// bytes a group and chunk) and the W weight spans (8 KB each) stream into
// one shared-memory stage by the tensor memory accelerator, RING stages
// ahead, so a warp's mma read only shared memory, and the activations are
// read once a block: 1/W bytes of L2 a weight byte. The host sizes W so
// that the grid is about one block an SM (a block fills an SM's shared
// memory at W = 12).
//
// Order: warp wi's rows 16·(m·W + wi) ..; for each span, in order, its
// sum from 0 (chunk by chunk: mma_span's order) is added to the warp's
// running total, from 0: y = ((0 + s_0) + s_1) + ..., as mma_gemv_add.
//
// Stage layout (dynamic shared memory, RING of them): activations
// [groups][16 chunks][32 lanes] uint2, then W weight spans [16 tiles][32
// lanes] uint4. Warp 0 issues a stage's copies (its lanes split them) on
// the stage's mbarrier, after every warp has passed the block barrier that
// ends the stage's previous span.
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900
#define MMA_ROWS_WARPS 12
#define MMA_ROWS_RING_MAX 4

extern "C" __global__ void __launch_bounds__(32 * MMA_ROWS_WARPS, 1)
    lb_mma_gemv_rows1(float *y0, const uint4 *w0, int out0, float *y1, const uint4 *w1, int out1, float *y2,
                      const uint4 *w2, int out2, const uint2 *xs, int T, int in, int ring) {
	extern __shared__ uint4 smem[];
	__shared__ u64 bars[MMA_ROWS_RING_MAX];
	int lane = threadIdx.x & 31, wi = threadIdx.x >> 5, nw = blockDim.x >> 5, g = lane >> 2, q = lane & 3;
	int nc = (in + 15) / 16, spans = (nc + MMA_SPAN - 1) / MMA_SPAN, ng = (T + 7) / 8, m = blockIdx.x, out;
	float *y;
	const uint4 *w;
	mma_pick(&m, 16 * nw, &y, &w, &out, y0, w0, out0, y1, w1, out1, y2, w2, out2);
	// The block's row tiles that hold rows of this weight (the last block
	// of a weight may have fewer than nw).
	int tiles = min(nw, (out + 15) / 16 - m * nw);
	const int act_u2 = ng * MMA_SPAN * 32, stage_u4 = act_u2 / 2 + nw * MMA_SPAN * 32;
	auto act = [&](int st) { return (uint2 *)(smem + st * stage_u4); };
	auto wsl = [&](int st) { return smem + st * stage_u4 + act_u2 / 2; };
	// Span k's stage expects its bytes (lane 0 of warp 0, one arrival);
	// warp 0's lanes split its copies: the weight spans, the activations.
	auto expect = [&](int k) {
		int nch = min(MMA_SPAN, nc - k * MMA_SPAN);
		if (lane == 0) mbar_expect(&bars[k % ring], ng * nch * 256 + tiles * nch * 512);
		__syncwarp();
	};
	auto load_w = [&](int k) {
		int st = k % ring, c0 = k * MMA_SPAN, nch = min(MMA_SPAN, nc - c0);
		for (int j = lane; j < tiles; j += 32)
			bulk_load(wsl(st) + j * MMA_SPAN * 32, w + ((i64)(m * nw + j) * nc + c0) * 32, nch * 512, &bars[st]);
	};
	auto load_x = [&](int k) {
		int st = k % ring, c0 = k * MMA_SPAN, nch = min(MMA_SPAN, nc - c0);
		for (int p = lane; p < ng * nch; p += 32) {
			int n = p / nch, i = p % nch;
			bulk_load(act(st) + (n * MMA_SPAN + i) * 32, xs + (((i64)n * nc + c0 + i) * 3 << 5), 256, &bars[st]);
		}
	};
	// The first stages' weights stream in while the kernel before finishes
	// (programmatic dependent launch); their activations, which it writes,
	// only after.
	int first = min(ring, spans);
	if (wi == 0) {
		if (lane == 0)
			for (int r = 0; r < ring; r++) mbar_init(&bars[r], 1);
		__syncwarp();
		for (int k = 0; k < first; k++) {
			expect(k);
			load_w(k);
		}
	}
	lb_pdl_wait();
	if (wi == 0)
		for (int k = 0; k < first; k++) load_x(k);
	__syncthreads(); // the barriers' initialization, for every warp
	float total[MMA_GEMV_GROUPS][4];
#pragma unroll
	for (int n = 0; n < MMA_GEMV_GROUPS; n++) total[n][0] = total[n][1] = total[n][2] = total[n][3] = 0.0f;
	for (int k = 0; k < spans; k++) {
		int st = k % ring, nch = min(MMA_SPAN, nc - k * MMA_SPAN);
		mbar_wait(&bars[st], (k / ring) & 1);
		if (wi < tiles) {
			const uint4 *ws = wsl(st) + wi * MMA_SPAN * 32;
			const uint2 *as = act(st);
			float acc[MMA_GEMV_GROUPS][4];
#pragma unroll
			for (int n = 0; n < MMA_GEMV_GROUPS; n++) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.0f;
#pragma unroll
			for (int i = 0; i < MMA_SPAN; i++) {
				if (i < nch) {
					uint4 a = ws[i * 32 + lane];
#pragma unroll
					for (int n = 0; n < MMA_GEMV_GROUPS; n++)
						if (n < ng) {
							uint2 b = as[(n * MMA_SPAN + i) * 32 + lane];
							mma_bf16(acc[n], a, b.x, b.y);
						}
				}
			}
#pragma unroll
			for (int n = 0; n < MMA_GEMV_GROUPS; n++)
#pragma unroll
				for (int e = 0; e < 4; e++) total[n][e] += acc[n][e];
		}
		// Every warp is done with the stage: it takes the span ring on.
		__syncthreads();
		if (wi == 0 && k + ring < spans) {
			expect(k + ring);
			load_w(k + ring);
			load_x(k + ring);
		}
	}
	if (wi >= tiles) return;
	// Fragment element e: row g + 8·(e >> 1), token 2q + (e & 1) of group n.
#pragma unroll
	for (int n = 0; n < MMA_GEMV_GROUPS; n++)
#pragma unroll
		for (int e = 0; e < 4; e++) {
			int row = 16 * (m * nw + wi) + g + 8 * (e >> 1), t = 8 * n + 2 * q + (e & 1);
			if (n < ng && row < out && t < T) y[(i64)t * out + row] = total[n][e];
		}
}
#endif
