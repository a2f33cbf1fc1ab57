// Package cuda is the CUDA backend: it loads the driver API and NVRTC at
// run time (dlopen; the binary builds with plain gcc and needs no CUDA
// toolkit), compiles the kernel sources embedded from cu/ for the device's
// architecture (sm_90a on Hopper) and caches the result on disk keyed by
// the source, the options, the NVRTC and driver versions and the
// architecture, so that a warm start compiles nothing.
//
// Every CUresult and nvrtcResult goes through one function (check in
// errors.go) that names the call and the error. Nothing touches a device
// at import: Open does, and on a machine without a GPU or without the
// libraries it returns an error that says so, which callers turn into the
// CPU backend.
//
// BF16 weights with float32 activations run on the tensor cores
// (cu/matmul_mma.cu): UploadWeight stores them in mma tiles, activations
// are carried as three BF16 terms so the products are float32's, and one
// reduction order shared by the decode GEMV and the prefill GEMM keeps
// results batch invariant. Other weight formats run on CUDA cores
// (cu/matmul.cu). Attention runs on the tensor cores too
// (cu/attention_mma.cu, for head dims 16 to 128): its context is cut into
// 64-position chunks at fixed positions that fold in order, so a prefill
// block that runs a whole context and a decode step whose chunks are
// spread over blocks and merged give the same bits (PlanAttention picks
// the mode; other shapes take cu/attention.cu). scripts/cuda_compile_check.sh
// compiles the kernels with a local nvcc, where one is installed, to read
// registers and spills without a GPU.
//
// Ops implements kernels.Ops on host slices by copying inputs to the device,
// launching the kernels and copying the results back. It is how the shared
// conformance suite (kernels/kerneltest) checks the same CUDA kernels that
// a device-resident forward launches; it is not a fast path.
//
// The CUDA context is current per OS thread, so every call into the driver
// runs on a locked OS thread with the Device's context made current first
// (Device.do).
package cuda
