package format

import "math"

// FP8 E4M3FN ("fn": finite, with NaN) has 1 sign, 4 exponent and 3 mantissa
// bits, bias 7. It has no infinities, and its only NaNs are S.1111.111 (0x7F
// and 0xFF), which frees exponent field 15 for finite values: the largest is
// 0x7E = 1.75 * 2^8 = 448. The smallest normal is 0x08 = 2^-6; subnormals
// are m * 2^-9 (0x01 = 2^-9, 0x07 = 7 * 2^-9).
//
// FP8 E5M2 has 1 sign, 5 exponent and 2 mantissa bits, bias 15, and follows
// IEEE 754 conventions: 0x7C is +Inf, 0x7D..0x7F are NaNs, the largest finite
// value is 0x7B = 57344, the smallest normal 0x04 = 2^-14 and the smallest
// subnormal 0x01 = 2^-16. It is F16 with the low mantissa byte dropped.

// FP8 limits.
const (
	E4M3Max = 448   // largest finite E4M3FN value, code 0x7E
	E5M2Max = 57344 // largest finite E5M2 value, code 0x7B

	// e4m3NaN is the positive E4M3FN NaN; 0xFF is the negative one.
	e4m3NaN = 0x7F
)

// Float32 bit patterns of 448, and of 480: the value code 0x7F would have if
// it were not NaN, from which on torch's cast gives NaN.
var (
	e4m3MaxBits  = math.Float32bits(E4M3Max)
	e4m3NaNBound = math.Float32bits(480)
)

// E4M3FromFloat32 returns the E4M3FN code nearest to f after clamping f to
// [-448, 448], rounding ties to even, subnormals included. This is the
// saturating cast that quantizers use: compressed-tensors writes
// torch.clamp(x, -448, 448).to(torch.float8_e4m3fn), and ModelOpt clamps the
// same way, so a finite input never becomes NaN:
//
//   - |f| > 448, ±Inf included, gives ±448 (0x7E / 0xFE);
//   - NaN gives the NaN code with f's sign (0x7F / 0xFF);
//   - -0 gives 0x80, and negatives that round to zero keep their sign.
//
// For torch's own unclamped cast use E4M3FromFloat32Torch.
func E4M3FromFloat32(f float32) uint8 {
	neg, a := splitSign(f)
	sign := uint8(neg << 7)
	if a > f32inf {
		return sign | e4m3NaN
	}
	// Comparing bit patterns orders non-negative floats, Inf included.
	return sign | uint8(e4m3Format.roundMagnitude(min(a, e4m3MaxBits)))
}

// E4M3FromFloat32Torch returns the E4M3FN code that torch's CPU cast
// tensor.to(torch.float8_e4m3fn) produces for f (c10
// fp8e4m3fn_from_fp32_value, which the AVX-512 kernels mirror). It rounds to
// nearest even, subnormals included, and does not saturate:
//
//   - |f| <= 464 rounds to a finite code; 464, the midpoint between 448 and
//     the NaN code's would-be value 480, is a tie that goes to the even 448;
//   - 464 < |f| < 480 rounds up onto code 0x7F, which is NaN;
//   - |f| >= 480, ±Inf and NaN all give NaN, 0x7F or 0xFF by f's sign bit.
//
// (So the often-quoted "values in (448, 480) round to 448" holds only up to
// 464.) testdata/golden/formats.json pins this against torch 2.11's CPU cast.
// Its CUDA cast gave the same codes for 464, 470, 480, 1e9, ±Inf and NaN on
// an H200, although a third-party note claims the CUDA cast saturates; code
// that needs saturation calls E4M3FromFloat32 and does not rely on either.
func E4M3FromFloat32Torch(f float32) uint8 {
	neg, a := splitSign(f)
	sign := uint8(neg << 7)
	if a >= e4m3NaNBound { // also true for Inf and every NaN
		return sign | e4m3NaN
	}
	// Below 480 the code is at most 0x7F, the NaN, which is what c10 yields.
	return sign | uint8(e4m3Format.roundMagnitude(a))
}

// E4M3ToFloat32 returns the value of E4M3FN code c. It is exact; 0x7F and
// 0xFF decode to a quiet NaN with c's sign.
func E4M3ToFloat32(c uint8) float32 { return e4m3Values[c] }

// E4M3IsNaN reports whether c is one of E4M3FN's two NaN codes.
func E4M3IsNaN(c uint8) bool { return c&0x7F == e4m3NaN }

// E5M2FromFloat32 returns the E5M2 code nearest to f, rounding ties to even,
// subnormals included, as torch's cast tensor.to(torch.float8_e5m2) does (c10
// fp8e5m2_from_fp32_value). Overflow follows IEEE 754:
//
//   - |f| >= 61440, the midpoint between 57344 and 2^16, gives ±Inf (0x7C /
//     0xFC); ±Inf stays ±Inf;
//   - NaN gives 0x7F with f's sign (0x7F / 0xFF).
func E5M2FromFloat32(f float32) uint8 {
	neg, a := splitSign(f)
	sign := uint8(neg << 7)
	switch {
	case a > f32inf:
		return sign | 0x7F
	case a == f32inf:
		return sign | 0x7C
	}
	// 0x7C is +Inf: everything that rounds to it or past it overflows.
	return sign | uint8(min(e5m2Format.roundMagnitude(a), 0x7C))
}

// E5M2ToFloat32 returns the value of E5M2 code c. It is exact; 0x7C/0xFC
// decode to ±Inf and 0x7D..0x7F, 0xFD..0xFF to a quiet NaN with c's sign.
func E5M2ToFloat32(c uint8) float32 { return e5m2Values[c] }

// E5M2IsNaN reports whether c is one of E5M2's NaN codes.
func E5M2IsNaN(c uint8) bool { return c&0x7F > 0x7C }

// The decode tables, built once from the field definitions.
var (
	e4m3Values = decodeTable(func(neg, mag uint32) float32 {
		if mag == e4m3NaN {
			return quietNaN32(neg)
		}
		return withSign(neg, e4m3Format.value(mag))
	})
	e5m2Values = decodeTable(func(neg, mag uint32) float32 {
		switch {
		case mag > 0x7C:
			return quietNaN32(neg)
		case mag == 0x7C:
			return float32(math.Inf(1 - 2*int(neg)))
		}
		return withSign(neg, e5m2Format.value(mag))
	})
)

// decodeTable tabulates an 8-bit format with a sign bit at bit 7.
func decodeTable(decode func(neg, mag uint32) float32) (t [256]float32) {
	for c := range t {
		t[c] = decode(uint32(c)>>7, uint32(c)&0x7F)
	}
	return t
}

// withSign returns v (>= 0) negated when neg is 1; -0 stays distinct from +0.
func withSign(neg uint32, v float32) float32 {
	return math.Float32frombits(math.Float32bits(v) | neg<<31)
}
