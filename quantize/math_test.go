package quantize

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/lowbit-ai/lowbit/format"
)

// testMatrix returns a seeded random BF16 matrix with the features the
// quantizers must get right: Gaussian rows over a wide range of magnitudes,
// heavy outlier columns, an all-zero row, all-zero groups of 16 and (when
// the matrix is large enough) an all-zero 128x128 block, a row and groups
// of tiny (subnormal or near-underflow) values, -0.0 elements, and rows of
// exact E4M3 and E2M1 rounding ties.
func testMatrix(seed uint64, rows, cols int) Matrix {
	rng := rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))
	x := make([]float32, rows*cols)
	scale := float32(math.Ldexp(1, rng.IntN(16)-12))
	for i := range x {
		x[i] = float32(rng.NormFloat64()) * scale
	}
	at := func(r, c int) *float32 { return &x[r*cols+c] }
	for range 3 { // outlier columns
		c, k := rng.IntN(cols), float32(50+rng.IntN(1000))
		for r := range rows {
			*at(r, c) *= k
		}
	}
	row := func(r int, f func(c int) float32) {
		if r < rows {
			for c := range cols {
				*at(r, c) = f(c)
			}
		}
	}
	row(1, func(int) float32 { return 0 })                                              // zero row
	row(2, func(int) float32 { return float32(rng.NormFloat64()) * 0x1p-130 })          // subnormal BF16
	row(3, func(int) float32 { return float32(rng.NormFloat64()) * scale * 0x1p-24 })   // far below the rest
	row(4, func(c int) float32 { return e4m3Tie(c) * 0x1p-3 })                          // E4M3 ties at scale 2^-3
	row(5, func(c int) float32 { return e4m3Tie(c) * float32(1+rng.IntN(2)*2) / 3 })    // near ties
	row(6, func(c int) float32 { return float32(math.Copysign(0, rng.NormFloat64())) }) // -0 and +0
	row(7, func(c int) float32 { return float32(rng.NormFloat64()) * 0x1p-134 })        // at BF16's smallest
	// Zero, tiny and -0 groups of 16, away from the tie rows.
	for r := range rows {
		if r == 4 || r == 5 {
			continue
		}
		for c := 0; c+16 <= cols; c += 16 {
			switch rng.IntN(24) {
			case 0:
				for i := range 16 {
					*at(r, c+i) = 0
				}
			case 1:
				for i := range 16 {
					*at(r, c+i) *= 0x1p-22
				}
			case 2:
				*at(r, c+rng.IntN(16)) = float32(math.Copysign(0, -1))
			}
		}
	}
	if rows >= 128 && cols >= 256 { // an all-zero 128x128 block and a tiny one
		for r := range 128 {
			for c := 128; c < 256; c++ {
				*at(r, c) = 0
			}
		}
	}
	if rows >= 256 && cols >= 256 {
		for r := 128; r < 256; r++ {
			for c := 128; c < 256; c++ {
				*at(r, c) = float32(rng.NormFloat64()) * 0x1p-131
			}
		}
	}
	return refBF16(rows, cols, x)
}

// e4m3Tie returns, for column c, an E4M3 value, a midpoint between two E4M3
// values, or the largest value 448 (at c == 0, so that a row of them has the
// absmax 448 * its factor and a power-of-two scale).
func e4m3Tie(c int) float32 {
	if c == 0 {
		return 448
	}
	code := uint8(c*7) % 0x7E
	v := format.E4M3ToFloat32(code)
	if c%2 == 1 {
		v = (v + format.E4M3ToFloat32(code+1)) / 2
	}
	if c%3 == 0 {
		v = -v
	}
	return v
}

// nvfp4TieMatrix returns a [rows, 256] matrix whose absmax is 2688, so that
// CT's global scale is 1 and ModelOpt's weight_scale_2 is 1, and whose
// groups of 16 have absmax 6*2^p: each group's scale is 2^p exactly and its
// elements are E2M1 values, midpoints (ties) and their BF16 neighbours
// times 2^p.
func nvfp4TieMatrix(rows int) Matrix {
	ties := []float32{0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5}
	x := make([]float32, rows*256)
	for i := range x {
		g, j := i/16, i%16
		p := float32(math.Ldexp(1, g%12-6))
		var v float32
		switch {
		case j < 7: // exact ties
			v = ties[j]
		case j < 14: // their BF16 neighbours, above or below by group
			b := format.BF16FromFloat32(ties[j-7])
			if g%2 == 0 {
				b++
			} else {
				b--
			}
			v = format.BF16ToFloat32(b)
		case j == 14:
			v = float32(g % 7) // an E2M1 value or 0
		default:
			v = 6 // the group's absmax
		}
		if (g+j)%3 == 0 {
			v = -v
		}
		x[i] = v * p
	}
	x[0] = 2688
	return refBF16(rows, 256, x)
}

var testShapes = [][2]int{{1, 16}, {3, 32}, {8, 48}, {9, 272}, {17, 256}, {130, 384}, {257, 256}, {64, 1024}}

func forShapes(t *testing.T, f func(t *testing.T, m Matrix)) {
	for i, sh := range testShapes {
		m := testMatrix(uint64(i+1), sh[0], sh[1])
		t.Run(fmt.Sprintf("%dx%d", sh[0], sh[1]), func(t *testing.T) { f(t, m) })
	}
	t.Run("nvfp4ties", func(t *testing.T) { f(t, nvfp4TieMatrix(4)) })
}

func sameBytes(t *testing.T, what string, got, want []byte) {
	t.Helper()
	if bytes.Equal(got, want) {
		return
	}
	for i := range min(len(got), len(want)) {
		if got[i] != want[i] {
			t.Errorf("%s: byte %d of %d is %#02x, want %#02x", what, i, len(want), got[i], want[i])
			return
		}
	}
	t.Errorf("%s: %d bytes, want %d", what, len(got), len(want))
}

func TestFP8MatchesReference(t *testing.T) {
	type fn struct {
		name string
		fast func(*FP8Weight, Matrix) error
		ref  func(Matrix) ([]byte, []byte)
		ok   func(Matrix) bool
	}
	all := func(Matrix) bool { return true }
	fns := []fn{
		{"CTFP8Channel", CTFP8Channel, refCTFP8Channel, all},
		{"CTFP8Tensor", CTFP8Tensor, refCTFP8Tensor, all},
		{"CTFP8Block", CTFP8Block, refCTFP8Block, func(m Matrix) bool { return m.Cols%128 == 0 }},
		{"ModelOptFP8Channel", ModelOptFP8Channel, refMOFP8Channel, all},
		{"ModelOptFP8Tensor", ModelOptFP8Tensor, refMOFP8Tensor, all},
	}
	forShapes(t, func(t *testing.T, m Matrix) {
		var dst FP8Weight // reused across the functions
		for _, f := range fns {
			if !f.ok(m) {
				continue
			}
			if err := f.fast(&dst, m); err != nil {
				t.Fatalf("%s: %v", f.name, err)
			}
			w, s := f.ref(m)
			sameBytes(t, f.name+" weight", dst.Weight, w)
			sameBytes(t, f.name+" weight_scale", dst.Scale, s)
		}
	})
}

func TestNVFP4MatchesReference(t *testing.T) {
	forShapes(t, func(t *testing.T, m Matrix) {
		if m.Cols%16 != 0 {
			return
		}
		amax := m.AbsMax()
		// The matrix alone, and as the smaller member of a group.
		for _, group := range []float32{amax, amax * 3} {
			gs, err := CTNVFP4GlobalScale(amax, group)
			if err != nil {
				t.Fatal(err)
			}
			var dst NVFP4Weight
			if err := CTNVFP4(&dst, m, gs); err != nil {
				t.Fatalf("CTNVFP4: %v", err)
			}
			p, s := refCTNVFP4(m, gs)
			sameBytes(t, "CTNVFP4 weight_packed", dst.Packed, p)
			sameBytes(t, "CTNVFP4 weight_scale", dst.Scale, s)
			sameBytes(t, "CTNVFP4 weight_global_scale", dst.GlobalScale, refF32Bytes([]float32{gs}))

			s2, err := ModelOptNVFP4WeightScale2(group, amax)
			if err != nil {
				t.Fatal(err)
			}
			if err := ModelOptNVFP4(&dst, m, s2); err != nil {
				t.Fatalf("ModelOptNVFP4: %v", err)
			}
			p, s = refMONVFP4(m, s2)
			sameBytes(t, "ModelOptNVFP4 weight", dst.Packed, p)
			sameBytes(t, "ModelOptNVFP4 weight_scale", dst.Scale, s)
			sameBytes(t, "ModelOptNVFP4 weight_scale_2", dst.GlobalScale, refF32Bytes([]float32{s2}))
		}
	})
}

// The tie matrix really has ties: its scales are powers of two and some
// quotients sit exactly on E2M1 midpoints.
func TestNVFP4TieMatrix(t *testing.T) {
	m := nvfp4TieMatrix(2)
	gs, _ := CTNVFP4GlobalScale(m.AbsMax())
	s2, _ := ModelOptNVFP4WeightScale2(m.AbsMax())
	if gs != 1 || s2 != 1 {
		t.Fatalf("global scale %v, weight_scale_2 %v, want 1 and 1", gs, s2)
	}
	var dst NVFP4Weight
	if err := CTNVFP4(&dst, m, gs); err != nil {
		t.Fatal(err)
	}
	if dst.Scale[1] != format.E4M3FromFloat32(0x1p-5) { // group 1: p = -5
		t.Errorf("group 1 scale code %#x, want 2^-5", dst.Scale[1])
	}
	// Element 19 (group 1, j = 3): 1.75 * 2^-5 / 2^-5 is a tie that goes
	// to 2 (code 4); element 17 (j = 1), 0.75, goes to 1 (code 2); element
	// 18 (j = 2, negative), -1.25, goes to -1 (code 10).
	if c := dst.Packed[9] >> 4; c != 4 {
		t.Errorf("tie 1.75 encoded as %d, want 4", c)
	}
	if c := dst.Packed[8] >> 4; c != 2 {
		t.Errorf("tie 0.75 encoded as %d, want 2", c)
	}
	if c := dst.Packed[9] & 0xF; c != 10 {
		t.Errorf("tie -1.25 encoded as %d, want 10", c)
	}
}

// ModelOpt's zero-scale path: a group whose block scale underflows E4M3
// gets code 0 and the division-by-zero codes; CT gives it 0.125 and zeros.
func TestNVFP4UnderflowingGroup(t *testing.T) {
	x := make([]float32, 32)
	x[0] = 2688
	for i := 16; i < 32; i++ {
		x[i] = float32(i-24) * 0x1p-20 // |x| < 2^-17: 448*amax16/2688 < 2^-10
	}
	x[16+8] = float32(math.Copysign(0, -1))
	m := refBF16(1, 32, x)
	s2, _ := ModelOptNVFP4WeightScale2(m.AbsMax())
	var dst NVFP4Weight
	if err := ModelOptNVFP4(&dst, m, s2); err != nil {
		t.Fatal(err)
	}
	if dst.Scale[1] != 0 {
		t.Fatalf("ModelOpt scale code %#x, want 0", dst.Scale[1])
	}
	want := []byte{0xFF, 0xFF, 0xFF, 0xFF, 0x77, 0x77, 0x77, 0x77} // w<0: 15; w=±0 (NaN): 7; w>0: 7
	sameBytes(t, "ModelOpt packed", dst.Packed[8:], want)
	gs, _ := CTNVFP4GlobalScale(m.AbsMax())
	if err := CTNVFP4(&dst, m, gs); err != nil {
		t.Fatal(err)
	}
	if dst.Scale[1] != 0x20 {
		t.Fatalf("CT scale code %#x, want 0x20 (0.125)", dst.Scale[1])
	}
	// Negative quotients round to -0 (code 8); -0.0 and positives to 0.
	sameBytes(t, "CT packed", dst.Packed[8:], []byte{0x88, 0x88, 0x88, 0x88, 0, 0, 0, 0})
}

func TestGlobalScales(t *testing.T) {
	for b := uint16(1); b < 0x7F80; b += 3 {
		a := format.BF16ToFloat32(b)
		gs, err := CTNVFP4GlobalScale(a)
		if err != nil {
			t.Fatal(err)
		}
		want := format.NVFP4GlobalScale(a, format.BF16)
		if math.IsInf(float64(want), 0) {
			want = 1
		}
		if gs != want {
			t.Fatalf("CTNVFP4GlobalScale(%v) = %v, want %v", a, gs, want)
		}
		s2, err := ModelOptNVFP4WeightScale2(a / 2)
		if err != nil {
			t.Fatal(err)
		}
		if want := format.RoundBF16(a/2) / 2688; s2 != want {
			t.Fatalf("ModelOptNVFP4WeightScale2(%v) = %v, want %v", a/2, s2, want)
		}
	}
	if gs, err := CTNVFP4GlobalScale(0, 0); err != nil || gs != 1 {
		t.Errorf("CTNVFP4GlobalScale(0, 0) = %v, %v; want 1 (CT's replacement for 2688/0)", gs, err)
	}
	if gs, _ := CTNVFP4GlobalScale(1, 3, 2); gs != format.NVFP4GlobalScale(3, format.BF16) {
		t.Errorf("the group's scale is not the scale of its largest member")
	}
	for _, bad := range [][]float32{nil, {float32(math.NaN())}, {1, float32(math.Inf(1))}, {-1}} {
		if _, err := CTNVFP4GlobalScale(bad...); !errors.Is(err, ErrNotFinite) {
			t.Errorf("CTNVFP4GlobalScale(%v): err %v, want ErrNotFinite", bad, err)
		}
		if _, err := ModelOptNVFP4WeightScale2(bad...); !errors.Is(err, ErrNotFinite) {
			t.Errorf("ModelOptNVFP4WeightScale2(%v): err %v, want ErrNotFinite", bad, err)
		}
	}
	if _, err := ModelOptNVFP4WeightScale2(0); !errors.Is(err, ErrNotFinite) {
		t.Errorf("ModelOptNVFP4WeightScale2(0): err %v, want ErrNotFinite", err)
	}
}

func TestActivationScales(t *testing.T) {
	f32 := func(b []byte) float32 { return math.Float32frombits(binary.LittleEndian.Uint32(b)) }
	bf := func(b []byte) float32 { return format.BF16ToFloat32(binary.LittleEndian.Uint16(b)) }
	for b := uint16(0x0080); b < 0x7F80; b += 5 { // normal BF16 values
		a := format.BF16ToFloat32(b)
		ct := format.RoundBF16(a / 448)
		if ct == 0 { // CT would store eps; these fail instead
			if _, err := CTFP8InputScale(a); !errors.Is(err, ErrNotFinite) {
				t.Fatalf("CTFP8InputScale(%v): err %v, want ErrNotFinite", a, err)
			}
			continue
		}
		if v, err := CTFP8InputScale(a); err != nil || len(v) != 2 || bf(v) != ct {
			t.Fatalf("CTFP8InputScale(%v) = %v, %v; want %v", a, v, err, ct)
		}
		if v, err := CTKVScale(a); err != nil || bf(v) != ct {
			t.Fatalf("CTKVScale(%v) = %v, %v; want %v", a, v, err, ct)
		}
		gs := format.NVFP4GlobalScale(a, format.BF16)
		v, err := CTNVFP4InputGlobalScale(a)
		switch {
		case math.IsInf(float64(gs), 0):
			if !errors.Is(err, ErrNotFinite) {
				t.Fatalf("CTNVFP4InputGlobalScale(%v): err %v, want ErrNotFinite", a, err)
			}
		case err != nil || len(v) != 4 || f32(v) != gs:
			t.Fatalf("CTNVFP4InputGlobalScale(%v) = %v, %v; want %v", a, v, err, gs)
		}
		if v, err := ModelOptFP8InputScale(a); err != nil || len(v) != 4 || f32(v) != a/448 {
			t.Fatalf("ModelOptFP8InputScale(%v) = %v, %v", a, v, err)
		}
		if v, err := ModelOptNVFP4InputScale(a); err != nil || f32(v) != a/2688 {
			t.Fatalf("ModelOptNVFP4InputScale(%v) = %v, %v", a, v, err)
		}
		if v, err := ModelOptKVScale(a); err != nil || f32(v) != max(a/448, 1) {
			t.Fatalf("ModelOptKVScale(%v) = %v, %v", a, v, err)
		}
	}
	// A float32 absmax is rounded to BF16 first.
	if v, _ := CTFP8InputScale(1.00001); bf(v) != format.RoundBF16(1.0/448) {
		t.Errorf("CTFP8InputScale(1.00001) = %v, want RoundBF16(1/448)", bf(v))
	}
	fns := map[string]func(float32) ([]byte, error){
		"CTFP8InputScale": CTFP8InputScale, "CTKVScale": CTKVScale, "CTNVFP4InputGlobalScale": CTNVFP4InputGlobalScale,
		"ModelOptFP8InputScale": ModelOptFP8InputScale, "ModelOptNVFP4InputScale": ModelOptNVFP4InputScale, "ModelOptKVScale": ModelOptKVScale,
	}
	for name, f := range fns {
		for _, a := range []float32{0, -1, float32(math.NaN()), float32(math.Inf(1)), 0x1p-149} {
			if v, err := f(a); !errors.Is(err, ErrNotFinite) {
				t.Errorf("%s(%v) = %v, %v; want an error wrapping ErrNotFinite", name, a, v, err)
			}
		}
	}
}

func TestErrors(t *testing.T) {
	good := testMatrix(9, 4, 256)
	nan := testMatrix(9, 4, 256)
	nan.BF16 = bytes.Clone(nan.BF16)
	binary.LittleEndian.PutUint16(nan.BF16[2*(2*256+17):], 0x7FC1)
	inf := testMatrix(9, 4, 256)
	inf.BF16 = bytes.Clone(inf.BF16)
	binary.LittleEndian.PutUint16(inf.BF16[2*(3*256+255):], 0xFF80)
	zero := Matrix{Rows: 2, Cols: 256, BF16: make([]byte, 2*2*256)}
	var f8 FP8Weight
	var f4 NVFP4Weight
	fp8 := map[string]func(*FP8Weight, Matrix) error{
		"CTFP8Channel": CTFP8Channel, "CTFP8Tensor": CTFP8Tensor, "CTFP8Block": CTFP8Block,
		"ModelOptFP8Channel": ModelOptFP8Channel, "ModelOptFP8Tensor": ModelOptFP8Tensor,
	}
	nv := map[string]func(*NVFP4Weight, Matrix, float32) error{"CTNVFP4": CTNVFP4, "ModelOptNVFP4": ModelOptNVFP4}
	wantErr := func(name string, err, target error) {
		t.Helper()
		if !errors.Is(err, target) {
			t.Errorf("%s: err %v, want %v", name, err, target)
		}
	}
	for name, f := range fp8 {
		wantErr(name+"(NaN)", f(&f8, nan), ErrNotFinite)
		wantErr(name+"(Inf)", f(&f8, inf), ErrNotFinite)
		wantErr(name+"(short)", f(&f8, Matrix{Rows: 4, Cols: 256, BF16: good.BF16[2:]}), ErrShape)
		wantErr(name+"(0 rows)", f(&f8, Matrix{Rows: 0, Cols: 256}), ErrShape)
	}
	for name, f := range nv {
		wantErr(name+"(NaN)", f(&f4, nan, 1), ErrNotFinite)
		wantErr(name+"(Inf)", f(&f4, inf, 1), ErrNotFinite)
		wantErr(name+"(cols 24)", f(&f4, refBF16(2, 24, make([]float32, 48)), 1), ErrShape)
		wantErr(name+"(scale 0)", f(&f4, good, 0), ErrNotFinite)
		wantErr(name+"(scale NaN)", f(&f4, good, float32(math.NaN())), ErrNotFinite)
	}
	err := CTFP8Block(&f8, refBF16(128, 200, make([]float32, 128*200)))
	wantErr("CTFP8Block(cols 200)", err, ErrShape)
	if err == nil || !bytes.Contains([]byte(err.Error()), []byte("[128, 200]")) {
		t.Errorf("CTFP8Block(cols 200): error %q does not name the shape", err)
	}
	wantErr("ModelOptFP8Tensor(zeros)", ModelOptFP8Tensor(&f8, zero), ErrNotFinite)
	for name, f := range fp8 { // every other FP8 function takes a zero matrix
		if name != "ModelOptFP8Tensor" {
			if err := f(&f8, zero); err != nil {
				t.Errorf("%s(zeros): %v", name, err)
			}
		}
	}
	// A global scale computed without this matrix.
	gs, _ := CTNVFP4GlobalScale(good.AbsMax() / 4)
	wantErr("CTNVFP4(small global scale)", CTNVFP4(&f4, good, gs), ErrNotFinite)
	s2, _ := ModelOptNVFP4WeightScale2(good.AbsMax() / 4)
	wantErr("ModelOptNVFP4(small weight_scale_2)", ModelOptNVFP4(&f4, good, s2), ErrNotFinite)
	// All-zero NVFP4 weights are fine for CT (scale 1, block scales 0.125).
	gs, _ = CTNVFP4GlobalScale(zero.AbsMax())
	if err := CTNVFP4(&f4, zero, gs); err != nil || gs != 1 || f4.Scale[0] != 0x20 {
		t.Errorf("CTNVFP4(zeros): %v, global scale %v, block scale %#x", err, gs, f4.Scale[0])
	}
}

func TestMatrixAbsMax(t *testing.T) {
	m := testMatrix(3, 9, 272)
	if got, want := m.AbsMax(), format.AbsMax(refDecode(m)); got != want {
		t.Errorf("AbsMax = %v, want %v", got, want)
	}
	m.BF16 = bytes.Clone(m.BF16)
	binary.LittleEndian.PutUint16(m.BF16[2*100:], 0xFF80)
	if got := m.AbsMax(); !math.IsInf(float64(got), 1) {
		t.Errorf("AbsMax with -Inf = %v, want +Inf", got)
	}
	binary.LittleEndian.PutUint16(m.BF16[2*101:], 0xFFC0)
	if got := m.AbsMax(); !math.IsNaN(float64(got)) {
		t.Errorf("AbsMax with NaN = %v, want NaN", got)
	}
	if got := (Matrix{Rows: 1, Cols: 3, BF16: make([]byte, 6)}).AbsMax(); got != 0 {
		t.Errorf("AbsMax of zeros = %v", got)
	}
}

// The encoders agree with package format's on every BF16 value and on
// random float32 values.
func TestEncoderTables(t *testing.T) {
	check := func(x float32) {
		if got, want := e4m3FromF32(x), format.E4M3FromFloat32(x); got != want {
			t.Fatalf("e4m3FromF32(%v) = %#x, want %#x", x, got, want)
		}
		want := format.E2M1FromFloat32(x)
		if x == 0 {
			want = 0
		}
		if got := e2m1Code(x); got != want {
			t.Fatalf("e2m1Code(%v) = %#x, want %#x", x, got, want)
		}
		if !math.IsInf(float64(x), 0) {
			b := math.Float32bits(format.RoundBF16(x)) >> 16
			if got, want := e4m3Mag(b&0x7FFF)|uint8(b>>8)&0x80, format.E4M3FromFloat32(format.RoundBF16(x)); got != want {
				t.Fatalf("e4m3 of RoundBF16(%v) = %#x, want %#x", x, got, want)
			}
		}
	}
	for b := range uint32(0xFF80 + 1) {
		if b&0x7FFF <= 0x7F80 {
			check(format.BF16ToFloat32(uint16(b)))
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 1 << 20 {
		u := rng.Uint32()
		if u&0x7FFFFFFF <= 0x7F800000 {
			check(math.Float32frombits(u))
		}
		// Dense near the E4M3 and E2M1 ranges.
		check(math.Float32frombits(0x3A000000 + rng.Uint32N(0x0A000000)))
	}
	if c := e2m1Code(float32(math.NaN())); c != 7 {
		t.Errorf("e2m1Code(NaN) = %d, want 7 (ModelOpt's)", c)
	}
	if c := e2m1Code(float32(math.Inf(-1))); c != 15 {
		t.Errorf("e2m1Code(-Inf) = %d, want 15", c)
	}
}

// float32(float64(w) * (1/float64(s))) is float32 division for every BF16 w.
func TestReciprocalDivision(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	scales := []float32{1, 3, 448, 1.0 / 448, 0x1p-149, 0x1.8p-140, 3e38, format.RoundBF16(0.3) / 448}
	for range 24 {
		scales = append(scales, math.Float32frombits(0x00800000+rng.Uint32N(0x7E000000)), // any normal
			format.E4M3ToFloat32(uint8(1+rng.IntN(126)))/format.NVFP4GlobalScale(rng.Float32()*10, format.BF16))
	}
	for _, s := range scales {
		inv := 1 / float64(s)
		for b := range uint32(0x7F80) {
			w := format.BF16ToFloat32(uint16(b))
			if got, want := float32(float64(w)*inv), w/s; got != want {
				t.Fatalf("%v * (1/%v) = %v, want %v", w, s, got, want)
			}
		}
	}
}

// Reusing dst allocates nothing.
func TestNoAllocs(t *testing.T) {
	m := testMatrix(5, 64, 256)
	gs, _ := CTNVFP4GlobalScale(m.AbsMax())
	s2, _ := ModelOptNVFP4WeightScale2(m.AbsMax())
	must := func(err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	var f8 FP8Weight
	var f4 NVFP4Weight
	fns := map[string]func(){
		"CTFP8Channel":       func() { must(CTFP8Channel(&f8, m)) },
		"CTFP8Tensor":        func() { must(CTFP8Tensor(&f8, m)) },
		"ModelOptFP8Channel": func() { must(ModelOptFP8Channel(&f8, m)) },
		"ModelOptFP8Tensor":  func() { must(ModelOptFP8Tensor(&f8, m)) },
		"CTNVFP4":            func() { must(CTNVFP4(&f4, m, gs)) },
		"ModelOptNVFP4":      func() { must(ModelOptNVFP4(&f4, m, s2)) },
	}
	for name, f := range fns {
		f()
		if n := testing.AllocsPerRun(5, f); n != 0 {
			t.Errorf("%s: %v allocations per call with a reused dst", name, n)
		}
	}
}
