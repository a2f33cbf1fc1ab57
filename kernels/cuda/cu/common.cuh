// common.cuh: types and exact number-format helpers shared by every kernel.
// NVRTC compiles the .cu files of this folder as one program after this
// header, without any CUDA header: BF16, E4M3 and E2M1 are handled as bit
// patterns, with the same rounding as package format (round to nearest
// even; E4M3 saturating to ±448, NaN kept; E2M1 clamped to ±6, NaN to ±0).
// Every kernel is extern "C" so that the Go side finds it by name.
typedef unsigned char u8;
typedef unsigned short u16;
typedef unsigned int u32;
typedef long long i64;
typedef unsigned long long u64;

#define LB_NAN __int_as_float(0x7fc00000)

__device__ __forceinline__ float bf16_to_f32(u16 h) { return __uint_as_float((u32)h << 16); }

__device__ __forceinline__ u16 f32_to_bf16(float f) {
	if (f != f) return 0x7FC0;
	u32 u = __float_as_uint(f);
	return (u16)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

// e4m3_to_f32 decodes an E4M3FN code exactly; 0x7F and 0xFF are NaN.
__device__ __forceinline__ float e4m3_to_f32(u8 c) {
	u32 mag = c & 0x7Fu, sign = (u32)(c & 0x80u) << 24;
	if (mag == 0x7Fu) return __uint_as_float(sign | 0x7fc00000u);
	u32 e = mag >> 3, m = mag & 7u;
	if (e == 0) return __uint_as_float(sign | __float_as_uint((float)m * 0.001953125f)); // m·2^-9
	return __uint_as_float(sign | ((e + 120u) << 23) | (m << 20));
}

// e4m3x2_bf16x2 decodes the two E4M3FN codes in c's low 16 bits (the
// first in the low byte) to a BF16 pair (the first in the low half),
// exactly (E4M3 values are BF16 values); NaN codes give NaNs. From sm_89
// on, cvt decodes the pair to F16, whose E4M3 values are all normal, and
// widens it; before, e4m3_to_f32 decodes each.
__device__ __forceinline__ u32 e4m3x2_bf16x2(u32 c) {
	u32 r;
	float a, b;
#if __CUDA_ARCH__ >= 890
	u32 h;
	asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(h) : "h"((unsigned short)c));
	asm("{.reg .b16 l, u;\n\tmov.b32 {l, u}, %2;\n\tcvt.f32.f16 %0, l;\n\tcvt.f32.f16 %1, u;}" : "=f"(a), "=f"(b) : "r"(h));
#else
	a = e4m3_to_f32((u8)c);
	b = e4m3_to_f32((u8)(c >> 8));
#endif
	asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(b), "f"(a));
	return r;
}

// f32_to_e4m3 encodes with clamping to ±448, as format.E4M3FromFloat32.
__device__ __forceinline__ u8 f32_to_e4m3(float f) {
	u32 u = __float_as_uint(f), sign = (u >> 24) & 0x80u, a = u & 0x7FFFFFFFu;
	if (a > 0x7F800000u) return (u8)(sign | 0x7Fu);
	if (a >= 0x43E00000u) return (u8)(sign | 0x7Eu); // 448 and above
	if (a < 0x3C800000u) {                           // below 2^-6: subnormal steps of 2^-9
		float v = __uint_as_float(a) * 512.0f;           // exact
		return (u8)(sign | (u32)rintf(v));               // rintf rounds half to even
	}
	u32 r = (a + 0x7FFFFu + ((a >> 20) & 1u)) & 0xFFF00000u;
	return (u8)(sign | ((((r >> 23) - 120u) << 3) | ((r >> 20) & 7u)));
}

__device__ __forceinline__ float e2m1_to_f32(u32 c) {
	const float mags[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
	float v = mags[c & 7u];
	return (c & 8u) ? -v : v;
}

// f32_to_e2m1 encodes with clamping to ±6, ties to even; NaN gives ±0.
__device__ __forceinline__ u32 f32_to_e2m1(float f) {
	u32 u = __float_as_uint(f), sign = (u >> 28) & 8u;
	float a = __uint_as_float(u & 0x7FFFFFFFu);
	if (a != a) return sign;
	u32 c;
	if (a <= 0.25f) c = 0;
	else if (a < 0.75f) c = 1;
	else if (a <= 1.25f) c = 2;
	else if (a < 1.75f) c = 3;
	else if (a <= 2.5f) c = 4;
	else if (a < 3.5f) c = 5;
	else if (a <= 5.0f) c = 6;
	else c = 7;
	return sign | c;
}

// nanmax is Go's max: NaN wins and stays.
__device__ __forceinline__ float nanmax(float m, float v) { return (v != v || v > m) ? v : m; }

__device__ __forceinline__ float warp_sum(float v) {
	for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
	return v;
}

__device__ __forceinline__ float warp_max(float v) {
	for (int o = 16; o > 0; o >>= 1) v = nanmax(v, __shfl_xor_sync(0xffffffffu, v, o));
	return v;
}

// block_sum and block_max reduce over a block of up to 1024 threads (a
// multiple of 32) in a fixed order, so results do not depend on timing;
// every thread gets the result. sh holds 32 floats.
__device__ __forceinline__ float block_sum(float v, float *sh) {
	int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
	v = warp_sum(v);
	__syncthreads();
	if (lane == 0) sh[w] = v;
	__syncthreads();
	v = lane < nw ? sh[lane] : 0.0f;
	return warp_sum(v);
}

__device__ __forceinline__ float block_max(float v, float *sh) {
	int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
	v = warp_max(v);
	__syncthreads();
	if (lane == 0) sh[w] = v;
	__syncthreads();
	v = lane < nw ? sh[lane] : -__int_as_float(0x7f800000);
	return warp_max(v);
}

// The RMS order: how every RMSNorm of a hidden row sums its squares, so
// that the decode step's fused path (the down projection writes its rows'
// tile sums, lb_mma_gemv_bulk with sums; the q/k/v GEMV after it finishes
// the sum: lb_mma_gemv_bulk1_rms) and the norm kernels give the same
// bits. The row's columns form tiles of 16 (zeros past the row); a
// tile's squares add as a balanced pairwise tree, neighbours first
// (((x0² + x1²) + (x2² + x3²)) + ...: rms_tile); lane l of a warp adds
// tiles l, l + 32, ... in order from 0 and warp_sum adds the lanes
// (rms_total). Explicit _rn operations: a multiply-add contracted in one
// kernel and not in another would differ.
#define RMS_TILES_MAX 1024 // tiles a norm kernel's row may have: D ≤ 16384

// rms_tile is the RMS order's sum of the squares of v[0..15].
__device__ __forceinline__ float rms_tile(const float *v) {
	float a[8];
#pragma unroll
	for (int i = 0; i < 8; i++) a[i] = __fadd_rn(__fmul_rn(v[2 * i], v[2 * i]), __fmul_rn(v[2 * i + 1], v[2 * i + 1]));
#pragma unroll
	for (int w = 4; w > 0; w >>= 1)
#pragma unroll
		for (int i = 0; i < w; i++) a[i] = __fadd_rn(a[2 * i], a[2 * i + 1]);
	return a[0];
}

// rms_total adds n tile sums (tile(m) returns tile m's) in the RMS order;
// every lane of the calling warp returns the total. A lane reads its tiles
// eight at a time before it adds them: read from global memory one by one,
// each load waited for the add before it (eight L2 latencies a 4,096-wide
// row, which took back all a norm launch saved).
template <typename Tile> __device__ __forceinline__ float rms_total(Tile tile, int n) {
	float t = 0.0f;
	for (int m0 = threadIdx.x & 31; m0 < n; m0 += 32 * 8) {
		float v[8];
#pragma unroll
		for (int k = 0; k < 8; k++) v[k] = m0 + 32 * k < n ? tile(m0 + 32 * k) : 0.0f;
#pragma unroll
		for (int k = 0; k < 8; k++)
			if (m0 + 32 * k < n) t = __fadd_rn(t, v[k]);
	}
	return warp_sum(t);
}

// rms_scale is the norm's 1 / sqrt(mean square + eps) for a row of D
// columns whose squares sum to s.
__device__ __forceinline__ float rms_scale(float s, int D, float eps) {
	return __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(__fdiv_rn(s, (float)D), eps)));
}

// rms_apply is a normalized value: x · r, then · the gain g.
__device__ __forceinline__ float rms_apply(float x, float r, float g) { return __fmul_rn(__fmul_rn(x, r), g); }

// rms_gain is the norm's gain for weight w: w, or 1 + w (zero_centered).
__device__ __forceinline__ float rms_gain(float w, int zero_centered) { return zero_centered ? 1.0f + w : w; }

// block_rms_sumsq returns the RMS-order sum of squares of row xr (D
// columns, global or shared memory the whole block can read) to every
// thread; tiles is shared memory for ⌈D / 16⌉ floats. A thread a tile,
// then each warp adds the tiles (no second barrier). A 16-byte-aligned row
// of whole tiles loads a tile as four float4s: sixteen scalar loads a
// thread cost the Qwen3-8B decode step's norms about 20 µs.
__device__ __forceinline__ float block_rms_sumsq(const float *xr, int D, float *tiles) {
	int n = (D + 15) / 16;
	bool vec = D % 16 == 0 && ((u64)xr & 15) == 0;
	for (int m = threadIdx.x; m < n; m += blockDim.x) {
		float v[16];
		if (vec)
#pragma unroll
			for (int q = 0; q < 4; q++) {
				float4 f = ((const float4 *)xr)[4 * m + q];
				v[4 * q] = f.x, v[4 * q + 1] = f.y, v[4 * q + 2] = f.z, v[4 * q + 3] = f.w;
			}
		else
#pragma unroll
			for (int r = 0; r < 16; r++) v[r] = 16 * m + r < D ? xr[16 * m + r] : 0.0f;
		tiles[m] = rms_tile(v);
	}
	__syncthreads();
	return rms_total([&](int m) { return tiles[m]; }, n);
}

// kv_row is the paged cache's row of position p under block table blocks
// of bs positions a block (a null table: a contiguous cache).
__device__ __forceinline__ i64 kv_row(const int *blocks, int bs, int p) {
	return blocks ? (i64)blocks[p / bs] * bs + p % bs : (i64)p;
}

// The tensor-core matmul's activation terms (matmul_mma.cu): here because
// producers in files before matmul_mma.cu write them too.
__device__ __forceinline__ bool mma_finite(float v) { return (__float_as_uint(v) & 0x7F800000u) != 0x7F800000u; }

// mma_terms splits the pair (a, b) into three BF16 pairs hi, mid, lo
// (a in the low halves). A remainder that is not finite (x infinite or
// NaN, which hi already carries) continues as 0.
__device__ __forceinline__ void mma_terms(float a, float b, u32 *t0, u32 *t1, u32 *t2) {
	u32 *t[3] = {t0, t1, t2};
#pragma unroll
	for (int j = 0; j < 3; j++) {
		// cvt.rn rounds to nearest even as f32_to_bf16 does (a NaN becomes
		// the canonical BF16 NaN), in one instruction for the pair.
		u32 h;
		asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(h) : "f"(b), "f"(a));
		*t[j] = h;
		a -= __uint_as_float(h << 16);
		b -= __uint_as_float(h & 0xFFFF0000u);
		a = mma_finite(a) ? a : 0.0f;
		b = mma_finite(b) ? b : 0.0f;
	}
}

// mma_terms_n is mma_terms for nt = 3, and for nt = 1 the BF16 activations
// of the runtime's BF16 decode (matmul_mma.cu): hi alone, the round to
// nearest BF16 of the value, with mid and lo zeros. A kernel reading three
// terms then adds exact zeros to its sums, so it gives the bits of a kernel
// that reads hi alone (lb_mma_gemv_bulk1).
__device__ __forceinline__ void mma_terms_n(float a, float b, u32 *t0, u32 *t1, u32 *t2, int nt) {
	if (nt == 1) {
		asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(*t0) : "f"(b), "f"(a));
		*t1 = *t2 = 0u;
	} else {
		mma_terms(a, b, t0, t1, t2);
	}
}

// lb_silu_mul1 is silu(g)·u as lb_silu_mul_terms and the gate and up
// GEMV's epilogue (lb_mma_gemv_bulk1_silu) both compute it, one
// expression for the same bits.
__device__ __forceinline__ float lb_silu_mul1(float g, float u) { return g / (1.0f + expf(-g)) * u; }

// mma_put_terms stores the terms (nt: 3, or 1 for BF16 activations,
// mma_terms_n) of x[t, col] and x[t, col+1] (col even) where lb_mma_split
// puts them, for a matrix of nc column chunks: the producers of matmul
// inputs (add_rmsnorm.cu, silu_mul.cu) write mma terms directly. Columns
// past the matrix's width must come as zeros.
__device__ __forceinline__ void mma_put_terms(u32 *xs, int nc, int t, int col, float v0, float v1, int nt) {
	u32 tm[3];
	mma_terms_n(v0, v1, &tm[0], &tm[1], &tm[2], nt);
	int c = col >> 4, in16 = col & 15, lane = (t & 7) * 4 + ((in16 & 7) >> 1);
	i64 base = (((i64)(t >> 3) * nc + c) * 3) * 32 + lane;
#pragma unroll
	for (int j = 0; j < 3; j++) xs[(base + j * 32) * 2 + (in16 >> 3)] = tm[j];
}

// mma_bf16 accumulates a 16×8 float32 fragment d += A·B for one A fragment
// and one B fragment (2 words).
__device__ __forceinline__ void mma_bf16(float *d, uint4 a, u32 b0, u32 b1) {
	asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
	    : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
	    : "r"(a.x), "r"(a.y), "r"(a.z), "r"(a.w), "r"(b0), "r"(b1));
}

// smem_u32 is the shared-memory address of a pointer into shared memory.
__device__ __forceinline__ u32 smem_u32(const void *p) {
	u32 d;
	asm volatile("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(d) : "l"(p));
	return d;
}

// cp_async16 copies 16 bytes from global to shared memory without
// registers (cp.async, completed by cp_async_wait).
__device__ __forceinline__ void cp_async16(void *dst, const void *src) {
	asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(smem_u32(dst)), "l"(src) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
// cp_async_wait1 waits for all but the latest committed group.
__device__ __forceinline__ void cp_async_wait1() { asm volatile("cp.async.wait_group 1;" ::: "memory"); }
__device__ __forceinline__ void cp_async_wait0() { asm volatile("cp.async.wait_group 0;" ::: "memory"); }
// cp_async_wait waits for all but the latest n committed groups.
template <int n> __device__ __forceinline__ void cp_async_wait() {
	asm volatile("cp.async.wait_group %0;" ::"n"(n) : "memory");
}

// lb_pdl_wait is every kernel's first step (lb_mma_gemv's after it has
// started its first weight copies): with programmatic dependent launch
// (Device.launch, LOWBIT_PDL) a kernel may start while the one before it
// in the stream still runs, and griddepcontrol.wait holds it until that
// one has finished and its writes are visible; it then lets the next
// kernel start early in turn (launch_dependents). Launched the plain way,
// both are no-ops. sm_90 and later.
//
// With LB_TRACE (LOWBIT_TRACE=1, trace.go) block (0, 0, 0) of every kernel
// also records, in launch order, the global timer when it reaches the wait
// and when the wait releases it: a timeline of a graph replay, whose
// releases are the kernels before's ends.
#ifdef LB_TRACE
#define LB_TRACE_CAP 8192
extern "C" {
__device__ u64 *lb_trace; // [LB_TRACE_CAP][2]
__device__ u32 lb_trace_n;
}
__device__ __forceinline__ u64 lb_globaltimer() {
	u64 t;
	asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
	return t;
}
#endif
__device__ __forceinline__ void lb_pdl_wait() {
#ifdef LB_TRACE
	u64 *tr = 0;
	if (threadIdx.x == 0 && blockIdx.x == 0 && blockIdx.y == 0 && blockIdx.z == 0 && lb_trace) {
		tr = lb_trace + 2 * (atomicAdd(&lb_trace_n, 1u) % LB_TRACE_CAP);
		tr[0] = lb_globaltimer();
	}
#endif
#if __CUDA_ARCH__ >= 900
	asm volatile("griddepcontrol.wait;" ::: "memory");
	asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
#ifdef LB_TRACE
	if (tr) tr[1] = lb_globaltimer();
#endif
}

// ldsm_x4 loads four 8×8 BF16 matrices from shared memory (ldmatrix): lane
// l gives the address of row l & 7 of matrix l >> 3 and receives, in r[i],
// matrix i's row l >> 2, elements 2(l & 3) and 2(l & 3) + 1 (ldsm_x4_t:
// of the transposed matrix).
// ldsm_x4_at and ldsm_x4_t_at take the shared-space address (smem_u32): a
// kernel that keeps one per lane and buffer reaches every fragment by an
// immediate offset, not a generic-to-shared conversion a load.
__device__ __forceinline__ void ldsm_x4_at(u32 *r, u32 a) {
	asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
	             : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
	             : "r"(a)
	             : "memory");
}
__device__ __forceinline__ void ldsm_x4_t_at(u32 *r, u32 a) {
	asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
	             : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
	             : "r"(a)
	             : "memory");
}
__device__ __forceinline__ void ldsm_x4(u32 *r, const void *p) { ldsm_x4_at(r, smem_u32(p)); }
__device__ __forceinline__ void ldsm_x4_t(u32 *r, const void *p) { ldsm_x4_t_at(r, smem_u32(p)); }
