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
// not turned it off for a test).
//
// AVX512_BF16 (vdpbf16ps) is deliberately not used: it multiplies BF16 by
// BF16, and the contract keeps activations in float32, so BF16 weights are
// widened to float32 (a 16-bit shift) and multiplied with float32 FMAs.
// FP8 activations are BF16 values exactly, but an FP8 MatMul on vdpbf16ps
// (two per 64 codes, no widening) streamed at 0.70-0.76 of the float32
// variant's rate on the 2-core VM (BENCHMARKS.md, 2026-12-02, issue 4).
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

int lb_vbmi(void) {
#ifdef LB_X86
	__builtin_cpu_init();
	return vbmi_on && __builtin_cpu_supports("avx512vbmi");
#else
	return 0;
#endif
}
