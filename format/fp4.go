package format

import "math"

// FP4 E2M1 has 1 sign, 2 exponent and 1 mantissa bit, bias 1, and no
// infinities or NaNs. A code is 4 bits: bit 3 is the sign and bits 0-2 index
// the magnitudes
//
//	code  0    1    2    3    4    5    6    7
//	value 0    0.5  1    1.5  2    3    4    6
//
// so codes 8-15 are their negatives and 8 is -0. This is the element type of
// NVFP4 and MXFP4; compressed-tensors documents the same table
// (quant_args.py FP4_E2M1_DATA).

// E2M1Max is the largest E2M1 magnitude, code 7.
const E2M1Max = 6

// E2M1FromFloat32 returns the E2M1 code (0-15) nearest to f after clamping f
// to [-6, 6], rounding ties to the even code (the one whose mantissa bit, bit
// 0, is clear). On |f| that gives the thresholds compressed-tensors and vLLM
// use (fp4_utils.py, nvfp4_emulation_utils.py):
//
//	[0, 0.25] -> 0     (0.25, 0.75) -> 0.5   [0.75, 1.25] -> 1   (1.25, 1.75) -> 1.5
//	[1.75, 2.5] -> 2   (2.5, 3.5) -> 3       [3.5, 5] -> 4       (5, +Inf] -> 6
//
// The sign is taken from f's sign bit, so -0 and negatives that round to zero
// give code 8, as compressed-tensors' packer stores them (ModelOpt stores
// +0; both decode to zero).
//
// NaN has no E2M1 code, and the reference quantizers define none (every
// comparison in compressed-tensors' threshold chain is false for NaN). This
// function maps NaN to zero with f's sign, code 0 or 8, so a NaN input can
// never pose as a large value; a quantizer that must notice NaNs checks its
// block's AbsMax (which propagates NaN) before encoding.
//
// Note that compressed-tensors' torch path first rounds its input to BF16;
// QuantizeNVFP4Block reproduces that double rounding when asked to.
func E2M1FromFloat32(f float32) uint8 {
	neg, a := splitSign(f)
	sign := uint8(neg << 3)
	if a > f32inf {
		return sign
	}
	return sign | uint8(e2m1Format.roundMagnitude(min(a, e2m1MaxBits)))
}

var e2m1MaxBits = math.Float32bits(E2M1Max)

// E2M1ToFloat32 returns the value of the E2M1 code c (its low 4 bits; higher
// bits are ignored). Code 8 decodes to -0.
func E2M1ToFloat32(c uint8) float32 { return e2m1Values[c&0xF] }

var e2m1Values = func() (t [16]float32) {
	for c := range t {
		t[c] = withSign(uint32(c)>>3, e2m1Format.value(uint32(c)&7))
	}
	return t
}()

// PackE2M1 packs pairs of E2M1 codes into bytes, the on-disk layout of
// compressed-tensors' nvfp4-pack-quantized weight_packed (and of torch's
// float4_e2m1fn_x2): codes[2i] goes into the low nibble of dst[i] and
// codes[2i+1] into its high nibble. Pairs run along the row, the tensor's
// last dimension, so a row of n codes becomes n/2 bytes.
//
// PackE2M1 panics unless len(codes) is even and len(dst) == len(codes)/2,
// or if a code does not fit in 4 bits: those are programming errors.
func PackE2M1(dst []byte, codes []uint8) {
	if len(codes)%2 != 0 {
		panic("format: PackE2M1: odd number of codes")
	}
	if len(dst) != len(codes)/2 {
		panic("format: PackE2M1: len(dst) must be len(codes)/2")
	}
	for i := range dst {
		lo, hi := codes[2*i], codes[2*i+1]
		if lo|hi > 0xF {
			panic("format: PackE2M1: code does not fit in 4 bits")
		}
		dst[i] = lo | hi<<4
	}
}

// UnpackE2M1 is the inverse of PackE2M1: dst[2i] is the low nibble of src[i]
// and dst[2i+1] its high nibble. It panics unless len(dst) == 2*len(src).
func UnpackE2M1(dst []uint8, src []byte) {
	if len(dst) != 2*len(src) {
		panic("format: UnpackE2M1: len(dst) must be 2*len(src)")
	}
	for i, b := range src {
		dst[2*i] = b & 0xF
		dst[2*i+1] = b >> 4
	}
}
