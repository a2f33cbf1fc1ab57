package format

import (
	"math"
	"testing"
)

func TestE8M0AllCodes(t *testing.T) {
	for c := range 256 {
		code := uint8(c)
		got := E8M0ToFloat32(code)
		if code == 0xFF {
			if got == got {
				t.Errorf("E8M0ToFloat32(0xff) = %v, want NaN", got)
			}
			continue
		}
		if want := float32(math.Ldexp(1, c-127)); got != want {
			t.Errorf("E8M0ToFloat32(%#02x) = %v, want %v", code, got, want)
		}
		for _, enc := range []struct {
			name string
			fn   func(float32) uint8
		}{{"E8M0FromFloat32", E8M0FromFloat32}, {"E8M0Ceil", E8M0Ceil}} {
			if back := enc.fn(got); back != code {
				t.Errorf("%s(E8M0ToFloat32(%#02x)) = %#02x, want %#02x", enc.name, code, back, code)
			}
		}
		if back, ok := E8M0FromPowerOfTwo(got); !ok || back != code {
			t.Errorf("E8M0FromPowerOfTwo(%v) = %#02x, %v, want %#02x, true", got, back, ok, code)
		}
		if back := E8M0FromExp(c - 127); back != code {
			t.Errorf("E8M0FromExp(%d) = %#02x, want %#02x", c-127, back, code)
		}
	}
}

func TestE8M0FromFloat32(t *testing.T) {
	inf := float32(math.Inf(1))
	tests := []struct {
		name string
		in   float32
		want uint8
	}{
		{"one", 1, 127},
		{"below midpoint", nextDown(1.5), 127},
		{"midpoint rounds up", 1.5, 128},
		{"0.75 is a midpoint", 0.75, 127},
		{"2.9", 2.9, 128},
		{"3", 3, 129},
		{"sign ignored", -2, 128},
		{"negative midpoint", -1.5, 128},
		{"zero", 0, 0},
		{"-0", float32(math.Copysign(0, -1)), 0},
		{"2^-127", f32(0x00400000), 0},
		{"above 2^-127", f32(0x00400001), 1},
		{"small subnormal", f32(0x00200000), 0},
		{"2^-126", 0x1p-126, 1},
		{"2^127", 0x1p127, 254},
		{"midpoint above 2^127 is NaN", 1.5 * 0x1p127, 0xFF},
		{"largest float32", math.MaxFloat32, 0xFF},
		{"+Inf", inf, 0xFF},
		{"-Inf", -inf, 0xFF},
		{"NaN", nan32(false), 0xFF},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := E8M0FromFloat32(tc.in); got != tc.want {
				t.Errorf("E8M0FromFloat32(%v) = %#02x, want %#02x", tc.in, got, tc.want)
			}
		})
	}
}

func TestE8M0Ceil(t *testing.T) {
	inf := float32(math.Inf(1))
	tests := []struct {
		in   float32
		want uint8
	}{
		{1, 127}, {nextUp(1), 128}, {0.75, 127}, {3, 129}, {4, 129}, {-3, 129},
		{0, 0}, {f32(1), 0}, {f32(0x00400000), 0}, {f32(0x00400001), 1}, {0x1p-126, 1},
		{0x1p127, 254}, {nextUp(0x1p127), 0xFF}, {inf, 0xFF}, {nan32(false), 0xFF},
	}
	for _, tc := range tests {
		if got := E8M0Ceil(tc.in); got != tc.want {
			t.Errorf("E8M0Ceil(%v) = %#02x, want %#02x", tc.in, got, tc.want)
		}
	}
	// Ceil never returns a scale below its input.
	for _, f := range randomFloat32s(5000, -130, 127) {
		c := E8M0Ceil(f)
		a := float32(math.Abs(float64(f)))
		if c != 0xFF && E8M0ToFloat32(c) < a {
			t.Fatalf("E8M0Ceil(%v) = %#02x = %v, below the input", f, c, E8M0ToFloat32(c))
		}
		if c != 0xFF && c > 0 && E8M0ToFloat32(c-1) >= a {
			t.Fatalf("E8M0Ceil(%v) = %#02x, but %#02x is also >= it", f, c, c-1)
		}
	}
}

func TestE8M0FromPowerOfTwo(t *testing.T) {
	for _, f := range []float32{0, 3, -1, 0x1p-128, 1.5, float32(math.Inf(1)), nan32(false), f32(0x00400001)} {
		if c, ok := E8M0FromPowerOfTwo(f); ok {
			t.Errorf("E8M0FromPowerOfTwo(%v) = %#02x, true, want false", f, c)
		}
	}
	mustPanic(t, "E8M0FromExp(128)", func() { E8M0FromExp(128) })
	mustPanic(t, "E8M0FromExp(-128)", func() { E8M0FromExp(-128) })
}
