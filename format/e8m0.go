package format

import "math"

// E8M0 (torch.float8_e8m0fnu, the OCP MX scale type) is an unsigned biased
// exponent and nothing else: code c stands for 2^(c-127), so codes 0..254
// cover 2^-127..2^127, and 0xFF is NaN. There is no sign, no zero and no
// infinity. Code 0, 2^-127, is a float32 subnormal.

// E8M0NaN is E8M0's only NaN code.
const E8M0NaN = 0xFF

// E8M0ToFloat32 returns 2^(c-127), or NaN for c == 0xFF. It is exact.
func E8M0ToFloat32(c uint8) float32 {
	switch c {
	case E8M0NaN:
		return float32(math.NaN())
	case 0:
		return math.Float32frombits(0x00400000) // 2^-127, subnormal
	}
	return math.Float32frombits(uint32(c) << 23)
}

// E8M0FromExp returns the code of 2^exp. It panics unless -127 <= exp <= 127:
// an exponent out of range is a programming error in the caller's scale
// computation.
func E8M0FromExp(exp int) uint8 {
	if exp < -127 || exp > 127 {
		panic("format: E8M0FromExp: exponent out of range [-127, 127]")
	}
	return uint8(exp + 127)
}

// E8M0FromPowerOfTwo returns the code of f and true when f is exactly 2^k
// for some k in [-127, 127], and 0, false for any other f, negative values,
// zero, infinities and NaN included.
func E8M0FromPowerOfTwo(f float32) (uint8, bool) {
	u := math.Float32bits(f)
	switch {
	case u == 0x00400000: // 2^-127, the one subnormal that is a code
		return 0, true
	case u>>23 == 0 || u>>23 >= 0xFF: // zero, other subnormals, Inf, NaN, negatives
		return 0, false
	case u&0x7FFFFF != 0: // not a power of two
		return 0, false
	}
	return uint8(u >> 23), true
}

// E8M0FromFloat32 returns the E8M0 code that torch's cast
// tensor.to(torch.float8_e8m0fnu) produces for f (c10
// fp8e8m0fnu_from_fp32_value). It keeps f's exponent field and rounds on the
// mantissa alone, so the rounding point between 2^e and 2^(e+1) is their
// arithmetic midpoint 1.5 * 2^e, not the geometric one:
//
//   - the sign is ignored: f and -f give the same code;
//   - a normal f = (1+m) * 2^e gives 2^e for m < 0.5 and 2^(e+1) for
//     m >= 0.5 (the exact midpoint rounds up: c10 counts the implicit
//     leading 1 as an odd LSB);
//   - zero and subnormals up to 2^-127 give code 0 (2^-127); subnormals
//     above 2^-127 give code 1 (2^-126);
//   - |f| >= 1.5 * 2^127, ±Inf and NaN give 0xFF (NaN).
//
// Quantizers usually want a rule of their own instead: E8M0Ceil gives the
// smallest scale that is not below f.
func E8M0FromFloat32(f float32) uint8 {
	u := math.Float32bits(f)
	exp := (u >> 23) & 0xFF
	if exp == 0xFF {
		return E8M0NaN
	}
	mant := u & 0x7FFFFF
	const half = 0x400000 // mantissa 0.5
	if mant > half || (mant == half && exp > 0) {
		exp++ // 254 becomes 255, NaN: c10 does the same
	}
	return uint8(exp)
}

// E8M0Ceil returns the code of the smallest power of two 2^k >= |f|, the
// "round up" scale rule: dividing a block by 2^k then never pushes its
// largest element past the element format's limit. Values up to 2^-127,
// zero included, give code 0; |f| > 2^127, ±Inf and NaN give 0xFF (NaN),
// since no E8M0 value is large enough.
//
// The OCP MX specification itself takes the floor instead (shared exponent =
// floor(log2(amax)) - emax of the element type), and compressed-tensors
// rounds amax to the nearest power of two first; both are built from
// E8M0FromExp and math.Frexp by the quantizer that chooses them.
func E8M0Ceil(f float32) uint8 {
	u := math.Float32bits(f) &^ signBit32
	switch {
	case u > 0x7F000000: // above 2^127 (bits 0x7F000000), Inf and NaN too
		return E8M0NaN
	case u <= 0x00400000: // at most 2^-127
		return 0
	case u < 0x00800000: // a subnormal above 2^-127: 2^-126 covers it
		return 1
	}
	exp := u >> 23
	if u&0x7FFFFF != 0 {
		exp++
	}
	return uint8(exp)
}
