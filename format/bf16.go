package format

import "math"

// BF16 (bfloat16) is the top half of a float32: 1 sign, 8 exponent and 7
// mantissa bits, bias 127. It has float32's range, infinities, NaNs and
// subnormals, so only the rounding of the mantissa can lose information.

// BF16FromFloat32 returns the BF16 bit pattern nearest to f, rounding ties to
// even. This is c10's BFloat16 round_to_nearest_even, torch's scalar cast:
//
//   - a finite value past the largest BF16 (bits 0x7F7F) rounds to ±Inf,
//     as IEEE rounding does; subnormals round like any other value;
//   - every NaN becomes 0x7FC0, the positive quiet NaN, whatever its sign and
//     payload.
//
// torch's vectorized CPU kernels agree on every non-NaN input but may encode
// NaN differently (0xFFFF, or the input's sign and top payload bits); code
// that compares BF16 output with torch's must compare NaNs as NaNs.
func BF16FromFloat32(f float32) uint16 {
	if f != f {
		return 0x7FC0
	}
	u := math.Float32bits(f)
	// Adding 0x7FFF rounds the dropped half up exactly when it exceeds one
	// half; adding the kept LSB as well makes an exact half round to even. A
	// carry out of the mantissa moves to the next exponent, and out of the
	// largest finite exponent to infinity, which is the IEEE result.
	return uint16((u + 0x7FFF + (u>>16)&1) >> 16)
}

// BF16ToFloat32 returns the float32 whose top half is b. It is exact, and it
// keeps a NaN's sign and payload.
func BF16ToFloat32(b uint16) float32 {
	return math.Float32frombits(uint32(b) << 16)
}

// RoundBF16 rounds f to the nearest BF16 value, ties to even, and returns it
// as a float32. torch evaluates BF16 arithmetic in float32 and rounds each
// result this way, so RoundBF16(a/b) is exactly torch's BF16 a/b.
func RoundBF16(f float32) float32 {
	return BF16ToFloat32(BF16FromFloat32(f))
}

// RoundTo rounds f to the nearest value of the floating-point type d (F32,
// BF16 or F16), ties to even, and returns it as a float32. It is how the
// block helpers reproduce a computation that torch carries out in d.
// RoundTo panics for any other d.
func RoundTo(d DType, f float32) float32 {
	switch d {
	case F32:
		return f
	case BF16:
		return RoundBF16(f)
	case F16:
		return F16ToFloat32(F16FromFloat32(f))
	}
	panic("format: RoundTo: " + d.String() + " is not F32, BF16 or F16")
}

// Eps returns torch.finfo(d).eps, the gap between 1 and the next value of d:
// 2^-23 for F32, 2^-7 for BF16, 2^-10 for F16, 2^-3 for F8E4M3 and 2^-2 for
// F8E5M2. compressed-tensors replaces a zero scale with the eps of the scale's
// dtype. Eps panics for any other d.
func Eps(d DType) float32 {
	switch d {
	case F32:
		return 0x1p-23
	case BF16:
		return 0x1p-7
	case F16:
		return 0x1p-10
	case F8E4M3:
		return 0x1p-3
	case F8E5M2:
		return 0x1p-2
	}
	panic("format: Eps: no eps for " + d.String())
}
