// driver.h: the CUDA driver API, NVRTC and cuBLASLt entry points lowbit
// uses, declared here (no CUDA header is needed to build) and resolved at
// run time with dlopen/dlsym, so that the binary builds with plain gcc and
// runs without a GPU.
#ifndef LB_CUDA_DRIVER_H
#define LB_CUDA_DRIVER_H

#include <stddef.h>
#include <stdint.h>

typedef int lb_cures;           // CUresult; 0 is CUDA_SUCCESS
typedef int lb_nvrtcres;        // nvrtcResult; 0 is NVRTC_SUCCESS
typedef uint64_t lb_devptr;     // CUdeviceptr
typedef void *lb_handle;        // CUcontext, CUmodule, CUfunction, CUstream, CUevent, nvrtcProgram

// Status of lb_cuda_open: which library could not be loaded or lacked a
// symbol (0 when everything resolved).
enum { LB_CUDA_OK = 0, LB_CUDA_NO_DRIVER = 1, LB_CUDA_NO_NVRTC = 2, LB_CUDA_MISSING_SYMBOL = 3 };

// lb_cuda_open loads libcuda.so.1 and an NVRTC library (nvrtc_path, or the
// usual sonames when NULL) and resolves every entry point. On failure it
// writes a message (dlerror's or the missing symbol) into err.
int lb_cuda_open(const char *nvrtc_path, char *err, size_t errlen);

// Driver API (the _v2 entry points where the header maps to them).
lb_cures lb_cuInit(unsigned flags);
lb_cures lb_cuDriverGetVersion(int *v);
lb_cures lb_cuDeviceGetCount(int *n);
lb_cures lb_cuDeviceGet(int *dev, int ordinal);
lb_cures lb_cuDeviceGetName(char *name, int len, int dev);
lb_cures lb_cuDeviceGetAttribute(int *v, int attr, int dev);
lb_cures lb_cuDeviceTotalMem(size_t *bytes, int dev);
lb_cures lb_cuDevicePrimaryCtxRetain(lb_handle *ctx, int dev);
lb_cures lb_cuDevicePrimaryCtxRelease(int dev);
lb_cures lb_cuCtxSetCurrent(lb_handle ctx);
lb_cures lb_cuCtxSynchronize(void);
lb_cures lb_cuMemGetInfo(size_t *free, size_t *total);
lb_cures lb_cuMemAlloc(lb_devptr *p, size_t bytes);
lb_cures lb_cuMemFree(lb_devptr p);
lb_cures lb_cuMemcpyHtoD(lb_devptr dst, const void *src, size_t bytes);
lb_cures lb_cuMemcpyDtoH(void *dst, lb_devptr src, size_t bytes);
lb_cures lb_cuMemsetD8(lb_devptr p, unsigned char v, size_t n);
lb_cures lb_cuMemcpyDtoD(lb_devptr dst, lb_devptr src, size_t bytes);
lb_cures lb_cuModuleLoadData(lb_handle *mod, const void *image);
lb_cures lb_cuModuleUnload(lb_handle mod);
lb_cures lb_cuModuleGetFunction(lb_handle *fn, lb_handle mod, const char *name);
lb_cures lb_cuModuleGetGlobal(lb_devptr *p, size_t *bytes, lb_handle mod, const char *name);
lb_cures lb_cuFuncSetAttribute(lb_handle fn, int attr, int value);
lb_cures lb_cuFuncGetAttribute(int *value, int attr, lb_handle fn);
lb_cures lb_cuGetErrorName(lb_cures r, const char **s);
lb_cures lb_cuGetErrorString(lb_cures r, const char **s);
lb_cures lb_cuEventCreate(lb_handle *e, unsigned flags);
lb_cures lb_cuEventRecord(lb_handle e, lb_handle stream);
lb_cures lb_cuEventSynchronize(lb_handle e);
lb_cures lb_cuEventElapsedTime(float *ms, lb_handle start, lb_handle end);
lb_cures lb_cuEventDestroy(lb_handle e);

// Streams and graphs (stream capture of a decode step, replayed).
lb_cures lb_cuStreamCreate(lb_handle *s, unsigned flags);
lb_cures lb_cuStreamDestroy(lb_handle s);
lb_cures lb_cuStreamSynchronize(lb_handle s);
lb_cures lb_cuStreamBeginCapture(lb_handle s, int mode);
lb_cures lb_cuStreamEndCapture(lb_handle s, lb_handle *graph);
lb_cures lb_cuGraphInstantiate(lb_handle *exec, lb_handle graph);
lb_cures lb_cuGraphLaunch(lb_handle exec, lb_handle s);
lb_cures lb_cuGraphExecDestroy(lb_handle exec);
lb_cures lb_cuGraphDestroy(lb_handle graph);
lb_cures lb_cuMemcpyHtoDAsync(lb_devptr dst, const void *src, size_t bytes, lb_handle s);
lb_cures lb_cuMemcpyDtoHAsync(void *dst, lb_devptr src, size_t bytes, lb_handle s);
lb_cures lb_cuMemcpyDtoDAsync(lb_devptr dst, lb_devptr src, size_t bytes, lb_handle s);
lb_cures lb_cuMemsetD8Async(lb_devptr p, unsigned char v, size_t n, lb_handle s);

// lb_cu_launch launches fn with args given as 8-byte slots: slot i holds
// argument i's value in its low bytes (the driver copies each parameter's
// size from it).
lb_cures lb_cu_launch(lb_handle fn, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                      unsigned shmem, lb_handle stream, uint64_t *slots, int nargs);

// lb_cu_launch_pdl is lb_cu_launch through cuLaunchKernelEx with
// programmatic stream serialization: the kernel may start before the one
// before it in the stream ends (it must wait with griddepcontrol.wait).
// lb_cu_has_launch_ex says whether the driver has cuLaunchKernelEx.
lb_cures lb_cu_launch_pdl(lb_handle fn, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                          unsigned shmem, lb_handle stream, uint64_t *slots, int nargs);
int lb_cu_has_launch_ex(void);

// NVRTC.
lb_nvrtcres lb_nvrtcVersion(int *major, int *minor);
lb_nvrtcres lb_nvrtcCreateProgram(lb_handle *prog, const char *src, const char *name);
lb_nvrtcres lb_nvrtcCompileProgram(lb_handle prog, int nopts, const char *const *opts);
lb_nvrtcres lb_nvrtcGetProgramLogSize(lb_handle prog, size_t *n);
lb_nvrtcres lb_nvrtcGetProgramLog(lb_handle prog, char *log);
lb_nvrtcres lb_nvrtcGetCUBINSize(lb_handle prog, size_t *n);
lb_nvrtcres lb_nvrtcGetCUBIN(lb_handle prog, char *cubin);
lb_nvrtcres lb_nvrtcDestroyProgram(lb_handle *prog);
const char *lb_nvrtcGetErrorString(lb_nvrtcres r);

// cuBLASLt (cublaslt.c), loaded on first use: only the BF16 prefill matmul
// needs it.
typedef int lb_ltres; // cublasStatus_t; 0 is CUBLAS_STATUS_SUCCESS

// lb_cublaslt_open loads libcublasLt (path, or the usual sonames when NULL)
// and resolves its entry points; 0 on success, else a message in err.
int lb_cublaslt_open(const char *path, char *err, size_t errlen);
lb_ltres lb_ltCreate(lb_handle *h);
lb_ltres lb_ltDestroy(lb_handle h);
const char *lb_ltStatusName(lb_ltres r);
const char *lb_ltStatusString(lb_ltres r);

// lb_lt_pick_bf16 asks cuBLASLt's heuristic for y [T, out] float32 =
// x [T, in] BF16 · w [out, in]ᵀ BF16 (float32 accumulation) with at most
// ws workspace bytes, and writes into algo (64 bytes) the first answer that
// computes each output in one pass over in (no split-K): *found is 0 when
// there is none.
lb_ltres lb_lt_pick_bf16(lb_handle h, int out, int in, int T, size_t ws, uint64_t *algo, int *found);

// lb_lt_gemm_bf16 runs that product with algo on stream (y, w, x device
// pointers; ws the workspace).
lb_ltres lb_lt_gemm_bf16(lb_handle h, lb_handle stream, lb_devptr y, lb_devptr w, lb_devptr x, int T, int out,
                         int in, const uint64_t *algo, lb_devptr ws, size_t wsbytes);

#endif
