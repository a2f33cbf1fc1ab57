//go:build cgo

package cpu

// #include "lbcpu.h"
import "C"

import "unsafe"

// roundMinifloat sets dst[i] to src[i] rounded to E4M3 (kind 0, saturating)
// or E2M1 (kind 1) by the activation quantizer of the named code path. It
// exists for the tests, which cannot use cgo themselves.
func roundMinifloat(isa string, kind int, dst, src []float32) {
	id, ok := isaID(isa)
	if !ok || len(dst) < len(src) {
		panic("cpu: roundMinifloat: bad arguments")
	}
	C.lb_round_minifloat(C.int(id), C.int(kind), fp(dst), fp(src), C.int64_t(len(src)))
}

// setVBMI turns the VBMI variant of the AVX-512 FP8 MatMul on or off, so
// that tests on a VBMI CPU also cover the plain AVX-512 one.
func setVBMI(on bool) {
	v := 0
	if on {
		v = 1
	}
	C.lb_set_vbmi(C.int(v))
}

// hasVBMI reports whether the AVX-512 FP8 MatMul runs its VBMI variant.
func hasVBMI() bool { return C.lb_vbmi() != 0 }

// setBF16Dot turns the AVX512_BF16 variant of the FP8 MatMul (FP8
// activations on a VBMI CPU) on or off.
func setBF16Dot(on bool) {
	v := 0
	if on {
		v = 1
	}
	C.lb_set_bf16dot(C.int(v))
}

// hasBF16Dot reports whether the FP8 MatMul can run its AVX512_BF16 variant.
func hasBF16Dot() bool { return C.lb_bf16dot() != 0 }

// kvDecode writes len(dst) elements of a BF16 (dtype 1) or E4M3 (dtype 2,
// each value times sc) cache row src as float32 by the attention's row
// decode of the named code path.
func kvDecode(isa string, dtype int, dst []float32, src []byte, sc float32) {
	id, ok := isaID(isa)
	if !ok || len(src) < len(dst)*map[int]int{1: 2, 2: 1}[dtype] {
		panic("cpu: kvDecode: bad arguments")
	}
	C.lb_kv_decode(C.int(id), C.int(dtype), fp(dst), (*C.uint8_t)(unsafe.Pointer(unsafe.SliceData(src))), C.int64_t(len(dst)), C.float(sc))
}

// expRun sets dst[i] = exp(src[i]) by the kernels' own exp on the named
// code path (its vector lanes where the path has them).
func expRun(isa string, dst, src []float32) {
	id, ok := isaID(isa)
	if !ok || len(dst) < len(src) {
		panic("cpu: expRun: bad arguments")
	}
	C.lb_exp_run(C.int(id), fp(dst), fp(src), C.int64_t(len(src)))
}
