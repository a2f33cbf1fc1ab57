package format

import "math"

// This file holds the one rounding routine that every narrow float format in
// the package shares. Each format then adds only its own special cases (NaN,
// infinity, overflow), which is where the formats really differ.

// miniFloat describes a binary floating-point format narrower than float32 by
// the two numbers that fix its finite values: the stored mantissa width and
// the exponent bias. Biased exponent 0 holds the subnormals, as in IEEE 754.
// Which codes at the top of the range are infinities or NaNs is not part of
// the description; the callers handle that.
type miniFloat struct {
	manBits uint // stored mantissa bits
	bias    int  // exponent bias
}

// The formats, by field widths. BF16 is not among them: it shares float32's
// exponent, so c10's one-line rounding formula (bf16.go) covers it.
var (
	f16Format  = miniFloat{manBits: 10, bias: 15}
	e4m3Format = miniFloat{manBits: 3, bias: 7}
	e5m2Format = miniFloat{manBits: 2, bias: 15}
	e2m1Format = miniFloat{manBits: 1, bias: 1}
)

// roundMagnitude rounds the finite, non-negative float32 whose bit pattern is
// a (sign bit clear) to the nearest value of mf, ties to the even mantissa,
// and returns that value's magnitude code: exponent field and mantissa field
// packed as exponent<<manBits | mantissa.
//
// The exponent range is treated as unbounded above: a value beyond the
// largest finite code yields a larger code, even one whose exponent field no
// longer fits. Every format treats overflow differently (saturate, infinity,
// NaN), so the caller compares the result with its own limit.
//
// Subnormals need no special case: below the smallest normal exponent the
// quantum stays fixed, and a rounding that carries out of the mantissa field
// lands on the next exponent because the code is built by addition.
func (mf miniFloat) roundMagnitude(a uint32) uint32 {
	exp32 := int(a >> 23) // float32 biased exponent field
	sig := uint64(a & 0x7FFFFF)
	lsbExp := exp32 - 150 // a == sig * 2^lsbExp
	if exp32 == 0 {
		lsbExp = -149 // float32 subnormal: no implicit bit, fixed exponent
	} else {
		sig |= 1 << 23
	}

	// The target's biased exponent for this value. Everything below the
	// smallest normal shares biased exponent 1's quantum (the subnormals).
	be := max(exp32-127+mf.bias, 1)
	// The target's quantum (its ulp) at that exponent is 2^quantumExp.
	quantumExp := be - mf.bias - int(mf.manBits)

	// n is the value in quanta, rounded to nearest, ties to even. The shift is
	// always positive: every format here has fewer mantissa bits than float32.
	n := shiftRoundEven(sig, quantumExp-lsbExp)

	// For be == 1, n counts from 0 and reaches 1<<manBits exactly at the
	// smallest normal, where the exponent field becomes 1: the sum below
	// makes the subnormal/normal boundary and every carry come out right.
	return uint32(be-1)<<mf.manBits + uint32(n)
}

// shiftRoundEven returns x / 2^s rounded to the nearest integer, ties to even.
// s must be positive.
func shiftRoundEven(x uint64, s int) uint64 {
	if s > 40 {
		// x < 2^24 < 2^(s-1): less than half a quantum, so it rounds to 0.
		return 0
	}
	n := x >> s
	rem := x & (1<<s - 1)
	half := uint64(1) << (s - 1)
	if rem > half || (rem == half && n&1 == 1) {
		n++
	}
	return n
}

// value returns the finite value of magnitude code mag, ignoring any special
// meaning the format gives to its top codes. It is exact: every value of
// these formats is a float32.
func (mf miniFloat) value(mag uint32) float32 {
	e := int(mag >> mf.manBits)
	m := mag & (1<<mf.manBits - 1)
	if e == 0 {
		return float32(math.Ldexp(float64(m), 1-mf.bias-int(mf.manBits)))
	}
	return float32(math.Ldexp(float64(m|1<<mf.manBits), e-mf.bias-int(mf.manBits)))
}

// signBit32 is float32's sign bit.
const signBit32 = 0x80000000

// f32inf is the bit pattern of float32 +Inf; any larger magnitude is a NaN.
const f32inf = 0x7F800000

// splitSign returns the sign bit of f (0 or 1) and the bits of |f|.
func splitSign(f float32) (neg uint32, abs uint32) {
	u := math.Float32bits(f)
	return u >> 31, u &^ signBit32
}

// quietNaN32 returns a quiet float32 NaN with the given sign (0 or 1). The
// decoders return it for every NaN code, so a decoded NaN keeps its sign.
func quietNaN32(neg uint32) float32 {
	return math.Float32frombits(neg<<31 | 0x7FC00000)
}
