// topk.cu: for each row of logits [rows, V] float32, its k ≤ TOPK_MAX
// largest entries (largest first, ties by ascending id: runtime.TopK's
// order) with their log-probabilities x − (m + log Σ exp(x − m)) computed
// as lb_log_softmax computes them, and the number of the row's entries
// whose log-probability is at least the k-th's (runtime.TopLogits.Ties).
// A decode step copies these back instead of whole rows.
//
// Layout: ids [rows, k] int32, vals and lps [rows, k] float32, ties [rows]
// int32. One block of TOPK_THREADS threads a row, V ≥ k.
//
// Method: floats map to keys whose unsigned order is the floats' order; a
// radix select (four passes of 8-bit digits, warp-aggregated shared-memory
// histograms) finds the k-th largest key T and how many entries equal to T
// belong to the k; an ordered gather (contiguous id ranges a thread, prefix
// sums over the block) keeps every larger key and the equal ones of the
// lowest ids; a rank sort orders the k. Everything is a function of the row
// alone: the same bits whatever else the batch holds.
#define TOPK_THREADS 1024
#define TOPK_MAX 64
// Loads a thread issues before it uses them, in every pass over the row:
// one block reads the whole row eight or nine times, and a load at a time
// a thread left each pass waiting on L2 latency (0.37 ms a 151,936-entry
// row on the H200, as long as a Qwen3-0.6B decode step's graph). Each
// thread still takes its elements in the same order, so every sum keeps
// its bits.
#define TOPK_UNROLL 8

__device__ __forceinline__ u32 topk_key(float x) {
	u32 u = __float_as_uint(x);
	return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// topk_exclusive_scan returns the sum of v over the threads before this
// one (block of TOPK_THREADS, fixed order); sh holds 32 ints.
__device__ __forceinline__ int topk_exclusive_scan(int v, int *sh) {
	int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
	int inc = v;
#pragma unroll
	for (int o = 1; o < 32; o <<= 1) {
		int n = __shfl_up_sync(0xffffffffu, inc, o);
		if (lane >= o) inc += n;
	}
	__syncthreads();
	if (lane == 31) sh[w] = inc;
	__syncthreads();
	if (w == 0) {
		int t = sh[lane], ti = t;
#pragma unroll
		for (int o = 1; o < 32; o <<= 1) {
			int n = __shfl_up_sync(0xffffffffu, ti, o);
			if (lane >= o) ti += n;
		}
		sh[lane] = ti - t; // exclusive sums of the warps' totals
	}
	__syncthreads();
	return sh[w] + inc - v;
}

extern "C" __global__ void __launch_bounds__(TOPK_THREADS) lb_topk(const float *logits, int V, int k, int *ids,
                                                                     float *vals, float *lps, int *ties) {
	lb_pdl_wait();
	__shared__ float shf[32];
	__shared__ int shi[32];
	__shared__ int hist[256];
	__shared__ u32 s_prefix, s_mask;
	__shared__ int s_rem;
	__shared__ u32 sel_key[TOPK_MAX];
	__shared__ int sel_id[TOPK_MAX];
	__shared__ float s_last;
	const float *x = logits + (i64)blockIdx.x * V;
	int tid = threadIdx.x, lane = tid & 31;
	// The log-softmax's constants, as lb_log_softmax computes them.
	float m = -__int_as_float(0x7f800000);
	for (int base = tid; base < V; base += TOPK_UNROLL * blockDim.x) {
		float v[TOPK_UNROLL];
#pragma unroll
		for (int u = 0; u < TOPK_UNROLL; u++) v[u] = base + u * blockDim.x < V ? x[base + u * blockDim.x] : 0.0f;
#pragma unroll
		for (int u = 0; u < TOPK_UNROLL; u++)
			if (base + u * blockDim.x < V) m = nanmax(m, v[u]);
	}
	m = block_max(m, shf);
	float s = 0.0f;
	for (int base = tid; base < V; base += TOPK_UNROLL * blockDim.x) {
		float v[TOPK_UNROLL];
#pragma unroll
		for (int u = 0; u < TOPK_UNROLL; u++) v[u] = base + u * blockDim.x < V ? x[base + u * blockDim.x] : 0.0f;
#pragma unroll
		for (int u = 0; u < TOPK_UNROLL; u++)
			if (base + u * blockDim.x < V) s += expf(v[u] - m);
	}
	s = block_sum(s, shf);
	float lse = m + logf(s);

	// Radix select of the k-th largest key, most significant digit first.
	if (tid == 0) s_prefix = 0u, s_mask = 0u, s_rem = k;
	for (int b = 3; b >= 0; b--) {
		for (int i = tid; i < 256; i += blockDim.x) hist[i] = 0;
		__syncthreads();
		u32 prefix = s_prefix, mask = s_mask;
		for (int base = 0; base < V; base += TOPK_UNROLL * blockDim.x) {
			u32 keys[TOPK_UNROLL];
#pragma unroll
			for (int u = 0; u < TOPK_UNROLL; u++) {
				int i = base + u * blockDim.x + tid;
				keys[u] = i < V ? topk_key(x[i]) : 0u;
			}
#pragma unroll
			for (int u = 0; u < TOPK_UNROLL; u++) {
				int i = base + u * blockDim.x + tid;
				u32 key = keys[u];
				bool in = i < V && (key & mask) == prefix;
				u32 digit = (key >> (8 * b)) & 255u;
				unsigned act = __ballot_sync(0xffffffffu, in);
				if (in) {
					unsigned peers = __match_any_sync(act, digit);
					if (lane == __ffs(peers) - 1) atomicAdd(&hist[digit], __popc(peers));
				}
			}
		}
		__syncthreads();
		if (tid == 0) {
			int rem = s_rem, above = 0, d = 255;
			for (; d > 0; d--) {
				if (above + hist[d] >= rem) break;
				above += hist[d];
			}
			s_rem = rem - above;
			s_prefix = prefix | ((u32)d << (8 * b));
			s_mask = mask | (255u << (8 * b));
		}
		__syncthreads();
	}
	u32 T = s_prefix;
	int eqNeed = s_rem, gtCount = k - eqNeed;

	// Ordered gather: thread t owns ids [t·chunk, (t+1)·chunk).
	int chunk = (V + blockDim.x - 1) / blockDim.x, c0 = min(V, tid * chunk), c1 = min(V, c0 + chunk);
	int ngt = 0, neq = 0;
	for (int i0 = c0; i0 < c1; i0 += TOPK_UNROLL) {
		u32 keys[TOPK_UNROLL];
#pragma unroll
		for (int u = 0; u < TOPK_UNROLL; u++) keys[u] = i0 + u < c1 ? topk_key(x[i0 + u]) : 0u;
#pragma unroll
		for (int u = 0; u < TOPK_UNROLL; u++)
			if (i0 + u < c1) ngt += keys[u] > T, neq += keys[u] == T;
	}
	int gtOff = topk_exclusive_scan(ngt, shi);
	int eqOff = topk_exclusive_scan(neq, shi);
	for (int i0 = c0; i0 < c1; i0 += TOPK_UNROLL) {
		u32 keys[TOPK_UNROLL];
#pragma unroll
		for (int u = 0; u < TOPK_UNROLL; u++) keys[u] = i0 + u < c1 ? topk_key(x[i0 + u]) : 0u;
#pragma unroll
		for (int u = 0; u < TOPK_UNROLL; u++) {
			int i = i0 + u;
			u32 key = keys[u];
			if (i >= c1) break;
			if (key > T) {
				sel_key[gtOff] = key, sel_id[gtOff] = i;
				gtOff++;
			} else if (key == T) {
				if (eqOff < eqNeed) sel_key[gtCount + eqOff] = key, sel_id[gtCount + eqOff] = i;
				eqOff++;
			}
		}
	}
	__syncthreads();

	// Rank sort of the k: by key descending, then id ascending.
	if (tid < k) {
		u32 ki = sel_key[tid];
		int ii = sel_id[tid], r = 0;
		for (int j = 0; j < k; j++) r += sel_key[j] > ki || (sel_key[j] == ki && sel_id[j] < ii);
		i64 o = (i64)blockIdx.x * k + r;
		float v = x[ii];
		ids[o] = ii;
		vals[o] = v;
		lps[o] = v - lse;
		if (r == k - 1) s_last = v - lse;
	}
	__syncthreads();
	float last = s_last, n = 0.0f;
	for (int base = tid; base < V; base += TOPK_UNROLL * blockDim.x) {
		float v[TOPK_UNROLL];
#pragma unroll
		for (int u = 0; u < TOPK_UNROLL; u++) v[u] = base + u * blockDim.x < V ? x[base + u * blockDim.x] : 0.0f;
#pragma unroll
		for (int u = 0; u < TOPK_UNROLL; u++)
			if (base + u * blockDim.x < V) n += (v[u] - lse >= last) ? 1.0f : 0.0f;
	}
	n = block_sum(n, shf);
	if (tid == 0) ties[blockIdx.x] = (int)n;
}
