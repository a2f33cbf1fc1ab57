package format

import "math"

// F16 is IEEE 754 binary16 ("half"): 1 sign, 5 exponent and 10 mantissa bits,
// bias 15. Largest finite 65504 (0x7BFF), smallest normal 2^-14 (0x0400),
// smallest subnormal 2^-24 (0x0001); exponent field 31 holds ±Inf (mantissa
// 0) and NaNs.

// F16FromFloat32 returns the F16 bit pattern nearest to f, rounding ties to
// even, as torch's cast does (c10 fp16_ieee_from_fp32_value, and the F16C
// instruction its vectorized kernels use):
//
//   - subnormal results are kept, not flushed to zero;
//   - |f| >= 65520, the midpoint between 65504 and 2^16, becomes ±Inf;
//   - ±Inf stays ±Inf; every NaN becomes the quiet NaN 0x7E00 with f's sign.
//
// Vectorized torch kernels may keep some NaN payload bits; compare NaNs as
// NaNs.
func F16FromFloat32(f float32) uint16 {
	neg, a := splitSign(f)
	sign := uint16(neg << 15)
	switch {
	case a > f32inf:
		return sign | 0x7E00
	case a == f32inf:
		return sign | 0x7C00
	}
	mag := f16Format.roundMagnitude(a)
	// 0x7C00 is +Inf: everything that rounds to it or past it overflows.
	return sign | uint16(min(mag, 0x7C00))
}

// F16ToFloat32 returns the value of the F16 bit pattern h. It is exact;
// ±Inf decode to ±Inf and every NaN to a quiet NaN with h's sign.
func F16ToFloat32(h uint16) float32 {
	neg := uint32(h >> 15)
	mag := uint32(h & 0x7FFF)
	switch {
	case mag > 0x7C00:
		return quietNaN32(neg)
	case mag == 0x7C00:
		return float32(math.Inf(1 - 2*int(neg)))
	}
	return withSign(neg, f16Format.value(mag))
}
