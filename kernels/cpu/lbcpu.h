//go:build cgo

// lbcpu.h: the entry points of kernels/cpu that Go calls, one per op, and
// nothing else. Every function takes plain pointers and sizes, returns an
// int status (LB_OK or an LB_ERR_* code) unless it cannot fail, and keeps no
// pointer after it returns. Shapes are checked in Go (ops.go) before the
// call; the C side trusts them. Tensors are row-major float32 unless a
// comment says otherwise.
#ifndef LBCPU_H
#define LBCPU_H

#include <stdint.h>

// Code paths, best last. The numbers are Go's too (ops.go).
enum { LB_ISA_GENERIC = 0, LB_ISA_AVX2 = 1, LB_ISA_AVX512 = 2 };

// Status codes.
enum { LB_OK = 0, LB_ERR_NOMEM = 1, LB_ERR_ISA = 2, LB_ERR_THREADS = 3 };

// Weight formats and activation quantizations, as kernels.WeightFormat and
// kernels.ActQuant number them (ops.go maps them explicitly).
enum { LB_W_BF16 = 1, LB_W_FP8_CHANNEL = 2, LB_W_FP8_TENSOR = 3, LB_W_FP8_BLOCK = 4, LB_W_NVFP4 = 5 };
enum { LB_A_NONE = 0, LB_A_FP8_TOKEN = 1, LB_A_FP8_TENSOR = 2, LB_A_FP8_GROUP128 = 3, LB_A_NVFP4 = 4 };
// KV cache element types (kernels.KVDType).
enum { LB_KV_F32 = 0, LB_KV_BF16 = 1, LB_KV_FP8 = 2 };

typedef struct lb_ctx lb_ctx;

// cpu_features.c
int lb_isa_supported(int isa);

// context.c: a context owns the thread pool (threads workers including the
// calling thread) and the scratch memory of one code path.
int lb_ctx_new(lb_ctx **out, int isa, int threads);
void lb_ctx_free(lb_ctx *c);

// matmul.c: y[T, out] = x[T, in] · wᵀ with the weight format and activation
// quantization of kernels.Weight.
int lb_matmul(lb_ctx *c, float *y, const float *x, int64_t T, int fmt, int64_t out, int64_t in,
              const uint8_t *data, const float *scales, float global_scale, int act, float input_scale);
// lb_matmul3: lb_matmul of one x with n (1 to 3) weights of one format, in
// features, activation quantization and input scale, in one dispatch of
// the pool: x is quantized once, and weight i gives y_i [T, out_i].
int lb_matmul3(lb_ctx *c, int n, const float *x, int64_t T, int fmt, int64_t in, int act, float input_scale,
               float *y0, int64_t out0, const uint8_t *d0, const float *s0, float g0,
               float *y1, int64_t out1, const uint8_t *d1, const float *s1, float g1,
               float *y2, int64_t out2, const uint8_t *d2, const float *s2, float g2);

// cpu_features.c: lb_vbmi reports whether the AVX-512 path uses its VBMI
// variant (the FP8 MatMul's): the CPU has VBMI and lb_set_vbmi(0) has not
// turned it off, which tests do to run the plain AVX-512 one on a VBMI CPU.
// lb_set_vbmi is not safe to call while MatMul runs.
int lb_vbmi(void);
void lb_set_vbmi(int on);
// lb_bf16dot: whether the VBMI variant of the FP8 MatMul multiplies FP8
// activations with AVX512_BF16's vdpbf16ps (the CPU has it, and
// lb_set_bf16dot(0) has not turned it off); the same bits either way.
int lb_bf16dot(void);
void lb_set_bf16dot(int on);

// rmsnorm.c
void lb_rmsnorm(lb_ctx *c, float *y, const float *x, const float *w, int64_t T, int64_t D, float eps,
                int zero_centered);

// rope.c
int lb_rope(lb_ctx *c, float *x, int64_t T, int64_t heads, int64_t head_dim, int64_t rotary_dim,
            const int32_t *pos, double theta);

// attention.c
// blocks NULL: a contiguous cache (pool row = position); else position j is
// row blocks[j / bs]·bs + j % bs. dtype is an LB_KV_* value; kscale and
// vscale are used by LB_KV_FP8 only.
int lb_attention(lb_ctx *c, float *out, const float *q, const uint8_t *k, const uint8_t *v, int dtype,
                 float kscale, float vscale, const int32_t *blocks, int64_t bs, int64_t T, int64_t start,
                 int64_t H, int64_t KVH, int64_t Dh, float scale);

// silu_mul.c, add.c, log_softmax.c
void lb_silu_mul(lb_ctx *c, float *out, const float *gate, const float *up, int64_t n);
void lb_add(lb_ctx *c, float *out, const float *a, const float *b, int64_t n);
void lb_log_softmax(lb_ctx *c, float *out, const float *logits, int64_t T, int64_t V);

// bandwidth.c: bytes/s of a multi-threaded streaming read of a buffer of
// about `bytes` bytes, or 0 when it cannot be allocated.
double lb_memory_bandwidth(lb_ctx *c, int64_t bytes);

// act_quant.c, for tests: dst[i] = decode(encode(src[i])) for E4M3 (kind 0,
// saturating) or E2M1 (kind 1) with the given code path's routine.
void lb_round_minifloat(int isa, int kind, float *dst, const float *src, int64_t n);

// lb_kv_decode writes n elements of a BF16 (dtype LB_KV_BF16) or E4M3
// (LB_KV_FP8, each value times sc) cache row as float32 by the attention's
// row decode of the named code path, for the tests.
void lb_kv_decode(int isa, int dtype, float *dst, const uint8_t *src, int64_t n, float sc);

// lb_exp_run writes dst[i] = exp(src[i]) by the kernels' own exp (lb_exp in
// internal.h) on the named code path, for the tests: the lanes of the
// path's vectors, the rest by lb_expf.
void lb_exp_run(int isa, float *dst, const float *src, int64_t n);

#endif
