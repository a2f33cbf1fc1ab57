// topk.cu: for each row of logits [rows, V] float32, its k ≤ TOPK_MAX
// largest entries (largest first, ties by ascending id: runtime.TopK's
// order) with their log-probabilities x − lse, and the number of the
// row's entries whose log-probability is at least the k-th's
// (runtime.TopLogits.Ties). A decode step copies these back instead of
// whole rows.
//
// Layout: ids [rows, k] int32, vals and lps [rows, k] float32, ties [rows]
// int32; the work space holds each chunk's max and sum [rows, C] float32
// each, its candidates' keys and ids [rows, C, k], and each row's lse and
// k-th log-probability [rows, 2] float32. C = ⌈V / TOPK_CHUNK⌉, V ≥ k.
//
// Three launches, so that a row is spread over many SMs (one block reading
// a 151,936-entry row nine times took 0.23 ms, a fifth of a Qwen3-0.6B
// decode step):
//   lb_topk_chunks (grid C × rows): a chunk of TOPK_CHUNK entries a block,
//     its max m_c and Σ exp(x − m_c), and its own k best (fewer in a short
//     last chunk), the candidates;
//   lb_topk_merge (grid rows): lse = M + log Σ_c s_c·exp(m_c − M) with
//     M = max m_c, and the k best of the row's candidates: every entry of
//     the row's k best is among its chunk's k best under the same order;
//   lb_topk_ties (grid C × rows): the count of x − lse ≥ the k-th's,
//     summed per row by integer atomics (exact in any order).
// Selection: floats map to keys whose unsigned order is the floats' order;
// a radix select (four passes of 8-bit digits, warp-aggregated
// shared-memory histograms) finds the k-th largest key T and how many
// entries equal to T belong to the k; an ordered gather (contiguous ranges
// of the list a thread, prefix sums over the block) keeps every larger key
// and the equal ones first in the list; a rank sort orders the k. A
// chunk's list is in id order; the merge's is chunk after chunk, each
// chunk's entries above its own threshold in id order, then those equal
// to it in id order. The merge's T is at least every chunk's threshold,
// so the entries equal to T sit, chunk by chunk, in id order: taking the
// first ones takes the lowest ids. Every sum has a fixed order and is a
// function of the row alone: the same bits whatever else the batch holds.
#define TOPK_MAX 64
#define TOPK_CHUNK 2048
#define TOPK_CHUNK_THREADS 256
#define TOPK_MERGE_THREADS 1024
// Loads a thread issues before it uses them in each pass over a list.
#define TOPK_UNROLL 8

__device__ __forceinline__ u32 topk_key(float x) {
	u32 u = __float_as_uint(x);
	return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

__device__ __forceinline__ float topk_value(u32 key) {
	return __uint_as_float((key & 0x80000000u) ? (key & 0x7fffffffu) : ~key);
}

// topk_exclusive_scan returns the sum of v over the threads before this
// one (any block of whole warps, fixed order); sh holds 32 ints.
__device__ __forceinline__ int topk_exclusive_scan(int v, int *sh) {
	int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
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
		int t = lane < nw ? sh[lane] : 0, ti = t;
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

// A list to select from: n keys and their ids (ids null: base + index).
struct TopkList {
	const u32 *keys;
	const int *ids;
	int base, n;
	__device__ __forceinline__ int id(int i) const { return ids ? ids[i] : base + i; }
};

// The shared memory of a selection.
struct TopkShared {
	int scan[32];
	int hist[256];
	u32 prefix, mask;
	int rem;
	u32 key[TOPK_MAX];
	int id[TOPK_MAX];
};

// topk_select leaves the k ≤ list.n best entries of the list in s.key and
// s.id: those above the k-th's key first, then those equal to it, each
// group in list order. Every thread of the block calls it.
__device__ void topk_select(const TopkList &list, int k, TopkShared &s) {
	int tid = threadIdx.x, lane = tid & 31, n = list.n;
	if (tid == 0) s.prefix = 0u, s.mask = 0u, s.rem = k;
	// Radix select of the k-th largest key, most significant digit first.
	for (int b = 3; b >= 0; b--) {
		for (int i = tid; i < 256; i += blockDim.x) s.hist[i] = 0;
		__syncthreads();
		u32 prefix = s.prefix, mask = s.mask;
		for (int base = 0; base < n; base += TOPK_UNROLL * blockDim.x) {
			u32 keys[TOPK_UNROLL];
#pragma unroll
			for (int u = 0; u < TOPK_UNROLL; u++) {
				int i = base + u * blockDim.x + tid;
				keys[u] = i < n ? list.keys[i] : 0u;
			}
#pragma unroll
			for (int u = 0; u < TOPK_UNROLL; u++) {
				int i = base + u * blockDim.x + tid;
				u32 key = keys[u];
				bool in = i < n && (key & mask) == prefix;
				u32 digit = (key >> (8 * b)) & 255u;
				unsigned act = __ballot_sync(0xffffffffu, in);
				if (in) {
					unsigned peers = __match_any_sync(act, digit);
					if (lane == __ffs(peers) - 1) atomicAdd(&s.hist[digit], __popc(peers));
				}
			}
		}
		__syncthreads();
		// The digit d: the largest with (count above d) + hist[d] ≥ rem (0
		// if none), by warp 0, lane l holding digits 8l .. 8l + 7: the lane
		// is the highest whose digits and those above reach rem, then a
		// walk down its eight. (One thread walking all 256 took 15 µs a
		// launch of the four passes.)
		if (tid < 32) {
			int rem = s.rem, h[8], tot = 0;
#pragma unroll
			for (int j = 0; j < 8; j++) h[j] = s.hist[8 * lane + j], tot += h[j];
			int suf = tot; // this lane's digits and those above
#pragma unroll
			for (int o = 1; o < 32; o <<= 1) {
				int v = __shfl_down_sync(0xffffffffu, suf, o);
				if (lane + o < 32) suf += v;
			}
			unsigned reach = __ballot_sync(0xffffffffu, suf >= rem);
			if (lane == (reach ? 31 - __clz(reach) : 0)) {
				int above = suf - tot, j = 7;
				for (; j > 0; j--) {
					if (above + h[j] >= rem) break;
					above += h[j];
				}
				s.rem = rem - above;
				s.prefix = prefix | ((u32)(8 * lane + j) << (8 * b));
				s.mask = mask | (255u << (8 * b));
			}
		}
		__syncthreads();
	}
	u32 T = s.prefix;
	int eqNeed = s.rem, gtCount = k - eqNeed;

	// Ordered gather: thread t owns [t·per, (t+1)·per) of the list.
	int per = (n + blockDim.x - 1) / blockDim.x, c0 = min(n, tid * per), c1 = min(n, c0 + per);
	int ngt = 0, neq = 0;
	for (int i0 = c0; i0 < c1; i0 += TOPK_UNROLL) {
		u32 keys[TOPK_UNROLL];
#pragma unroll
		for (int u = 0; u < TOPK_UNROLL; u++) keys[u] = i0 + u < c1 ? list.keys[i0 + u] : 0u;
#pragma unroll
		for (int u = 0; u < TOPK_UNROLL; u++)
			if (i0 + u < c1) ngt += keys[u] > T, neq += keys[u] == T;
	}
	int gtOff = topk_exclusive_scan(ngt, s.scan);
	int eqOff = topk_exclusive_scan(neq, s.scan);
	for (int i = c0; i < c1; i++) {
		u32 key = list.keys[i];
		if (key > T) {
			s.key[gtOff] = key, s.id[gtOff] = list.id(i);
			gtOff++;
		} else if (key == T) {
			if (eqOff < eqNeed) s.key[gtCount + eqOff] = key, s.id[gtCount + eqOff] = list.id(i);
			eqOff++;
		}
	}
	__syncthreads();
}

extern "C" __global__ void __launch_bounds__(TOPK_CHUNK_THREADS)
    lb_topk_chunks(const float *logits, int V, int k, float *stats, u32 *candKeys, int *candIds) {
	lb_pdl_wait();
	__shared__ u32 keys[TOPK_CHUNK];
	__shared__ float shf[32];
	__shared__ TopkShared s;
	int c = blockIdx.x, C = gridDim.x, row = blockIdx.y, tid = threadIdx.x;
	int base = c * TOPK_CHUNK, n = min(TOPK_CHUNK, V - base);
	const float *x = logits + (i64)row * V + base;
	float v[TOPK_CHUNK / TOPK_CHUNK_THREADS];
	float m = -__int_as_float(0x7f800000);
#pragma unroll
	for (int u = 0; u < TOPK_CHUNK / TOPK_CHUNK_THREADS; u++) {
		int i = u * TOPK_CHUNK_THREADS + tid;
		v[u] = i < n ? x[i] : 0.0f;
		if (i < n) keys[i] = topk_key(v[u]), m = nanmax(m, v[u]);
	}
	m = block_max(m, shf);
	float sum = 0.0f;
#pragma unroll
	for (int u = 0; u < TOPK_CHUNK / TOPK_CHUNK_THREADS; u++)
		if (u * TOPK_CHUNK_THREADS + tid < n) sum += expf(v[u] - m);
	sum = block_sum(sum, shf);
	if (tid == 0) {
		float *st = stats + (i64)row * 2 * C;
		st[c] = m;
		// A chunk of −∞ adds nothing (exp(−∞ − −∞) would be NaN).
		st[C + c] = m == -__int_as_float(0x7f800000) ? 0.0f : sum;
	}
	int kc = min(k, n);
	topk_select(TopkList{keys, nullptr, base, n}, kc, s);
	if (tid < kc) {
		i64 o = ((i64)row * C + c) * k + tid;
		candKeys[o] = s.key[tid];
		candIds[o] = s.id[tid];
	}
}

extern "C" __global__ void __launch_bounds__(TOPK_MERGE_THREADS)
    lb_topk_merge(int V, int k, int C, const float *stats, const u32 *candKeys, const int *candIds, int *ids, float *vals, float *lps, int *ties, float *lseLast) {
	lb_pdl_wait();
	__shared__ float shf[32];
	__shared__ TopkShared s;
	__shared__ float s_last;
	int row = blockIdx.x, tid = threadIdx.x;
	const float *st = stats + (i64)row * 2 * C;
	float M = -__int_as_float(0x7f800000);
	for (int c = tid; c < C; c += blockDim.x) M = nanmax(M, st[c]);
	M = block_max(M, shf);
	float S = 0.0f;
	for (int c = tid; c < C; c += blockDim.x) S += st[C + c] * expf(st[c] - M);
	S = block_sum(S, shf);
	float lse = M + logf(S);
	// The last chunk's candidates end short by k − its length: its padding
	// is the list's tail, left out.
	int last = V - (C - 1) * TOPK_CHUNK, n = C * k - (k - min(k, last));
	i64 o0 = (i64)row * C * k;
	topk_select(TopkList{candKeys + o0, candIds + o0, 0, n}, k, s);
	// Rank sort of the k: by key descending, then id ascending.
	if (tid < k) {
		u32 ki = s.key[tid];
		int ii = s.id[tid], r = 0;
		for (int j = 0; j < k; j++) r += s.key[j] > ki || (s.key[j] == ki && s.id[j] < ii);
		i64 o = (i64)row * k + r;
		float v = topk_value(ki);
		ids[o] = ii;
		vals[o] = v;
		lps[o] = v - lse;
		if (r == k - 1) s_last = v - lse;
	}
	__syncthreads();
	if (tid == 0) {
		lseLast[2 * row] = lse;
		lseLast[2 * row + 1] = s_last;
		ties[row] = 0;
	}
}

extern "C" __global__ void __launch_bounds__(TOPK_CHUNK_THREADS)
    lb_topk_ties(const float *logits, int V, const float *lseLast, int *ties) {
	lb_pdl_wait();
	__shared__ float shf[32];
	int c = blockIdx.x, row = blockIdx.y, tid = threadIdx.x;
	int base = c * TOPK_CHUNK, n = min(TOPK_CHUNK, V - base);
	const float *x = logits + (i64)row * V + base;
	float lse = lseLast[2 * row], last = lseLast[2 * row + 1], cnt = 0.0f;
	float v[TOPK_CHUNK / TOPK_CHUNK_THREADS];
#pragma unroll
	for (int u = 0; u < TOPK_CHUNK / TOPK_CHUNK_THREADS; u++) {
		int i = u * TOPK_CHUNK_THREADS + tid;
		v[u] = i < n ? x[i] : 0.0f;
	}
#pragma unroll
	for (int u = 0; u < TOPK_CHUNK / TOPK_CHUNK_THREADS; u++)
		if (u * TOPK_CHUNK_THREADS + tid < n && v[u] - lse >= last) cnt += 1.0f;
	cnt = block_sum(cnt, shf); // exact: at most TOPK_CHUNK
	if (tid == 0 && cnt > 0.0f) atomicAdd(&ties[row], (int)cnt);
}
