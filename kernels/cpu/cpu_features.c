//go:build cgo

// cpu_features.c: which code paths this CPU can run.
//
// Computes: lb_isa_supported(isa), 1 when the CPU and the OS support every
// instruction set the path is compiled for (target attributes in internal.h):
//   LB_ISA_AVX512   AVX-512 F, BW, VL and DQ (plus AVX2, FMA and F16C);
//   LB_ISA_AVX2     AVX2, FMA and F16C;
//   LB_ISA_GENERIC  always (plain C, also on non-x86 machines).
// gcc's __builtin_cpu_supports reads CPUID and checks through XGETBV that the
// OS saves the AVX and AVX-512 register state. lb_vbmi: whether the AVX-512
// path runs its VBMI variant (the CPU has AVX512_VBMI, and lb_set_vbmi has
// not turned it off for a test). lb_bf16dot: whether the VBMI variant of
// the FP8 MatMul multiplies FP8 activations with AVX512_BF16's vdpbf16ps
// (the CPU has it, and lb_set_bf16dot has not turned it off).
//
// vdpbf16ps multiplies BF16 by BF16, so it serves only where both sides
// are BF16 values exactly: E4M3 weights times FP8 activations. BF16
// weights meet float32 activations, which the contract keeps, and are
// widened to float32 (a 16-bit shift) for float32 FMAs. Where vdpbf16ps
// issues slowly the variant does not pay: on the 2-core Xeon VM of
// 2026-12-02 an FP8 MatMul on it streamed at 0.70-0.76 of the float32
// variant's rate; on the Zen 5 VM of 2026-12-03 it decoded 1.5 times as
// many weights a second from the caches (BENCHMARKS.md, issue 4).
//
// Tested by TestISAs and by every op test, which runs each supported path;
// the plain AVX-512 variants by TestConformanceWithoutVBMI and
// TestVBMIBitIdentical.
#include "internal.h"

int lb_isa_supported(int isa) {
	switch (isa) {
	case LB_ISA_GENERIC:
		return 1;
#ifdef LB_X86
	case LB_ISA_AVX2:
		__builtin_cpu_init();
		return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
		       __builtin_cpu_supports("f16c");
	case LB_ISA_AVX512:
		__builtin_cpu_init();
		return lb_isa_supported(LB_ISA_AVX2) && __builtin_cpu_supports("avx512f") &&
		       __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
		       __builtin_cpu_supports("avx512dq");
#endif
	}
	return 0;
}

static int vbmi_on = 1;

void lb_set_vbmi(int on) { vbmi_on = on; }

static int bf16dot_on = 1;

void lb_set_bf16dot(int on) { bf16dot_on = on; }

int lb_bf16dot(void) {
#ifdef LB_X86
	__builtin_cpu_init();
	return bf16dot_on && __builtin_cpu_supports("avx512bf16");
#else
	return 0;
#endif
}

int lb_vbmi(void) {
#ifdef LB_X86
	__builtin_cpu_init();
	return vbmi_on && __builtin_cpu_supports("avx512vbmi");
#else
	return 0;
#endif
}
