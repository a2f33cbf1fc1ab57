package format

import "math"

// The block helpers below are the scalar reference for the quantizers: plain
// loops that state each formula once, with its source. They follow
// compressed-tensors (CT), whose output vLLM loads; see formats.md §1 and §6.
//
// CT computes scales from observer statistics held in the weight's dtype, so
// several intermediate results are rounded to BF16 when the checkpoint is
// BF16. The compute argument says which: BF16 reproduces CT on BF16 weights
// bit for bit (including the rounding of x/s to BF16 that CT's torch path
// does before the final cast; testdata/golden/formats.json pins this against
// CT's formulas evaluated by torch), and F32 evaluates each formula once,
// correctly rounded to float32, with no BF16 anywhere: the exact-arithmetic
// reference, which is not what CT does on float32 weights. Any other compute
// dtype panics.

// Block sizes.
const (
	NVFP4BlockSize = 16  // elements sharing one E4M3 scale in NVFP4
	FP8BlockSize   = 128 // side of the square weight blocks of FP8_BLOCK, and the activation group
	MXBlockSize    = 32  // elements sharing one E8M0 scale in OCP MXFP4/MXFP8
)

// E4M3ScaleEps is the value CT substitutes for an E4M3 scale that is zero
// (torch.finfo(float8_e4m3fn).eps); e4m3EpsCode is its code.
const (
	E4M3ScaleEps = 0.125
	e4m3EpsCode  = 0x20
)

// float32Tiny is torch.finfo(torch.float32).tiny, the smallest normal float32.
const float32Tiny = 0x1p-126

// checkCompute panics unless d is a compute dtype the block helpers support.
func checkCompute(fn string, d DType) {
	if d != F32 && d != BF16 {
		panic("format: " + fn + ": compute dtype must be F32 or BF16, not " + d.String())
	}
}

// AbsMax returns the largest |x| in xs, or 0 for an empty slice. A NaN
// anywhere makes the result NaN, as torch.amax does, so that a corrupt block
// yields a NaN scale instead of quantizing silently as if it were finite.
func AbsMax(xs []float32) float32 {
	var m float32
	for _, x := range xs {
		a := math.Float32frombits(math.Float32bits(x) &^ signBit32)
		if a != a {
			return a
		}
		m = max(m, a)
	}
	return m
}

// FP8Scale returns CT's symmetric FP8 scale for a row, block or tensor whose
// largest |w| is amax (calculate_qparams): amax / 448, evaluated in compute,
// with a zero result replaced by Eps(compute) so that w / scale is defined.
// FP8 scales are stored in the weight's dtype and are not rounded further.
func FP8Scale(amax float32, compute DType) float32 {
	checkCompute("FP8Scale", compute)
	s := RoundTo(compute, amax/E4M3Max)
	if s == 0 {
		s = Eps(compute)
	}
	return s
}

// QuantizeE4M3 writes dst[i] = E4M3(clamp(src[i] / scale, -448, 448)), CT's
// FP8 weight formula, with the quotient rounded to compute first (CT divides
// two BF16 tensors, which rounds to BF16 before the FP8 cast). It panics
// unless len(dst) == len(src).
func QuantizeE4M3(dst []uint8, src []float32, scale float32, compute DType) {
	checkCompute("QuantizeE4M3", compute)
	if len(dst) != len(src) {
		panic("format: QuantizeE4M3: len(dst) != len(src)")
	}
	for i, x := range src {
		dst[i] = E4M3FromFloat32(RoundTo(compute, x/scale))
	}
}

// DequantizeE4M3 writes dst[i] = E4M3ToFloat32(src[i]) * scale, exactly as
// float32 computes it. (CT multiplies in the scale's dtype; for a BF16 scale
// its result is RoundBF16 of this one.) It panics unless len(dst) ==
// len(src).
func DequantizeE4M3(dst []float32, src []uint8, scale float32) {
	if len(dst) != len(src) {
		panic("format: DequantizeE4M3: len(dst) != len(src)")
	}
	for i, c := range src {
		dst[i] = E4M3ToFloat32(c) * scale
	}
}

// NVFP4GlobalScale returns CT's NVFP4 per-tensor global scale for a tensor
// whose largest |w| is amax (generate_gparam): 448 * 6 / amax, with amax
// clamped to at least float32's smallest normal, stored as float32. It is a
// multiplier, not a divisor: the element scale is blockScale / globalScale.
// A NaN or infinite amax (an uncalibrated tensor) gives 1, the value
// formats.md §1.c records for that case.
//
// CT writes the quotient as 2688 / amax with amax a tensor, and torch
// evaluates a scalar divided by a tensor as amax.reciprocal() * 2688 (Python's
// Tensor.__rtruediv__), rounding twice. With compute BF16 this function does
// the same, RoundBF16(RoundBF16(1/amax) * 2688), which agrees with torch on
// every BF16 amax; the single division differs for about a quarter of them.
// With compute F32 it returns the correctly rounded float32 quotient.
func NVFP4GlobalScale(amax float32, compute DType) float32 {
	checkCompute("NVFP4GlobalScale", compute)
	if amax != amax || math.IsInf(float64(amax), 0) {
		return 1
	}
	amax = max(amax, float32Tiny)
	if compute == F32 {
		return E4M3Max * E2M1Max / amax
	}
	return RoundTo(compute, RoundTo(compute, 1/amax)*(E4M3Max*E2M1Max))
}

// NVFP4BlockScale returns the E4M3 code of CT's scale for one NVFP4 block
// whose largest |w| is blockAmax (calculate_qparams with a global scale):
//
//	local = blockAmax / 6                  (evaluated in compute)
//	scale = globalScale * local            (float32)
//	code  = E4M3(clamp(scale, -448, 448))  (round to nearest even)
//
// and a code of ±0 is replaced by the code of 0.125 (E4M3ScaleEps), which
// also catches scales that underflowed in FP8. With the global scale above,
// scale = 448 * blockAmax / amax lies in [0, 448].
func NVFP4BlockScale(blockAmax, globalScale float32, compute DType) uint8 {
	checkCompute("NVFP4BlockScale", compute)
	local := RoundTo(compute, blockAmax/E2M1Max)
	code := E4M3FromFloat32(globalScale * local)
	if code&0x7F == 0 {
		code = e4m3EpsCode
	}
	return code
}

// QuantizeNVFP4Block quantizes one block of at most 16 weights x into E2M1
// codes (one per byte, unpacked) and returns the block's E4M3 scale code,
// following CT's NVFP4 forward pass:
//
//	scaleCode = NVFP4BlockScale(AbsMax(x), globalScale, compute)
//	s         = E4M3ToFloat32(scaleCode) / globalScale   (float32)
//	codes[i]  = E2M1(clamp(x[i] / s, -6, 6))             (x[i]/s in float32)
//
// With compute BF16, x must hold BF16 values widened to float32, as CT's
// observers see them. A NaN in x gives the NaN scale code, and the block then
// dequantizes to NaN. It panics unless len(codes) == len(x) and 1 <= len(x)
// <= 16.
func QuantizeNVFP4Block(codes []uint8, x []float32, globalScale float32, compute DType) (scaleCode uint8) {
	checkCompute("QuantizeNVFP4Block", compute)
	if len(x) == 0 || len(x) > NVFP4BlockSize || len(codes) != len(x) {
		panic("format: QuantizeNVFP4Block: need len(codes) == len(x) in [1, 16]")
	}
	scaleCode = NVFP4BlockScale(AbsMax(x), globalScale, compute)
	s := E4M3ToFloat32(scaleCode) / globalScale
	for i, v := range x {
		// Released compressed-tensors (ac8e2ba) thresholds the float32
		// quotient; a BF16 cast before cast_to_fp4 existed only on a
		// development branch (#774-#820).
		codes[i] = E2M1FromFloat32(v / s)
	}
	return scaleCode
}

// DequantizeNVFP4Block writes dst[i] = E2M1ToFloat32(codes[i]) * s, with
// s = E4M3ToFloat32(scaleCode) / globalScale in float32, CT's dequantization
// (and vLLM's: w ≈ q * weight_scale / weight_global_scale). It panics unless
// len(dst) == len(codes).
func DequantizeNVFP4Block(dst []float32, codes []uint8, scaleCode uint8, globalScale float32) {
	if len(dst) != len(codes) {
		panic("format: DequantizeNVFP4Block: len(dst) != len(codes)")
	}
	s := E4M3ToFloat32(scaleCode) / globalScale
	for i, c := range codes {
		dst[i] = E2M1ToFloat32(c) * s
	}
}

// QuantizeNVFP4Row quantizes one weight row, as CT lays it out on disk:
// packed gets the E2M1 codes two per byte (PackE2M1: element 2i in the low
// nibble) and scales one E4M3 code per 16 consecutive elements, each block
// quantized by QuantizeNVFP4Block. It panics unless len(row) is a multiple
// of 16, len(packed) == len(row)/2 and len(scales) == len(row)/16.
func QuantizeNVFP4Row(packed []byte, scales []uint8, row []float32, globalScale float32, compute DType) {
	n := len(row)
	if n%NVFP4BlockSize != 0 || len(packed) != n/2 || len(scales) != n/NVFP4BlockSize {
		panic("format: QuantizeNVFP4Row: need len(row) % 16 == 0, len(packed) == len(row)/2, len(scales) == len(row)/16")
	}
	var codes [NVFP4BlockSize]uint8
	for b := range scales {
		block := row[b*NVFP4BlockSize : (b+1)*NVFP4BlockSize]
		scales[b] = QuantizeNVFP4Block(codes[:], block, globalScale, compute)
		PackE2M1(packed[b*NVFP4BlockSize/2:(b+1)*NVFP4BlockSize/2], codes[:])
	}
}

// DequantizeNVFP4Row is the inverse of QuantizeNVFP4Row up to rounding: it
// unpacks each block and dequantizes it with DequantizeNVFP4Block. It panics
// unless len(dst) is a multiple of 16, len(packed) == len(dst)/2 and
// len(scales) == len(dst)/16.
func DequantizeNVFP4Row(dst []float32, packed []byte, scales []uint8, globalScale float32) {
	n := len(dst)
	if n%NVFP4BlockSize != 0 || len(packed) != n/2 || len(scales) != n/NVFP4BlockSize {
		panic("format: DequantizeNVFP4Row: need len(dst) % 16 == 0, len(packed) == len(dst)/2, len(scales) == len(dst)/16")
	}
	var codes [NVFP4BlockSize]uint8
	for b, sc := range scales {
		UnpackE2M1(codes[:], packed[b*NVFP4BlockSize/2:(b+1)*NVFP4BlockSize/2])
		DequantizeNVFP4Block(dst[b*NVFP4BlockSize:(b+1)*NVFP4BlockSize], codes[:], sc, globalScale)
	}
}
