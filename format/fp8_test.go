package format

import (
	"math"
	"testing"
)

// refE4M3Value decodes a finite E4M3FN code from the field definition.
func refE4M3Value(c uint8) float32 {
	e, m := int(c>>3&0xF), float64(c&7)
	v := math.Ldexp(m, -9)
	if e != 0 {
		v = math.Ldexp(8+m, e-10)
	}
	if c&0x80 != 0 {
		v = -v
	}
	return float32(v)
}

// refE5M2Value decodes a finite E5M2 code from the field definition.
func refE5M2Value(c uint8) float32 {
	e, m := int(c>>2&0x1F), float64(c&3)
	v := math.Ldexp(m, -16)
	if e != 0 {
		v = math.Ldexp(4+m, e-17)
	}
	if c&0x80 != 0 {
		v = -v
	}
	return float32(v)
}

// e4m3TorchExtended decodes like refE4M3Value but gives code 0x7F the value
// it has while torch's cast rounds: 480, one E4M3 step above 448.
func e4m3TorchExtended(c uint8) float32 {
	if c == 0x7F {
		return 480
	}
	return refE4M3Value(c)
}

func refE4M3Sat(f float32) uint8 {
	if f != f {
		return uint8(math.Float32bits(f)>>24)&0x80 | 0x7F
	}
	clamped := float32(math.Copysign(math.Min(math.Abs(float64(f)), 448), float64(f)))
	return bruteNearest(clamped, 0x7E, 0x80, refE4M3Value)
}

func refE4M3Torch(f float32) uint8 {
	if f != f || math.Abs(float64(f)) >= 480 {
		return uint8(math.Float32bits(f)>>24)&0x80 | 0x7F
	}
	// Below 480, round among all codes with 0x7F standing for 480, as c10's
	// bit arithmetic does; a result of 0x7F is then torch's NaN.
	return bruteNearest(f, 0x7F, 0x80, e4m3TorchExtended)
}

func refE5M2(f float32) uint8 {
	sign := uint8(math.Float32bits(f)>>24) & 0x80
	switch {
	case f != f:
		return sign | 0x7F
	case math.Abs(float64(f)) >= 65536:
		return sign | 0x7C
	}
	// 0x7C (Inf) takes part as 2^16, the value IEEE rounding gives it.
	return bruteNearest(f, 0x7C, 0x80, func(c uint8) float32 {
		if c == 0x7C {
			return 65536
		}
		return refE5M2Value(c)
	})
}

func TestE4M3KnownCodes(t *testing.T) {
	tests := []struct {
		code uint8
		want float32
	}{
		{0x00, 0}, {0x01, 0x1p-9}, {0x07, 7 * 0x1p-9}, {0x08, 0x1p-6},
		{0x38, 1}, {0x39, 1.125}, {0x40, 2}, {0x7E, 448},
		{0xB8, -1}, {0xFE, -448}, {0x81, -0x1p-9},
	}
	for _, tc := range tests {
		if got := E4M3ToFloat32(tc.code); got != tc.want {
			t.Errorf("E4M3ToFloat32(%#02x) = %v, want %v", tc.code, got, tc.want)
		}
	}
	if got := E4M3ToFloat32(0x80); math.Float32bits(got) != signBit32 {
		t.Errorf("E4M3ToFloat32(0x80) = %v, want -0", got)
	}
}

// TestE4M3AllCodes decodes all 256 codes and re-encodes each with both
// encoders: every code, NaNs included, must come back as itself.
func TestE4M3AllCodes(t *testing.T) {
	for c := range 256 {
		code := uint8(c)
		got := E4M3ToFloat32(code)
		if code&0x7F == 0x7F {
			if got == got || math.Signbit(float64(got)) != (code&0x80 != 0) {
				t.Errorf("E4M3ToFloat32(%#02x) = %v, want NaN with sign %d", code, got, code>>7)
			}
			if !E4M3IsNaN(code) {
				t.Errorf("E4M3IsNaN(%#02x) = false, want true", code)
			}
		} else {
			if want := refE4M3Value(code); !sameFloat(got, want) {
				t.Errorf("E4M3ToFloat32(%#02x) = %v, want %v", code, got, want)
			}
			if E4M3IsNaN(code) {
				t.Errorf("E4M3IsNaN(%#02x) = true, want false", code)
			}
		}
		if back := E4M3FromFloat32(got); back != code {
			t.Errorf("E4M3FromFloat32(E4M3ToFloat32(%#02x)) = %#02x, want %#02x", code, back, code)
		}
		if back := E4M3FromFloat32Torch(got); back != code {
			t.Errorf("E4M3FromFloat32Torch(E4M3ToFloat32(%#02x)) = %#02x, want %#02x", code, back, code)
		}
	}
}

// TestE4M3Ties checks the exact midpoint between every pair of neighbouring
// codes, and the float32s either side of it, with both signs.
func TestE4M3Ties(t *testing.T) {
	for c := uint8(0); c < 0x7E; c++ {
		lo, hi := refE4M3Value(c), refE4M3Value(c+1)
		mid := (lo + hi) / 2 // exact: one more bit than E4M3 has
		even := c
		if c&1 == 1 {
			even = c + 1
		}
		for _, tc := range []struct {
			in   float32
			want uint8
		}{{mid, even}, {nextDown(mid), c}, {nextUp(mid), c + 1}} {
			for _, sign := range []uint8{0, 0x80} {
				in := tc.in
				if sign != 0 {
					in = -in
				}
				if got := E4M3FromFloat32(in); got != sign|tc.want {
					t.Errorf("E4M3FromFloat32(%v) = %#02x, want %#02x", in, got, sign|tc.want)
				}
				if got := E4M3FromFloat32Torch(in); got != sign|tc.want {
					t.Errorf("E4M3FromFloat32Torch(%v) = %#02x, want %#02x", in, got, sign|tc.want)
				}
			}
		}
	}
}

// TestE4M3Overflow pins the two encoders' different treatment of large
// values, Inf and NaN.
func TestE4M3Overflow(t *testing.T) {
	inf := float32(math.Inf(1))
	tests := []struct {
		name      string
		in        float32
		sat, torc uint8
	}{
		{"448", 448, 0x7E, 0x7E},
		{"above 448", nextUp(448), 0x7E, 0x7E},
		{"460", 460, 0x7E, 0x7E},
		{"464 tie to even 448", 464, 0x7E, 0x7E},
		{"above 464 rounds onto NaN", nextUp(464), 0x7E, 0x7F},
		{"470", 470, 0x7E, 0x7F},
		{"below 480", nextDown(480), 0x7E, 0x7F},
		{"480", 480, 0x7E, 0x7F},
		{"1e9", 1e9, 0x7E, 0x7F},
		{"-470", -470, 0xFE, 0xFF},
		{"-1e9", -1e9, 0xFE, 0xFF},
		{"+Inf", inf, 0x7E, 0x7F},
		{"-Inf", -inf, 0xFE, 0xFF},
		{"NaN", nan32(false), 0x7F, 0x7F},
		{"negative NaN", nan32(true), 0xFF, 0xFF},
		{"-0", float32(math.Copysign(0, -1)), 0x80, 0x80},
		{"tiny negative", -1e-10, 0x80, 0x80},
		{"half smallest subnormal", 0x1p-10, 0x00, 0x00},
		{"above half smallest subnormal", nextUp(0x1p-10), 0x01, 0x01},
		{"float32 subnormal", f32(1), 0x00, 0x00},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := E4M3FromFloat32(tc.in); got != tc.sat {
				t.Errorf("E4M3FromFloat32(%v) = %#02x, want %#02x", tc.in, got, tc.sat)
			}
			if got := E4M3FromFloat32Torch(tc.in); got != tc.torc {
				t.Errorf("E4M3FromFloat32Torch(%v) = %#02x, want %#02x", tc.in, got, tc.torc)
			}
		})
	}
}

func TestE5M2AllCodes(t *testing.T) {
	for c := range 256 {
		code := uint8(c)
		got := E5M2ToFloat32(code)
		mag := code & 0x7F
		want := code
		switch {
		case mag > 0x7C:
			if got == got {
				t.Errorf("E5M2ToFloat32(%#02x) = %v, want NaN", code, got)
			}
			want = code&0x80 | 0x7F // NaN codes alias to 0x7F / 0xFF
		case mag == 0x7C:
			if !math.IsInf(float64(got), 1-2*int(code>>7)) {
				t.Errorf("E5M2ToFloat32(%#02x) = %v, want ±Inf", code, got)
			}
		default:
			if w := refE5M2Value(code); !sameFloat(got, w) {
				t.Errorf("E5M2ToFloat32(%#02x) = %v, want %v", code, got, w)
			}
		}
		if E5M2IsNaN(code) != (mag > 0x7C) {
			t.Errorf("E5M2IsNaN(%#02x) = %v, want %v", code, E5M2IsNaN(code), mag > 0x7C)
		}
		if back := E5M2FromFloat32(got); back != want {
			t.Errorf("E5M2FromFloat32(E5M2ToFloat32(%#02x)) = %#02x, want %#02x", code, back, want)
		}
		// E5M2 is the top byte of F16.
		if h := F16ToFloat32(uint16(code) << 8); !sameFloat(h, got) {
			t.Errorf("E5M2ToFloat32(%#02x) = %v, F16 %#04x is %v", code, got, uint16(code)<<8, h)
		}
	}
}

func TestE5M2Ties(t *testing.T) {
	for c := uint8(0); c < 0x7B; c++ {
		lo, hi := refE5M2Value(c), refE5M2Value(c+1)
		mid := (lo + hi) / 2
		even := c
		if c&1 == 1 {
			even = c + 1
		}
		for _, tc := range []struct {
			in   float32
			want uint8
		}{{mid, even}, {nextDown(mid), c}, {nextUp(mid), c + 1}, {-mid, 0x80 | even}} {
			if got := E5M2FromFloat32(tc.in); got != tc.want {
				t.Errorf("E5M2FromFloat32(%v) = %#02x, want %#02x", tc.in, got, tc.want)
			}
		}
	}
}

func TestE5M2Overflow(t *testing.T) {
	inf := float32(math.Inf(1))
	tests := []struct {
		name string
		in   float32
		want uint8
	}{
		{"largest finite", 57344, 0x7B},
		{"below overflow tie", nextDown(61440), 0x7B},
		{"overflow tie to Inf", 61440, 0x7C},
		{"65536", 65536, 0x7C},
		{"-1e9", -1e9, 0xFC},
		{"+Inf", inf, 0x7C},
		{"-Inf", -inf, 0xFC},
		{"NaN", nan32(false), 0x7F},
		{"negative NaN", nan32(true), 0xFF},
		{"-0", float32(math.Copysign(0, -1)), 0x80},
		{"smallest subnormal", 0x1p-16, 0x01},
		{"half smallest subnormal", 0x1p-17, 0x00},
		{"smallest normal", 0x1p-14, 0x04},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := E5M2FromFloat32(tc.in); got != tc.want {
				t.Errorf("E5M2FromFloat32(%v) = %#02x, want %#02x", tc.in, got, tc.want)
			}
		})
	}
}

// TestFP8BruteForce compares all three FP8 encoders with a search over every
// code, on random inputs spread over and beyond the formats' ranges.
func TestFP8BruteForce(t *testing.T) {
	for _, f := range randomFloat32s(30000, -20, 20) {
		if got, want := E4M3FromFloat32(f), refE4M3Sat(f); got != want {
			t.Fatalf("E4M3FromFloat32(%#08x) = %#02x, want %#02x", math.Float32bits(f), got, want)
		}
		if got, want := E4M3FromFloat32Torch(f), refE4M3Torch(f); got != want {
			t.Fatalf("E4M3FromFloat32Torch(%#08x) = %#02x, want %#02x", math.Float32bits(f), got, want)
		}
		if got, want := E5M2FromFloat32(f), refE5M2(f); got != want {
			t.Fatalf("E5M2FromFloat32(%#08x) = %#02x, want %#02x", math.Float32bits(f), got, want)
		}
	}
}

// TestFP8AroundEveryFloat32Exponent sweeps every float32 exponent and sign
// with mantissas at and around the E4M3 and E5M2 rounding points, against
// refRound.
func TestFP8AroundEveryFloat32Exponent(t *testing.T) {
	for hi := range uint32(1 << 12) {
		for _, lo := range []uint32{0, 1, 0x3FFFF, 0x40000, 0x40001, 0x7FFFF, 0x80000, 0x80001, 0xFFFFF} {
			f := f32(hi<<20 | lo)
			if f != f || math.IsInf(float64(f), 0) {
				continue
			}
			x := float64(f)
			want := float32(refRound(math.Max(-448, math.Min(448, x)), 3, -6))
			if got := E4M3ToFloat32(E4M3FromFloat32(f)); !sameFloat(got, want) {
				t.Fatalf("E4M3 round of %#08x = %v, want %v", math.Float32bits(f), got, want)
			}
			want = float32(refRound(x, 2, -14))
			if math.Abs(float64(want)) > E5M2Max {
				want = float32(math.Copysign(math.Inf(1), x))
			}
			if got := E5M2ToFloat32(E5M2FromFloat32(f)); !sameFloat(got, want) {
				t.Fatalf("E5M2 round of %#08x = %v, want %v", math.Float32bits(f), got, want)
			}
		}
	}
}

// FuzzE4M3RoundTrip checks, for any float32, that both E4M3 encoders give the
// brute-force nearest code and that encode -> decode -> encode is stable.
func FuzzE4M3RoundTrip(f *testing.F) {
	for _, seed := range []uint32{0, 0x80000000, 0x3F800000, 0x43E00000, 0x43E80000, 0x43F00000,
		0x3A800000, 0x7F800000, 0x7FC00000, 0x00000001, 0x477FE000} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, bits uint32) {
		x := f32(bits)
		for _, enc := range []struct {
			name string
			fn   func(float32) uint8
			ref  func(float32) uint8
		}{
			{"E4M3FromFloat32", E4M3FromFloat32, refE4M3Sat},
			{"E4M3FromFloat32Torch", E4M3FromFloat32Torch, refE4M3Torch},
			{"E5M2FromFloat32", E5M2FromFloat32, refE5M2},
		} {
			c := enc.fn(x)
			if want := enc.ref(x); c != want {
				t.Fatalf("%s(%#08x) = %#02x, want %#02x", enc.name, bits, c, want)
			}
			decode := E4M3ToFloat32
			if enc.name == "E5M2FromFloat32" {
				decode = E5M2ToFloat32
			}
			if again := enc.fn(decode(c)); again != c {
				t.Fatalf("%s(decode(%#02x)) = %#02x, want %#02x", enc.name, c, again, c)
			}
		}
		// The 16-bit formats: re-encoding a decoded value is the identity
		// (up to the canonical NaN).
		if b := BF16FromFloat32(x); BF16FromFloat32(BF16ToFloat32(b)) != b {
			t.Fatalf("BF16 round trip of %#08x is not stable", bits)
		}
		if h := F16FromFloat32(x); F16FromFloat32(F16ToFloat32(h)) != h {
			t.Fatalf("F16 round trip of %#08x is not stable", bits)
		}
	})
}
