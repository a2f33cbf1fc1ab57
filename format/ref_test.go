package format

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

// Independent references for the encoders, written differently from the
// code under test: refRound scales by a power of two and calls
// math.RoundToEven in float64 (exact for float32 inputs), and bruteNearest
// searches every code of a format for the nearest value.

// refRound rounds x to the binary format with manBits stored mantissa bits
// and smallest normal exponent emin, ties to even, with no upper exponent
// limit. Below 2^emin the quantum stays 2^(emin-manBits): the subnormals.
func refRound(x float64, manBits, emin int) float64 {
	if x == 0 || math.IsInf(x, 0) || math.IsNaN(x) {
		return x
	}
	_, e := math.Frexp(math.Abs(x)) // |x| = frac * 2^e, frac in [0.5, 1)
	e = max(e-1, emin)
	quantum := math.Ldexp(1, e-manBits)
	return math.RoundToEven(x/quantum) * quantum
}

// bruteNearest returns the code among 0..maxMag (magnitudes, ascending in
// value) whose value is nearest to |x|, preferring the even code on a tie,
// with x's sign bit set at signBit. All codes up to maxMag must be finite.
// Distances are computed in float64. Callers first clamp x into the
// format's range (or handle larger inputs themselves); then a distance is
// inexact only when x is far below a candidate, where no tie is possible.
func bruteNearest(x float32, maxMag uint8, signBit uint8, value func(uint8) float32) uint8 {
	a := math.Abs(float64(x))
	best, bestDist := uint8(0), math.Inf(1)
	for c := uint8(0); c <= maxMag; c++ {
		d := math.Abs(float64(value(c)) - a)
		if d < bestDist || (d == bestDist && c&1 == 0) {
			best, bestDist = c, d
		}
	}
	if math.Signbit(float64(x)) {
		best |= signBit
	}
	return best
}

// randomFloat32s returns n float32s from a fixed seed: a third uniformly
// random bit patterns (NaNs, infinities and subnormals included), the rest
// with random sign and mantissa and an exponent drawn from [loExp, hiExp],
// which concentrates them on the range of the format under test.
func randomFloat32s(n int, loExp, hiExp int) []float32 {
	r := rand.New(rand.NewPCG(1, 2))
	out := make([]float32, n)
	for i := range out {
		if i%3 == 0 {
			out[i] = math.Float32frombits(r.Uint32())
			continue
		}
		e := loExp + r.IntN(hiExp-loExp+1)
		m := float32(1 + r.Float64())
		out[i] = float32(math.Ldexp(float64(m), e))
		if r.IntN(2) == 1 {
			out[i] = -out[i]
		}
	}
	return out
}

// nextUp and nextDown step a finite float32 one ulp away from / towards zero
// for positive values.
func nextUp(f float32) float32   { return math.Nextafter32(f, float32(math.Inf(1))) }
func nextDown(f float32) float32 { return math.Nextafter32(f, float32(math.Inf(-1))) }

// f32 builds a float32 from its bit pattern, for readable test tables.
func f32(bits uint32) float32 { return math.Float32frombits(bits) }

// nan32 is a quiet float32 NaN with the given sign bit.
func nan32(neg bool) float32 {
	if neg {
		return f32(0xFFC00000)
	}
	return f32(0x7FC00000)
}

// sameFloat reports whether a and b are the same float32, treating all NaNs
// as equal and +0 and -0 as different.
func sameFloat(a, b float32) bool {
	if a != a || b != b {
		return a != a && b != b
	}
	return math.Float32bits(a) == math.Float32bits(b)
}

// mustPanic runs fn and fails unless it panics with a "format: " message.
func mustPanic(t *testing.T, name string, fn func()) {
	t.Helper()
	defer func() {
		r := recover()
		if r == nil {
			t.Errorf("%s did not panic", name)
			return
		}
		msg, ok := r.(string)
		if !ok || !strings.HasPrefix(msg, "format: ") {
			t.Errorf("%s panicked with %v, want a \"format: ...\" message", name, r)
		}
	}()
	fn()
}

// TestRefRound pins the reference itself on a few hand-checked values, so
// that the tests built on it rest on something visible.
func TestRefRound(t *testing.T) {
	tests := []struct {
		x             float64
		manBits, emin int
		want          float64
	}{
		{1.0625, 3, -6, 1},    // tie between 1 and 1.125 goes to even 1
		{1.1875, 3, -6, 1.25}, // tie between 1.125 and 1.25 goes to even 1.25
		{0x1p-10, 3, -6, 0},   // half the smallest E4M3 subnormal: tie to 0
		{3 * 0x1p-10, 3, -6, 0x1p-8},
		{464, 3, -6, 448},      // tie between 448 and 480
		{0.25, 1, 0, 0},        // E2M1: tie between 0 and 0.5
		{5, 1, 0, 4},           // E2M1: tie between 4 and 6
		{-2.5, 1, 0, -2},       // E2M1: tie between 2 and 3
		{61440, 2, -14, 65536}, // E5M2: tie between 57344 and 2^16
	}
	for _, tc := range tests {
		if got := refRound(tc.x, tc.manBits, tc.emin); got != tc.want {
			t.Errorf("refRound(%v, %d, %d) = %v, want %v", tc.x, tc.manBits, tc.emin, got, tc.want)
		}
	}
}
