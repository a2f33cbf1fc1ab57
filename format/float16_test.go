package format

import (
	"fmt"
	"math"
	"testing"
)

func TestBF16FromFloat32(t *testing.T) {
	tests := []struct {
		name string
		in   float32
		want uint16
	}{
		{"one", 1, 0x3F80},
		{"minus two", -2, 0xC000},
		{"+0", 0, 0x0000},
		{"-0", float32(math.Copysign(0, -1)), 0x8000},
		{"tie to even down", f32(0x3F808000), 0x3F80},
		{"tie to even up", f32(0x3F818000), 0x3F82},
		{"above tie", f32(0x3F808001), 0x3F81},
		{"below tie", f32(0x3F807FFF), 0x3F80},
		{"negative tie", f32(0xBF818000), 0xBF82},
		{"carry into exponent", f32(0x3FFF8000), 0x4000},
		{"largest BF16", f32(0x7F7F0000), 0x7F7F},
		{"below overflow tie", f32(0x7F7F7FFF), 0x7F7F},
		{"overflow tie to Inf", f32(0x7F7F8000), 0x7F80},
		{"largest float32", math.MaxFloat32, 0x7F80},
		{"negative overflow", -math.MaxFloat32, 0xFF80},
		{"+Inf", float32(math.Inf(1)), 0x7F80},
		{"-Inf", float32(math.Inf(-1)), 0xFF80},
		{"smallest float32 subnormal", f32(0x00000001), 0x0000},
		{"subnormal tie to 0", f32(0x00008000), 0x0000},
		{"subnormal above tie", f32(0x00008001), 0x0001},
		{"subnormal tie up", f32(0x00018000), 0x0002},
		{"subnormal to normal carry", f32(0x007FFFFF), 0x0080},
		{"NaN", nan32(false), 0x7FC0},
		{"negative NaN", nan32(true), 0x7FC0},
		{"signaling NaN", f32(0x7F800001), 0x7FC0},
		{"NaN with payload", f32(0xFFFFFFFF), 0x7FC0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := BF16FromFloat32(tc.in); got != tc.want {
				t.Errorf("BF16FromFloat32(%#08x) = %#04x, want %#04x", math.Float32bits(tc.in), got, tc.want)
			}
		})
	}
}

// TestBF16AllCodes decodes every BF16 code, checks the value against the
// field definition, and re-encodes it.
func TestBF16AllCodes(t *testing.T) {
	for c := range 1 << 16 {
		b := uint16(c)
		got := BF16ToFloat32(b)
		if math.Float32bits(got) != uint32(b)<<16 {
			t.Fatalf("BF16ToFloat32(%#04x) = %#08x, want %#08x", b, math.Float32bits(got), uint32(b)<<16)
		}
		want := b
		if got != got {
			want = 0x7FC0
		} else if e, m := int(b>>7&0xFF), float64(b&0x7F); e < 0xFF {
			// The field definition: subnormals m * 2^-133, normals (128+m) * 2^(e-134).
			v := math.Ldexp(m, -133)
			if e != 0 {
				v = math.Ldexp(128+m, e-134)
			}
			if b&0x8000 != 0 {
				v = -v
			}
			if float64(got) != v || math.Signbit(float64(got)) != (b&0x8000 != 0) {
				t.Fatalf("BF16ToFloat32(%#04x) = %v, field definition gives %v", b, got, v)
			}
		}
		if back := BF16FromFloat32(got); back != want {
			t.Fatalf("BF16FromFloat32(BF16ToFloat32(%#04x)) = %#04x, want %#04x", b, back, want)
		}
	}
}

// TestBF16AroundEveryTie checks, for every BF16 code, the float32 inputs at,
// just below and just above the midpoint to the next code against refRound.
func TestBF16AroundEveryTie(t *testing.T) {
	for hi := range uint32(1 << 16) {
		for _, lo := range []uint32{0, 1, 0x7FFF, 0x8000, 0x8001, 0xFFFF} {
			f := f32(hi<<16 | lo)
			if f != f || math.IsInf(float64(f), 0) {
				continue
			}
			want := float32(refRound(float64(f), 7, -126)) // overflows to Inf by itself
			if got := BF16ToFloat32(BF16FromFloat32(f)); !sameFloat(got, want) {
				t.Fatalf("BF16 round of %#08x = %v, want %v", math.Float32bits(f), got, want)
			}
		}
	}
}

func TestRoundTo(t *testing.T) {
	x := float32(1) / 3
	tests := []struct {
		d    DType
		want float32
	}{
		{F32, x},
		{BF16, BF16ToFloat32(0x3EAB)},
		{F16, F16ToFloat32(0x3555)},
	}
	for _, tc := range tests {
		if got := RoundTo(tc.d, x); got != tc.want {
			t.Errorf("RoundTo(%v, 1/3) = %v, want %v", tc.d, got, tc.want)
		}
	}
	mustPanic(t, "RoundTo(F8E4M3)", func() { RoundTo(F8E4M3, 1) })
	mustPanic(t, "Eps(I8)", func() { Eps(I8) })
	if got := Eps(BF16); got != 0.0078125 {
		t.Errorf("Eps(BF16) = %v, want 0.0078125", got)
	}
}

func TestF16FromFloat32(t *testing.T) {
	tests := []struct {
		name string
		in   float32
		want uint16
	}{
		{"one", 1, 0x3C00},
		{"minus one", -1, 0xBC00},
		{"-0", float32(math.Copysign(0, -1)), 0x8000},
		{"largest finite", 65504, 0x7BFF},
		{"below overflow tie", nextDown(65520), 0x7BFF},
		{"overflow tie to Inf", 65520, 0x7C00},
		{"negative overflow", -1e6, 0xFC00},
		{"+Inf", float32(math.Inf(1)), 0x7C00},
		{"-Inf", float32(math.Inf(-1)), 0xFC00},
		{"smallest normal", 0x1p-14, 0x0400},
		{"tie subnormal to normal", 0x1p-14 - 0x1p-25, 0x0400},
		{"smallest subnormal", 0x1p-24, 0x0001},
		{"half smallest subnormal: tie to 0", 0x1p-25, 0x0000},
		{"above half smallest subnormal", nextUp(0x1p-25), 0x0001},
		{"subnormal tie up to even", 3 * 0x1p-25, 0x0002},
		{"negative tiny to -0", -1e-10, 0x8000},
		{"tie to even down", 1 + 0x1p-11, 0x3C00},
		{"tie to even up", 1 + 3*0x1p-11, 0x3C02},
		{"float32 subnormal", f32(0x00000001), 0x0000},
		{"NaN", nan32(false), 0x7E00},
		{"negative NaN", nan32(true), 0xFE00},
		{"signaling NaN", f32(0x7F800001), 0x7E00},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := F16FromFloat32(tc.in); got != tc.want {
				t.Errorf("F16FromFloat32(%#08x) = %#04x, want %#04x", math.Float32bits(tc.in), got, tc.want)
			}
		})
	}
}

// refF16Value decodes a finite F16 code from the IEEE definition.
func refF16Value(h uint16) float64 {
	e, m := int(h>>10&0x1F), float64(h&0x3FF)
	v := math.Ldexp(m, -24)
	if e != 0 {
		v = math.Ldexp(1024+m, e-25)
	}
	if h&0x8000 != 0 {
		v = -v
	}
	return v
}

func TestF16AllCodes(t *testing.T) {
	for c := range 1 << 16 {
		h := uint16(c)
		got := F16ToFloat32(h)
		mag := h & 0x7FFF
		switch {
		case mag > 0x7C00:
			if got == got {
				t.Fatalf("F16ToFloat32(%#04x) = %v, want NaN", h, got)
			}
			if back := F16FromFloat32(got); back != h&0x8000|0x7E00 {
				t.Fatalf("F16FromFloat32(F16ToFloat32(%#04x)) = %#04x, want %#04x", h, back, h&0x8000|0x7E00)
			}
			continue
		case mag == 0x7C00:
			if !math.IsInf(float64(got), 1-2*int(h>>15)) {
				t.Fatalf("F16ToFloat32(%#04x) = %v, want ±Inf", h, got)
			}
		default:
			want := float32(refF16Value(h))
			if !sameFloat(got, want) {
				t.Fatalf("F16ToFloat32(%#04x) = %v, want %v", h, got, want)
			}
		}
		if back := F16FromFloat32(got); back != h {
			t.Fatalf("F16FromFloat32(F16ToFloat32(%#04x)) = %#04x, want %#04x", h, back, h)
		}
	}
}

// TestF16AroundEveryTie checks float32 inputs at and next to every F16
// midpoint, across the whole float32 range, against refRound.
func TestF16AroundEveryTie(t *testing.T) {
	for hi := range uint32(1 << 19) {
		for _, lo := range []uint32{0, 1, 0xFFF, 0x1000, 0x1001, 0x1FFF} {
			f := f32(hi<<13 | lo)
			if f != f || math.IsInf(float64(f), 0) {
				continue
			}
			want := float32(refRound(float64(f), 10, -14))
			if math.Abs(float64(want)) > 65504 {
				want = float32(math.Copysign(math.Inf(1), float64(f)))
			}
			if got := F16ToFloat32(F16FromFloat32(f)); !sameFloat(got, want) {
				t.Fatalf("F16 round of %#08x = %v, want %v", math.Float32bits(f), got, want)
			}
		}
	}
}

func ExampleF16FromFloat32() {
	fmt.Printf("%#04x %#04x %#04x\n", F16FromFloat32(1), F16FromFloat32(65520), F16FromFloat32(0x1p-24))
	// Output: 0x3c00 0x7c00 0x0001
}
