package format

import (
	"bytes"
	"math"
	"testing"
)

// e2m1Magnitudes is the E2M1 table as compressed-tensors writes it.
var e2m1Magnitudes = [8]float32{0, 0.5, 1, 1.5, 2, 3, 4, 6}

func refE2M1(f float32) uint8 {
	if f != f {
		return uint8(math.Float32bits(f)>>28) & 8
	}
	clamped := float32(math.Copysign(math.Min(math.Abs(float64(f)), 6), float64(f)))
	return bruteNearest(clamped, 7, 8, func(c uint8) float32 { return e2m1Magnitudes[c] })
}

func TestE2M1AllCodes(t *testing.T) {
	for c := range uint8(16) {
		want := e2m1Magnitudes[c&7]
		if c&8 != 0 {
			want = -want
		}
		got := E2M1ToFloat32(c)
		if got != want || math.Signbit(float64(got)) != (c&8 != 0) {
			t.Errorf("E2M1ToFloat32(%d) = %v, want %v", c, got, want)
		}
		if back := E2M1FromFloat32(got); back != c {
			t.Errorf("E2M1FromFloat32(E2M1ToFloat32(%d)) = %d, want %d", c, back, c)
		}
		// Bits above the nibble are ignored.
		if hi := E2M1ToFloat32(c | 0xF0); !sameFloat(hi, got) {
			t.Errorf("E2M1ToFloat32(%#02x) = %v, want %v", c|0xF0, hi, got)
		}
	}
}

func TestE2M1FromFloat32(t *testing.T) {
	inf := float32(math.Inf(1))
	tests := []struct {
		in   float32
		want uint8
	}{
		// Every tie goes to the code with a clear mantissa bit.
		{0.25, 0}, {0.75, 2}, {1.25, 2}, {1.75, 4}, {2.5, 4}, {3.5, 6}, {5, 6},
		{-0.25, 8}, {-0.75, 10}, {-1.25, 10}, {-1.75, 12}, {-2.5, 12}, {-3.5, 14}, {-5, 14},
		// Either side of every tie.
		{nextDown(0.25), 0}, {nextUp(0.25), 1}, {nextDown(0.75), 1}, {nextUp(0.75), 2},
		{nextDown(1.25), 2}, {nextUp(1.25), 3}, {nextDown(1.75), 3}, {nextUp(1.75), 4},
		{nextDown(2.5), 4}, {nextUp(2.5), 5}, {nextDown(3.5), 5}, {nextUp(3.5), 6},
		{nextDown(5), 6}, {nextUp(5), 7},
		// Clamping to ±6.
		{6, 7}, {7, 7}, {1e30, 7}, {inf, 7}, {-7, 15}, {-inf, 15},
		// Zeros, tiny values, NaN.
		{0, 0}, {float32(math.Copysign(0, -1)), 8}, {-0.1, 8}, {f32(1), 0}, {f32(0x80000001), 8},
		{nan32(false), 0}, {nan32(true), 8},
	}
	for _, tc := range tests {
		if got := E2M1FromFloat32(tc.in); got != tc.want {
			t.Errorf("E2M1FromFloat32(%v) = %d, want %d", tc.in, got, tc.want)
		}
	}
}

// TestE2M1Thresholds checks the encoder against compressed-tensors' own
// threshold chain (fp4_utils.py cast_to_fp4), written out independently.
func TestE2M1Thresholds(t *testing.T) {
	ct := func(x float32) uint8 {
		a := math.Abs(float64(x))
		var idx uint8
		for i, th := range []struct {
			v         float64
			inclusive bool
		}{{0.25, false}, {0.75, true}, {1.25, false}, {1.75, true}, {2.5, false}, {3.5, true}, {5, false}} {
			if a > th.v || (th.inclusive && a == th.v) {
				idx = uint8(i + 1)
			}
		}
		if math.Signbit(float64(x)) {
			idx |= 8
		}
		return idx
	}
	for _, f := range randomFloat32s(20000, -4, 3) {
		if f != f {
			continue
		}
		if got, want := E2M1FromFloat32(f), ct(f); got != want {
			t.Fatalf("E2M1FromFloat32(%v) = %d, want %d", f, got, want)
		}
		if got, want := E2M1FromFloat32(f), refE2M1(f); got != want {
			t.Fatalf("E2M1FromFloat32(%v) = %d, brute force gives %d", f, got, want)
		}
	}
}

func TestPackE2M1(t *testing.T) {
	codes := []uint8{1, 2, 3, 4, 0xF, 0x8}
	packed := make([]byte, 3)
	PackE2M1(packed, codes)
	if want := []byte{0x21, 0x43, 0x8F}; !bytes.Equal(packed, want) {
		t.Errorf("PackE2M1(%v) = % x, want % x", codes, packed, want)
	}
	back := make([]uint8, 6)
	UnpackE2M1(back, packed)
	if !bytes.Equal(back, codes) {
		t.Errorf("UnpackE2M1(% x) = %v, want %v", packed, back, codes)
	}
	// Every byte survives unpack -> pack.
	all := make([]byte, 256)
	for i := range all {
		all[i] = byte(i)
	}
	nibbles := make([]uint8, 512)
	UnpackE2M1(nibbles, all)
	again := make([]byte, 256)
	PackE2M1(again, nibbles)
	if !bytes.Equal(again, all) {
		t.Errorf("PackE2M1(UnpackE2M1(all bytes)) changed the bytes")
	}
	PackE2M1(nil, nil) // empty rows are fine

	mustPanic(t, "PackE2M1(odd)", func() { PackE2M1(make([]byte, 1), []uint8{1, 2, 3}) })
	mustPanic(t, "PackE2M1(short dst)", func() { PackE2M1(make([]byte, 1), []uint8{1, 2, 3, 4}) })
	mustPanic(t, "PackE2M1(code 16)", func() { PackE2M1(make([]byte, 1), []uint8{16, 0}) })
	mustPanic(t, "UnpackE2M1(short dst)", func() { UnpackE2M1(make([]uint8, 3), []byte{1, 2}) })
}
