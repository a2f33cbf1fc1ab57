//go:build cgo

// driver.c: dlopen/dlsym of the CUDA driver and NVRTC, and thin wrappers
// that call through the resolved pointers. No wrapper does anything but
// forward its arguments: errors are turned into Go errors by one function
// on the Go side (errors.go).
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "driver.h"

static void *libcuda, *libnvrtc;

#define DRV(name, ret, args) static ret(*p_##name) args;
#define DRIVER_FUNCS(X)                                                                                    \
	X(cuInit, lb_cures, (unsigned))                                                                      \
	X(cuDriverGetVersion, lb_cures, (int *))                                                             \
	X(cuDeviceGetCount, lb_cures, (int *))                                                               \
	X(cuDeviceGet, lb_cures, (int *, int))                                                               \
	X(cuDeviceGetName, lb_cures, (char *, int, int))                                                     \
	X(cuDeviceGetAttribute, lb_cures, (int *, int, int))                                                 \
	X(cuDeviceTotalMem_v2, lb_cures, (size_t *, int))                                                    \
	X(cuDevicePrimaryCtxRetain, lb_cures, (lb_handle *, int))                                            \
	X(cuDevicePrimaryCtxRelease_v2, lb_cures, (int))                                                     \
	X(cuCtxSetCurrent, lb_cures, (lb_handle))                                                            \
	X(cuCtxSynchronize, lb_cures, (void))                                                                \
	X(cuMemGetInfo_v2, lb_cures, (size_t *, size_t *))                                                   \
	X(cuMemAlloc_v2, lb_cures, (lb_devptr *, size_t))                                                    \
	X(cuMemFree_v2, lb_cures, (lb_devptr))                                                               \
	X(cuMemcpyHtoD_v2, lb_cures, (lb_devptr, const void *, size_t))                                      \
	X(cuMemcpyDtoH_v2, lb_cures, (void *, lb_devptr, size_t))                                            \
	X(cuMemsetD8_v2, lb_cures, (lb_devptr, unsigned char, size_t))                                       \
	X(cuMemcpyDtoD_v2, lb_cures, (lb_devptr, lb_devptr, size_t))                                         \
	X(cuModuleLoadData, lb_cures, (lb_handle *, const void *))                                           \
	X(cuModuleUnload, lb_cures, (lb_handle))                                                             \
	X(cuModuleGetFunction, lb_cures, (lb_handle *, lb_handle, const char *))                             \
	X(cuModuleGetGlobal_v2, lb_cures, (lb_devptr *, size_t *, lb_handle, const char *))                  \
	X(cuFuncSetAttribute, lb_cures, (lb_handle, int, int))                                               \
	X(cuFuncGetAttribute, lb_cures, (int *, int, lb_handle))                                             \
	X(cuGetErrorName, lb_cures, (lb_cures, const char **))                                               \
	X(cuGetErrorString, lb_cures, (lb_cures, const char **))                                             \
	X(cuEventCreate, lb_cures, (lb_handle *, unsigned))                                                  \
	X(cuEventRecord, lb_cures, (lb_handle, lb_handle))                                                   \
	X(cuEventSynchronize, lb_cures, (lb_handle))                                                         \
	X(cuEventElapsedTime, lb_cures, (float *, lb_handle, lb_handle))                                     \
	X(cuEventDestroy_v2, lb_cures, (lb_handle))                                                          \
	X(cuStreamCreate, lb_cures, (lb_handle *, unsigned))                                                 \
	X(cuStreamDestroy_v2, lb_cures, (lb_handle))                                                         \
	X(cuStreamSynchronize, lb_cures, (lb_handle))                                                        \
	X(cuStreamBeginCapture_v2, lb_cures, (lb_handle, int))                                               \
	X(cuStreamEndCapture, lb_cures, (lb_handle, lb_handle *))                                            \
	X(cuGraphInstantiateWithFlags, lb_cures, (lb_handle *, lb_handle, unsigned long long))               \
	X(cuGraphLaunch, lb_cures, (lb_handle, lb_handle))                                                   \
	X(cuGraphExecDestroy, lb_cures, (lb_handle))                                                         \
	X(cuGraphDestroy, lb_cures, (lb_handle))                                                             \
	X(cuMemcpyHtoDAsync_v2, lb_cures, (lb_devptr, const void *, size_t, lb_handle))                      \
	X(cuMemcpyDtoHAsync_v2, lb_cures, (void *, lb_devptr, size_t, lb_handle))                            \
	X(cuMemcpyDtoDAsync_v2, lb_cures, (lb_devptr, lb_devptr, size_t, lb_handle))                         \
	X(cuMemsetD8Async, lb_cures, (lb_devptr, unsigned char, size_t, lb_handle))                          \
	X(cuLaunchKernel, lb_cures,                                                                          \
	  (lb_handle, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, lb_handle, void **, \
	   void **))
#define NVRTC_FUNCS(X)                                                                                     \
	X(nvrtcVersion, lb_nvrtcres, (int *, int *))                                                         \
	X(nvrtcCreateProgram, lb_nvrtcres,                                                                   \
	  (lb_handle *, const char *, const char *, int, const char *const *, const char *const *))           \
	X(nvrtcCompileProgram, lb_nvrtcres, (lb_handle, int, const char *const *))                           \
	X(nvrtcGetProgramLogSize, lb_nvrtcres, (lb_handle, size_t *))                                        \
	X(nvrtcGetProgramLog, lb_nvrtcres, (lb_handle, char *))                                              \
	X(nvrtcGetCUBINSize, lb_nvrtcres, (lb_handle, size_t *))                                             \
	X(nvrtcGetCUBIN, lb_nvrtcres, (lb_handle, char *))                                                   \
	X(nvrtcDestroyProgram, lb_nvrtcres, (lb_handle *))                                                   \
	X(nvrtcGetErrorString, const char *, (lb_nvrtcres))

DRIVER_FUNCS(DRV)
NVRTC_FUNCS(DRV)
static lb_cures (*p_cuLaunchKernelEx)(const void *config, lb_handle fn, void **params, void **extra);

// CUlaunchAttribute and CUlaunchConfig as cuda.h lays them out (12.x, 13.x).
typedef struct {
	int id; // CUlaunchAttributeID
	char pad[4];
	union {
		char pad[64];
		int value;
	} v;
} lb_launch_attr;
typedef struct {
	unsigned gx, gy, gz, bx, by, bz, shmem;
	lb_handle stream;
	lb_launch_attr *attrs;
	unsigned nattrs;
} lb_launch_config;
_Static_assert(sizeof(lb_launch_attr) == 72 && sizeof(lb_launch_config) == 56, "cuda.h's launch structs");

static int resolve(void *lib, const char *name, void **dst, char *err, size_t errlen) {
	*dst = dlsym(lib, name);
	if (!*dst) {
		snprintf(err, errlen, "symbol %s not found", name);
		return 0;
	}
	return 1;
}

int lb_cuda_open(const char *nvrtc_path, char *err, size_t errlen) {
	if (!libcuda) {
		libcuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
		if (!libcuda) {
			snprintf(err, errlen, "%s", dlerror());
			return LB_CUDA_NO_DRIVER;
		}
#define RES(name, ret, args)                                                                               \
	if (!resolve(libcuda, #name, (void **)&p_##name, err, errlen)) return LB_CUDA_MISSING_SYMBOL;
		DRIVER_FUNCS(RES)
		// Optional (CUDA 12+): programmatic dependent launch goes through it.
		p_cuLaunchKernelEx = (lb_cures(*)(const void *, lb_handle, void **, void **))dlsym(libcuda, "cuLaunchKernelEx");
	}
	if (!libnvrtc) {
		static const char *names[] = {"libnvrtc.so", "libnvrtc.so.13", "libnvrtc.so.12",
		                              "/usr/local/cuda/lib64/libnvrtc.so", NULL};
		if (nvrtc_path && *nvrtc_path) {
			libnvrtc = dlopen(nvrtc_path, RTLD_NOW | RTLD_LOCAL);
		} else {
			for (int i = 0; names[i] && !libnvrtc; i++) libnvrtc = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
		}
		if (!libnvrtc) {
			snprintf(err, errlen, "%s", dlerror());
			return LB_CUDA_NO_NVRTC;
		}
#define RESN(name, ret, args)                                                                              \
	if (!resolve(libnvrtc, #name, (void **)&p_##name, err, errlen)) return LB_CUDA_MISSING_SYMBOL;
		NVRTC_FUNCS(RESN)
	}
	return LB_CUDA_OK;
}

lb_cures lb_cuInit(unsigned f) { return p_cuInit(f); }
lb_cures lb_cuDriverGetVersion(int *v) { return p_cuDriverGetVersion(v); }
lb_cures lb_cuDeviceGetCount(int *n) { return p_cuDeviceGetCount(n); }
lb_cures lb_cuDeviceGet(int *d, int o) { return p_cuDeviceGet(d, o); }
lb_cures lb_cuDeviceGetName(char *n, int l, int d) { return p_cuDeviceGetName(n, l, d); }
lb_cures lb_cuDeviceGetAttribute(int *v, int a, int d) { return p_cuDeviceGetAttribute(v, a, d); }
lb_cures lb_cuDeviceTotalMem(size_t *b, int d) { return p_cuDeviceTotalMem_v2(b, d); }
lb_cures lb_cuDevicePrimaryCtxRetain(lb_handle *c, int d) { return p_cuDevicePrimaryCtxRetain(c, d); }
lb_cures lb_cuDevicePrimaryCtxRelease(int d) { return p_cuDevicePrimaryCtxRelease_v2(d); }
lb_cures lb_cuCtxSetCurrent(lb_handle c) { return p_cuCtxSetCurrent(c); }
lb_cures lb_cuCtxSynchronize(void) { return p_cuCtxSynchronize(); }
lb_cures lb_cuMemGetInfo(size_t *f, size_t *t) { return p_cuMemGetInfo_v2(f, t); }
lb_cures lb_cuMemAlloc(lb_devptr *p, size_t b) { return p_cuMemAlloc_v2(p, b); }
lb_cures lb_cuMemFree(lb_devptr p) { return p_cuMemFree_v2(p); }
lb_cures lb_cuMemcpyHtoD(lb_devptr d, const void *s, size_t b) { return p_cuMemcpyHtoD_v2(d, s, b); }
lb_cures lb_cuMemcpyDtoH(void *d, lb_devptr s, size_t b) { return p_cuMemcpyDtoH_v2(d, s, b); }
lb_cures lb_cuMemsetD8(lb_devptr p, unsigned char v, size_t n) { return p_cuMemsetD8_v2(p, v, n); }
lb_cures lb_cuMemcpyDtoD(lb_devptr d, lb_devptr s, size_t b) { return p_cuMemcpyDtoD_v2(d, s, b); }
lb_cures lb_cuModuleLoadData(lb_handle *m, const void *i) { return p_cuModuleLoadData(m, i); }
lb_cures lb_cuModuleUnload(lb_handle m) { return p_cuModuleUnload(m); }
lb_cures lb_cuModuleGetFunction(lb_handle *f, lb_handle m, const char *n) { return p_cuModuleGetFunction(f, m, n); }
lb_cures lb_cuModuleGetGlobal(lb_devptr *p, size_t *b, lb_handle m, const char *n) { return p_cuModuleGetGlobal_v2(p, b, m, n); }
lb_cures lb_cuFuncSetAttribute(lb_handle f, int a, int v) { return p_cuFuncSetAttribute(f, a, v); }
lb_cures lb_cuFuncGetAttribute(int *v, int a, lb_handle f) { return p_cuFuncGetAttribute(v, a, f); }
lb_cures lb_cuGetErrorName(lb_cures r, const char **s) { return p_cuGetErrorName(r, s); }
lb_cures lb_cuGetErrorString(lb_cures r, const char **s) { return p_cuGetErrorString(r, s); }
lb_cures lb_cuEventCreate(lb_handle *e, unsigned f) { return p_cuEventCreate(e, f); }
lb_cures lb_cuEventRecord(lb_handle e, lb_handle s) { return p_cuEventRecord(e, s); }
lb_cures lb_cuEventSynchronize(lb_handle e) { return p_cuEventSynchronize(e); }
lb_cures lb_cuEventElapsedTime(float *ms, lb_handle a, lb_handle b) { return p_cuEventElapsedTime(ms, a, b); }
lb_cures lb_cuEventDestroy(lb_handle e) { return p_cuEventDestroy_v2(e); }

lb_cures lb_cuStreamCreate(lb_handle *s, unsigned f) { return p_cuStreamCreate(s, f); }
lb_cures lb_cuStreamDestroy(lb_handle s) { return p_cuStreamDestroy_v2(s); }
lb_cures lb_cuStreamSynchronize(lb_handle s) { return p_cuStreamSynchronize(s); }
lb_cures lb_cuStreamBeginCapture(lb_handle s, int mode) { return p_cuStreamBeginCapture_v2(s, mode); }
lb_cures lb_cuStreamEndCapture(lb_handle s, lb_handle *g) { return p_cuStreamEndCapture(s, g); }
lb_cures lb_cuGraphInstantiate(lb_handle *e, lb_handle g) { return p_cuGraphInstantiateWithFlags(e, g, 0); }
lb_cures lb_cuGraphLaunch(lb_handle e, lb_handle s) { return p_cuGraphLaunch(e, s); }
lb_cures lb_cuGraphExecDestroy(lb_handle e) { return p_cuGraphExecDestroy(e); }
lb_cures lb_cuGraphDestroy(lb_handle g) { return p_cuGraphDestroy(g); }
lb_cures lb_cuMemcpyHtoDAsync(lb_devptr d, const void *s, size_t b, lb_handle st) { return p_cuMemcpyHtoDAsync_v2(d, s, b, st); }
lb_cures lb_cuMemcpyDtoHAsync(void *d, lb_devptr s, size_t b, lb_handle st) { return p_cuMemcpyDtoHAsync_v2(d, s, b, st); }
lb_cures lb_cuMemcpyDtoDAsync(lb_devptr d, lb_devptr s, size_t b, lb_handle st) { return p_cuMemcpyDtoDAsync_v2(d, s, b, st); }
lb_cures lb_cuMemsetD8Async(lb_devptr p, unsigned char v, size_t n, lb_handle st) { return p_cuMemsetD8Async(p, v, n, st); }

lb_cures lb_cu_launch(lb_handle fn, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                      unsigned shmem, lb_handle stream, uint64_t *slots, int nargs) {
	void *params[32];
	if (nargs > 32) return 1; // CUDA_ERROR_INVALID_VALUE
	for (int i = 0; i < nargs; i++) params[i] = &slots[i];
	return p_cuLaunchKernel(fn, gx, gy, gz, bx, by, bz, shmem, stream, params, NULL);
}

int lb_cu_has_launch_ex(void) { return p_cuLaunchKernelEx != NULL; }

lb_cures lb_cu_launch_pdl(lb_handle fn, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                          unsigned shmem, lb_handle stream, uint64_t *slots, int nargs) {
	void *params[32];
	if (nargs > 32) return 1;                    // CUDA_ERROR_INVALID_VALUE
	if (!p_cuLaunchKernelEx) return 500;         // CUDA_ERROR_NOT_FOUND
	for (int i = 0; i < nargs; i++) params[i] = &slots[i];
	lb_launch_attr a;
	memset(&a, 0, sizeof a);
	a.id = 6; // CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
	a.v.value = 1;
	lb_launch_config c = {gx, gy, gz, bx, by, bz, shmem, stream, &a, 1};
	return p_cuLaunchKernelEx(&c, fn, params, NULL);
}

lb_nvrtcres lb_nvrtcVersion(int *a, int *b) { return p_nvrtcVersion(a, b); }
lb_nvrtcres lb_nvrtcCreateProgram(lb_handle *p, const char *src, const char *name) {
	return p_nvrtcCreateProgram(p, src, name, 0, NULL, NULL);
}
lb_nvrtcres lb_nvrtcCompileProgram(lb_handle p, int n, const char *const *o) { return p_nvrtcCompileProgram(p, n, o); }
lb_nvrtcres lb_nvrtcGetProgramLogSize(lb_handle p, size_t *n) { return p_nvrtcGetProgramLogSize(p, n); }
lb_nvrtcres lb_nvrtcGetProgramLog(lb_handle p, char *l) { return p_nvrtcGetProgramLog(p, l); }
lb_nvrtcres lb_nvrtcGetCUBINSize(lb_handle p, size_t *n) { return p_nvrtcGetCUBINSize(p, n); }
lb_nvrtcres lb_nvrtcGetCUBIN(lb_handle p, char *c) { return p_nvrtcGetCUBIN(p, c); }
lb_nvrtcres lb_nvrtcDestroyProgram(lb_handle *p) { return p_nvrtcDestroyProgram(p); }
const char *lb_nvrtcGetErrorString(lb_nvrtcres r) { return p_nvrtcGetErrorString(r); }
