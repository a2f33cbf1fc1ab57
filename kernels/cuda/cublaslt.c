//go:build cgo

// cublaslt.c: dlopen/dlsym of cuBLASLt and the one product lowbit asks of
// it (BF16 weights and activations, float32 accumulation and output), with
// the library's types declared here from its documented ABI: the binary
// builds without the CUDA toolkit. Status codes go back to Go unchanged
// (errors.go turns them into errors).
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "driver.h"

// cublasLt.h's values (stable across CUDA 11.x-13.x).
enum {
	LT_COMPUTE_32F = 68,  // CUBLAS_COMPUTE_32F
	LT_R_32F = 0,         // CUDA_R_32F
	LT_R_16BF = 14,       // CUDA_R_16BF
	LT_DESC_TRANSA = 3,   // CUBLASLT_MATMUL_DESC_TRANSA
	LT_DESC_TRANSB = 4,   // CUBLASLT_MATMUL_DESC_TRANSB
	LT_OP_N = 0,          // CUBLAS_OP_N
	LT_OP_T = 1,          // CUBLAS_OP_T
	LT_PREF_MAX_WS = 1,   // CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES
	LT_CONFIG_SPLITK = 2, // CUBLASLT_ALGO_CONFIG_SPLITK_NUM
};

typedef struct {
	uint64_t data[8];
} lt_algo; // cublasLtMatmulAlgo_t

typedef struct {
	lt_algo algo;
	size_t workspaceSize;
	int state;
	float wavesCount;
	int reserved[4];
} lt_heuristic; // cublasLtMatmulHeuristicResult_t

static void *libcublaslt;

#define LT(name, ret, args) static ret(*p_##name) args;
#define LT_FUNCS(X)                                                                                         \
	X(cublasLtCreate, lb_ltres, (lb_handle *))                                                            \
	X(cublasLtDestroy, lb_ltres, (lb_handle))                                                             \
	X(cublasLtGetStatusName, const char *, (lb_ltres))                                                    \
	X(cublasLtGetStatusString, const char *, (lb_ltres))                                                  \
	X(cublasLtMatmulDescCreate, lb_ltres, (lb_handle *, int, int))                                        \
	X(cublasLtMatmulDescDestroy, lb_ltres, (lb_handle))                                                   \
	X(cublasLtMatmulDescSetAttribute, lb_ltres, (lb_handle, int, const void *, size_t))                   \
	X(cublasLtMatrixLayoutCreate, lb_ltres, (lb_handle *, int, uint64_t, uint64_t, int64_t))              \
	X(cublasLtMatrixLayoutDestroy, lb_ltres, (lb_handle))                                                 \
	X(cublasLtMatmulPreferenceCreate, lb_ltres, (lb_handle *))                                            \
	X(cublasLtMatmulPreferenceDestroy, lb_ltres, (lb_handle))                                             \
	X(cublasLtMatmulPreferenceSetAttribute, lb_ltres, (lb_handle, int, const void *, size_t))             \
	X(cublasLtMatmulAlgoGetHeuristic, lb_ltres,                                                           \
	  (lb_handle, lb_handle, lb_handle, lb_handle, lb_handle, lb_handle, lb_handle, int, lt_heuristic *, \
	   int *))                                                                                            \
	X(cublasLtMatmulAlgoConfigGetAttribute, lb_ltres, (const lt_algo *, int, void *, size_t, size_t *))   \
	X(cublasLtMatmul, lb_ltres,                                                                           \
	  (lb_handle, lb_handle, const void *, const void *, lb_handle, const void *, lb_handle, const void *, \
	   const void *, lb_handle, void *, lb_handle, const lt_algo *, void *, size_t, lb_handle))

LT_FUNCS(LT)

int lb_cublaslt_open(const char *path, char *err, size_t errlen) {
	if (libcublaslt) return 0;
	static const char *names[] = {"libcublasLt.so", "libcublasLt.so.13", "libcublasLt.so.12",
	                              "/usr/local/cuda/lib64/libcublasLt.so", NULL};
	void *lib = NULL;
	if (path && *path) {
		lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	} else {
		for (int i = 0; names[i] && !lib; i++) lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
	}
	if (!lib) {
		snprintf(err, errlen, "%s", dlerror());
		return 1;
	}
#define RESLT(name, ret, args)                                                                               \
	if (!(p_##name = (ret(*) args)dlsym(lib, #name))) {                                                  \
		snprintf(err, errlen, "symbol %s not found", #name);                                         \
		dlclose(lib);                                                                                \
		return 1;                                                                                    \
	}
	LT_FUNCS(RESLT)
	libcublaslt = lib;
	return 0;
}

lb_ltres lb_ltCreate(lb_handle *h) { return p_cublasLtCreate(h); }
lb_ltres lb_ltDestroy(lb_handle h) { return p_cublasLtDestroy(h); }
const char *lb_ltStatusName(lb_ltres r) { return libcublaslt ? p_cublasLtGetStatusName(r) : "CUBLAS_STATUS"; }
const char *lb_ltStatusString(lb_ltres r) { return libcublaslt ? p_cublasLtGetStatusString(r) : "cuBLASLt not loaded"; }

// lt_product holds the descriptors of one product. In cuBLAS's column-major
// terms y [T, out] row-major is D = [out × T] with ld out; w [out, in]
// row-major is A = [in × out] with ld in, taken transposed; x [T, in]
// row-major is B = [in × T] with ld in.
typedef struct {
	lb_handle op, a, b, d;
} lt_product;

static void lt_release(lt_product *p) {
	if (p->op) p_cublasLtMatmulDescDestroy(p->op);
	if (p->a) p_cublasLtMatrixLayoutDestroy(p->a);
	if (p->b) p_cublasLtMatrixLayoutDestroy(p->b);
	if (p->d) p_cublasLtMatrixLayoutDestroy(p->d);
}

static lb_ltres lt_describe(lt_product *p, int out, int in, int T) {
	memset(p, 0, sizeof *p);
	int ta = LT_OP_T, tb = LT_OP_N;
	lb_ltres r = p_cublasLtMatmulDescCreate(&p->op, LT_COMPUTE_32F, LT_R_32F);
	if (!r) r = p_cublasLtMatmulDescSetAttribute(p->op, LT_DESC_TRANSA, &ta, sizeof ta);
	if (!r) r = p_cublasLtMatmulDescSetAttribute(p->op, LT_DESC_TRANSB, &tb, sizeof tb);
	if (!r) r = p_cublasLtMatrixLayoutCreate(&p->a, LT_R_16BF, (uint64_t)in, (uint64_t)out, in);
	if (!r) r = p_cublasLtMatrixLayoutCreate(&p->b, LT_R_16BF, (uint64_t)in, (uint64_t)T, in);
	if (!r) r = p_cublasLtMatrixLayoutCreate(&p->d, LT_R_32F, (uint64_t)out, (uint64_t)T, out);
	if (r) lt_release(p);
	return r;
}

lb_ltres lb_lt_pick_bf16(lb_handle h, int out, int in, int T, size_t ws, uint64_t *algo, int *found) {
	*found = 0;
	lt_product p;
	lb_ltres r = lt_describe(&p, out, in, T);
	if (r) return r;
	lb_handle pref = NULL;
	lt_heuristic res[16];
	int n = 0;
	r = p_cublasLtMatmulPreferenceCreate(&pref);
	if (!r) r = p_cublasLtMatmulPreferenceSetAttribute(pref, LT_PREF_MAX_WS, &ws, sizeof ws);
	if (!r) r = p_cublasLtMatmulAlgoGetHeuristic(h, p.op, p.a, p.b, p.d, p.d, pref, 16, res, &n);
	for (int i = 0; !r && i < n && !*found; i++) {
		uint32_t splitk = 1;
		size_t written = 0;
		if (res[i].state) continue;
		if (p_cublasLtMatmulAlgoConfigGetAttribute(&res[i].algo, LT_CONFIG_SPLITK, &splitk, sizeof splitk,
		                                           &written))
			continue;
		if (splitk <= 1) {
			memcpy(algo, res[i].algo.data, sizeof res[i].algo.data);
			*found = 1;
		}
	}
	if (pref) p_cublasLtMatmulPreferenceDestroy(pref);
	lt_release(&p);
	return r;
}

lb_ltres lb_lt_gemm_bf16(lb_handle h, lb_handle stream, lb_devptr y, lb_devptr w, lb_devptr x, int T, int out,
                         int in, const uint64_t *algo, lb_devptr ws, size_t wsbytes) {
	lt_product p;
	lb_ltres r = lt_describe(&p, out, in, T);
	if (r) return r;
	float one = 1.0f, zero = 0.0f;
	lt_algo a;
	memcpy(a.data, algo, sizeof a.data);
	r = p_cublasLtMatmul(h, p.op, &one, (const void *)w, p.a, (const void *)x, p.b, &zero, (const void *)y, p.d,
	                     (void *)y, p.d, &a, (void *)ws, wsbytes, stream);
	lt_release(&p);
	return r;
}
