package format

import (
	"math"
	"math/rand/v2"
	"testing"
)

func TestAbsMax(t *testing.T) {
	inf := float32(math.Inf(1))
	tests := []struct {
		name string
		in   []float32
		want float32
	}{
		{"empty", nil, 0},
		{"mixed signs", []float32{1, -3, 2}, 3},
		{"negative zero", []float32{float32(math.Copysign(0, -1))}, 0},
		{"infinity", []float32{1, -inf}, inf},
		{"NaN after larger", []float32{5, nan32(true), 1}, nan32(false)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := AbsMax(tc.in)
			if !sameFloat(got, tc.want) || math.Signbit(float64(got)) && got == got {
				t.Errorf("AbsMax(%v) = %v, want %v", tc.in, got, tc.want)
			}
		})
	}
}

func TestFP8Scale(t *testing.T) {
	tests := []struct {
		amax    float32
		compute DType
		want    float32
	}{
		{448, F32, 1},
		{896, BF16, 2},
		{0, F32, 0x1p-23},
		{0, BF16, 0x1p-7},
		{1, F32, float32(1) / 448},
		{1, BF16, RoundBF16(float32(1) / 448)},
	}
	for _, tc := range tests {
		if got := FP8Scale(tc.amax, tc.compute); got != tc.want {
			t.Errorf("FP8Scale(%v, %v) = %v, want %v", tc.amax, tc.compute, got, tc.want)
		}
	}
	if FP8Scale(1, BF16) == FP8Scale(1, F32) {
		t.Errorf("FP8Scale(1, BF16) = FP8Scale(1, F32): BF16 rounding not applied")
	}
	mustPanic(t, "FP8Scale(F16)", func() { FP8Scale(1, F16) })
}

func TestQuantizeE4M3(t *testing.T) {
	src := []float32{0, 1, -1, 448, 1000, -1000, 0.5, nan32(false)}
	dst := make([]uint8, len(src))
	QuantizeE4M3(dst, src, 2, F32) // x/2
	want := []uint8{0x00, 0x30, 0xB0, 0x76, 0x7E, 0xFE, 0x28, 0x7F}
	for i := range src {
		if dst[i] != want[i] {
			t.Errorf("QuantizeE4M3(%v / 2)[%d] = %#02x, want %#02x", src[i], i, dst[i], want[i])
		}
	}
	back := make([]float32, len(dst))
	DequantizeE4M3(back, dst, 2)
	for i, w := range []float32{0, 1, -1, 448, 896, -896, 0.5} {
		if back[i] != w {
			t.Errorf("DequantizeE4M3(%#02x, 2) = %v, want %v", dst[i], back[i], w)
		}
	}

	// BF16 compute rounds w/scale to BF16 before the FP8 cast: 1.0625 * (1 +
	// 2^-9) is within BF16's half-ulp of the E4M3 tie 1.0625, so BF16 makes it
	// the tie (to even 1.0) while float32 rounds it up to 1.125.
	x := []float32{1.0625 * (1 + 0x1p-9)}
	QuantizeE4M3(dst[:1], x, 1, F32)
	if dst[0] != 0x39 {
		t.Errorf("QuantizeE4M3(%v, 1, F32) = %#02x, want 0x39", x[0], dst[0])
	}
	QuantizeE4M3(dst[:1], x, 1, BF16)
	if dst[0] != 0x38 {
		t.Errorf("QuantizeE4M3(%v, 1, BF16) = %#02x, want 0x38", x[0], dst[0])
	}
	mustPanic(t, "QuantizeE4M3(short dst)", func() { QuantizeE4M3(dst[:1], src, 1, F32) })
	mustPanic(t, "DequantizeE4M3(short dst)", func() { DequantizeE4M3(back[:1], dst, 1) })
}

func TestNVFP4GlobalScale(t *testing.T) {
	tests := []struct {
		amax    float32
		compute DType
		want    float32
	}{
		{2688, F32, 1},
		{1, BF16, 2688},
		{3, F32, 896},
		{10, F32, 268.8},
		// torch computes 2688/amax as RoundBF16(RoundBF16(1/10) * 2688) =
		// RoundBF16(269.0625) = 270; a single division would give 268.
		{10, BF16, 270},
		{nan32(false), F32, 1},
		{float32(math.Inf(1)), BF16, 1},
		{0, F32, float32(math.Inf(1))}, // 2688 / finfo.tiny overflows, as in torch
	}
	for _, tc := range tests {
		if got := NVFP4GlobalScale(tc.amax, tc.compute); got != tc.want {
			t.Errorf("NVFP4GlobalScale(%v, %v) = %v, want %v", tc.amax, tc.compute, got, tc.want)
		}
	}
}

func TestNVFP4BlockScale(t *testing.T) {
	gs := NVFP4GlobalScale(12, F32) // 224
	tests := []struct {
		name      string
		blockAmax float32
		gs        float32
		want      uint8
	}{
		{"block holds the tensor max", 12, gs, 0x7E},      // 224 * 12/6 = 448
		{"half the max", 6, gs, 0x76},                     // 224
		{"zero block gets eps", 0, gs, e4m3EpsCode},       // 0 -> 0.125
		{"underflow gets eps", 1e-6, gs, e4m3EpsCode},     // 224 * 1.7e-7 rounds to 0
		{"above the tensor max saturates", 100, gs, 0x7E}, // clamped to 448
		{"NaN stays NaN", nan32(false), gs, 0x7F},         // visible downstream
		{"tie to even", 18.75, 1, 0x44},                   // 3.125: 3 (0x44) vs 3.25 (0x45)
		{"above tie", 18.75 + 0x1p-15, 1, 0x45},           // just over 3.125
		{"bf16 local scale", 6 * (1 + 0x1p-8), 1, 0x38},   // local is 1 + 2^-8
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := NVFP4BlockScale(tc.blockAmax, tc.gs, F32); got != tc.want {
				t.Errorf("NVFP4BlockScale(%v, %v, F32) = %#02x, want %#02x", tc.blockAmax, tc.gs, got, tc.want)
			}
		})
	}
	if E4M3ToFloat32(e4m3EpsCode) != E4M3ScaleEps {
		t.Errorf("E4M3ToFloat32(e4m3EpsCode) = %v, want %v", E4M3ToFloat32(e4m3EpsCode), E4M3ScaleEps)
	}
	// With BF16 compute, local = amax/6 is rounded to BF16 before the
	// product. Here local = 1.0625 * (1 + 2^-9): float32 keeps it, just above
	// the E4M3 tie 1.0625, so it rounds up to 1.125 (0x39); BF16 (step 2^-7)
	// rounds it down onto the tie, which goes to the even 1.0 (0x38).
	amax := float32(6 * 1.0625 * (1 + 0x1p-9))
	f, b := NVFP4BlockScale(amax, 1, F32), NVFP4BlockScale(amax, 1, BF16)
	if f != 0x39 || b != 0x38 {
		t.Errorf("NVFP4BlockScale(%v, 1, F32/BF16) = %#02x/%#02x, want 0x39/0x38", amax, f, b)
	}
}

func TestQuantizeNVFP4Block(t *testing.T) {
	// With amax 6 and global scale 448 the block scale is 448 and s = 1, so
	// the codes are the plain E2M1 encoding of x.
	gs := NVFP4GlobalScale(6, F32)
	x := []float32{0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.25, -0.75, -1.25, -5, 2.5, 3.5, -6, 0.3}
	want := []uint8{0, 1, 2, 3, 4, 5, 6, 7, 8, 10, 10, 14, 4, 6, 15, 1}
	codes := make([]uint8, 16)
	sc := QuantizeNVFP4Block(codes, x, gs, F32)
	if sc != 0x7E {
		t.Errorf("QuantizeNVFP4Block scale = %#02x, want 0x7e", sc)
	}
	for i := range x {
		if codes[i] != want[i] {
			t.Errorf("QuantizeNVFP4Block(%v)[%d] = %d, want %d", x[i], i, codes[i], want[i])
		}
	}
	back := make([]float32, 16)
	DequantizeNVFP4Block(back, codes, sc, gs)
	for i := range 8 {
		if back[i] != x[i] {
			t.Errorf("DequantizeNVFP4Block[%d] = %v, want %v", i, back[i], x[i])
		}
	}

	// The element codes come from the float32 quotient x/s, whatever the
	// compute dtype (released compressed-tensors thresholds float32; a BF16
	// cast first, on a development branch only, would turn 0.25078124 and
	// 0.74999994 into the ties 0.25 and 0.75 and give [7 0 2]). With global
	// scale 2688/5 and a block at 6 the scale saturates to 448 and
	// s = 0.8333334.
	gs = NVFP4GlobalScale(5, F32)
	x = []float32{6, 0.20898438, 0.625}
	codes = codes[:3]
	for _, compute := range []DType{F32, BF16} {
		QuantizeNVFP4Block(codes, x, gs, compute)
		if want := [3]uint8{7, 1, 1}; [3]uint8(codes) != want {
			t.Errorf("QuantizeNVFP4Block(%v, %v, %v) = %v, want %v", x, gs, compute, codes, want)
		}
	}

	// A NaN poisons the scale, and so the whole block.
	sc = QuantizeNVFP4Block(codes, []float32{1, nan32(false), 2}, gs, F32)
	DequantizeNVFP4Block(back[:3], codes, sc, gs)
	if !E4M3IsNaN(sc) || back[0] == back[0] {
		t.Errorf("QuantizeNVFP4Block with a NaN: scale %#02x, dequantized %v, want NaN", sc, back[:3])
	}

	mustPanic(t, "QuantizeNVFP4Block(17 elements)", func() { QuantizeNVFP4Block(make([]uint8, 17), make([]float32, 17), 1, F32) })
	mustPanic(t, "QuantizeNVFP4Block(empty)", func() { QuantizeNVFP4Block(nil, nil, 1, F32) })
	mustPanic(t, "QuantizeNVFP4Block(F16)", func() { QuantizeNVFP4Block(codes, x, 1, F16) })
	mustPanic(t, "DequantizeNVFP4Block(short dst)", func() { DequantizeNVFP4Block(back[:1], codes, 0x38, 1) })
}

// TestNVFP4RowNearest quantizes random BF16 rows and checks that every
// element got the E2M1 value nearest to x/s, that the block scales follow the
// formula, and that the packed layout round-trips.
func TestNVFP4RowNearest(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	const n = 64
	row := make([]float32, n)
	for trial := range 50 {
		for i := range row {
			row[i] = RoundBF16(float32(r.NormFloat64() * math.Ldexp(1, trial%9-4)))
		}
		gs := NVFP4GlobalScale(AbsMax(row), BF16)
		packed := make([]byte, n/2)
		scales := make([]uint8, n/NVFP4BlockSize)
		QuantizeNVFP4Row(packed, scales, row, gs, F32)

		codes := make([]uint8, n)
		UnpackE2M1(codes, packed)
		for b, sc := range scales {
			block := row[b*16 : (b+1)*16]
			if want := NVFP4BlockScale(AbsMax(block), gs, F32); sc != want {
				t.Fatalf("trial %d block %d: scale %#02x, want %#02x", trial, b, sc, want)
			}
			s := E4M3ToFloat32(sc) / gs
			for i, x := range block {
				if got, want := codes[b*16+i], refE2M1(x/s); got != want {
					t.Fatalf("trial %d: element %v / %v: code %d, want %d", trial, x, s, got, want)
				}
			}
		}
		back := make([]float32, n)
		DequantizeNVFP4Row(back, packed, scales, gs)
		for i := range back {
			s := E4M3ToFloat32(scales[i/16]) / gs
			if want := E2M1ToFloat32(codes[i]) * s; back[i] != want {
				t.Fatalf("DequantizeNVFP4Row[%d] = %v, want %v", i, back[i], want)
			}
		}
	}
	mustPanic(t, "QuantizeNVFP4Row(len 24)", func() {
		QuantizeNVFP4Row(make([]byte, 12), make([]uint8, 1), make([]float32, 24), 1, F32)
	})
	mustPanic(t, "DequantizeNVFP4Row(short scales)", func() {
		DequantizeNVFP4Row(make([]float32, 32), make([]byte, 16), make([]uint8, 1), 1)
	})
}
