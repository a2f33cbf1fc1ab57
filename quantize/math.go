package quantize

// The quantization math: each function in math*.go turns one BF16 weight
// matrix (or one calibrated absmax) into exactly the bytes a checkpoint
// format stores for it. Two formats are covered, compressed-tensors (CT,
// written by llm-compressor, read by vLLM's compressed_tensors scheme) and
// NVIDIA ModelOpt. The formulas, and the torch dtypes each step runs in,
// are those of the released tools; ../shared/specs/formats.md §1-§2 and
// the comments on each function give the sources, and
// scripts/golden_quantize.py re-implements them line by line in torch to
// produce testdata/golden/quantize/golden.safetensors, which
// math_golden_test.go compares with byte for byte.
//
// Speed. The functions make one pass over the matrix for the scales and one
// for the codes; neither allocates per element. Three exact shortcuts replace
// the scalar encoders of package format (which the reference loops in
// math_ref_test.go use, and which the tests compare with bit for bit):
//
//   - A quotient w/s of a BF16 weight w and a float32 scale s is computed
//     as float32(float64(w) * (1/float64(s))), with 1/float64(s) hoisted out
//     of the loop. That is exactly float32 division: w has 8 significant
//     bits and s 24, so w/s is never within 2^-49 (relative) of a float32
//     rounding midpoint unless it is exactly representable, while the
//     float64 product is within 2^-52 of w/s.
//   - E4M3 and E2M1 codes come from tables indexed by a 15-bit BF16
//     magnitude (32 KiB each, of which a few hundred bytes are ever hot).
//     For a value that is already BF16 (CT's FP8 path rounds to BF16 first)
//     the table is exact by construction. For a float32 value
//     the index is the value rounded to BF16 precision "to odd" (truncated,
//     with the last bit set when anything nonzero was cut off), and rounding
//     to odd with at least two spare bits followed by round-to-nearest-even
//     equals round-to-nearest-even directly.
//   - BF16 bit patterns are read four at a time with one 64-bit
//     little-endian load, and absolute maxima are integer maxima of the
//     15-bit magnitudes (BF16 magnitudes order like their bit patterns).

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/lowbit-ai/lowbit/format"
)

// Matrix is a 2-D BF16 weight in PyTorch's [out, in] layout: Rows output
// features of Cols input features each, row-major, every element a
// little-endian BF16. It is usually a zero-copy view of a memory-mapped
// safetensors tensor (checkpoint.Tensor.Data); nothing here writes to it or
// keeps it after returning. len(BF16) must be 2*Rows*Cols.
type Matrix struct {
	Rows, Cols int
	BF16       []byte
}

// ErrShape is wrapped by the errors of matrices a format cannot take: a
// size mismatch, or an input dimension a block size does not divide.
var ErrShape = errors.New("unsupported weight shape")

// ErrNotFinite is wrapped by the errors of weights that hold a NaN or an
// infinity, and of absmax values or scales that are zero, negative or not
// finite where a format needs a positive finite one.
var ErrNotFinite = errors.New("value out of range")

// Check reports whether m is well formed: positive dimensions and
// len(BF16) == 2*Rows*Cols. Every function here checks this first.
func (m Matrix) Check() error {
	if m.Rows <= 0 || m.Cols <= 0 {
		return fmt.Errorf("quantize: weight [%d, %d]: %w: dimensions must be positive", m.Rows, m.Cols, ErrShape)
	}
	if n := int64(m.Rows) * int64(m.Cols); n > math.MaxInt/2 || int64(len(m.BF16)) != 2*n {
		return fmt.Errorf("quantize: weight [%d, %d]: %w: %d bytes of data, want %d", m.Rows, m.Cols, ErrShape, len(m.BF16), 2*n)
	}
	return nil
}

// row returns the BF16 bytes of row r.
func (m Matrix) row(r int) []byte { return m.BF16[2*r*m.Cols : 2*(r+1)*m.Cols] }

// AbsMax returns the largest |w| of the matrix, exactly (a BF16 value), or
// 0 for a matrix that is all zeros. It returns NaN when any element is NaN
// and +Inf when any is infinite (and none is NaN). The group global scales
// of NVFP4 (CTNVFP4GlobalScale, ModelOptNVFP4WeightScale2) take the
// AbsMax of every member of a fused group. m must be well formed (Check);
// AbsMax panics otherwise.
func (m Matrix) AbsMax() float32 {
	if err := m.Check(); err != nil {
		panic(err.Error())
	}
	return bf16Value(absMaxBits(m.BF16))
}

// absMaxBits returns the largest 15-bit magnitude among the BF16 values in
// b. Above 0x7F80 (+Inf) it is a NaN.
func absMaxBits(b []byte) uint32 {
	var m0, m1, m2, m3 uint64
	for len(b) >= 8 {
		v := binary.LittleEndian.Uint64(b)
		m0 = max(m0, v&0x7FFF)
		m1 = max(m1, v>>16&0x7FFF)
		m2 = max(m2, v>>32&0x7FFF)
		m3 = max(m3, v>>48&0x7FFF)
		b = b[8:]
	}
	for len(b) >= 2 {
		m0 = max(m0, uint64(binary.LittleEndian.Uint16(b)&0x7FFF))
		b = b[2:]
	}
	return uint32(max(m0, m1, m2, m3))
}

// bf16Value returns the float32 value of a BF16 magnitude (or full bit
// pattern).
func bf16Value(bits uint32) float32 { return math.Float32frombits(bits << 16) }

// bf16Inf is the magnitude of a BF16 infinity; larger magnitudes are NaNs.
const bf16Inf = 0x7F80

// checkFinite returns an error unless the BF16 magnitude amax is finite;
// the error names the row (or, for block >= 0, the 128x128 block) it is in.
func checkFinite(m Matrix, amaxBits uint32, row, block int) error {
	if amaxBits < bf16Inf {
		return nil
	}
	where := "the matrix"
	switch {
	case block >= 0:
		where = fmt.Sprintf("block [%d, %d]", row, block)
	case row >= 0:
		where = fmt.Sprintf("row %d", row)
	}
	return fmt.Errorf("quantize: weight [%d, %d]: %w: %s holds %v", m.Rows, m.Cols, ErrNotFinite, where, bf16Value(amaxBits))
}

// CheckNVFP4Shape reports whether a [rows, cols] weight can be NVFP4 (CT or
// ModelOpt): its input dimension must be a multiple of the 16-element group,
// as the packers and vLLM's NVFP4 layers require. The error wraps ErrShape.
func CheckNVFP4Shape(rows, cols int) error {
	if rows <= 0 || cols <= 0 || cols%format.NVFP4BlockSize != 0 {
		return fmt.Errorf("quantize: weight [%d, %d]: %w: NVFP4 needs an input dimension that is a positive multiple of %d",
			rows, cols, ErrShape, format.NVFP4BlockSize)
	}
	return nil
}

// CheckFP8BlockShape reports whether a [rows, cols] weight can be FP8_BLOCK:
// its input dimension must be a multiple of 128. compressed-tensors itself
// only warns (it pads), but vLLM's block-FP8 kernels need whole 128-column
// blocks (CT quantization/lifecycle/initialize.py notes this); the output
// dimension may end in a partial block. The error wraps ErrShape.
func CheckFP8BlockShape(rows, cols int) error {
	if rows <= 0 || cols <= 0 || cols%format.FP8BlockSize != 0 {
		return fmt.Errorf("quantize: weight [%d, %d]: %w: FP8_BLOCK needs an input dimension that is a positive multiple of %d",
			rows, cols, ErrShape, format.FP8BlockSize)
	}
	return nil
}

// FP8Weight holds the tensors of one FP8 weight. The functions that fill
// it reuse the slices' backing arrays when their capacity suffices and
// allocate otherwise, so a caller that quantizes many matrices in turn can
// pass the same FP8Weight each time; a zero FP8Weight gets fresh slices. The
// results are overwritten by the next call with the same dst, so keep one
// FP8Weight per matrix in flight. Distinct dst values may be filled
// concurrently.
type FP8Weight struct {
	// Weight is "weight": F8_E4M3 codes, [Rows, Cols] row-major, one byte each.
	Weight []byte
	// Scale is "weight_scale"; its dtype and shape depend on the scheme and
	// format (see each function).
	Scale []byte
}

// NVFP4Weight holds the tensors of one NVFP4 weight, named as CT names them
// with ModelOpt's names in parentheses. Buffers are reused as for
// FP8Weight.
type NVFP4Weight struct {
	// Packed is "weight_packed" ("weight"): U8 [Rows, Cols/2], two E2M1 codes
	// per byte along the row, element 2i in the low nibble.
	Packed []byte
	// Scale is "weight_scale": F8_E4M3 [Rows, Cols/16], one code per group of
	// 16 consecutive elements of a row.
	Scale []byte
	// GlobalScale is "weight_global_scale" (F32 [1], a multiplier) for CT and
	// "weight_scale_2" (an F32 scalar, shape [], a divisor's reciprocal) for
	// ModelOpt: 4 bytes, little-endian, in both cases.
	GlobalScale []byte
}

// resize returns b with length n, reusing its backing array if it can.
func resize(b []byte, n int) []byte {
	if cap(b) >= n {
		return b[:n]
	}
	return make([]byte, n)
}

// f32Bytes returns v as 4 little-endian bytes, in b's array if it fits.
func f32Bytes(b []byte, v float32) []byte {
	b = resize(b, 4)
	binary.LittleEndian.PutUint32(b, math.Float32bits(v))
	return b
}

// bf16Bytes returns the BF16 value v (exactly representable) as 2 bytes.
func bf16Bytes(b []byte, v float32) []byte {
	b = resize(b, 2)
	binary.LittleEndian.PutUint16(b, uint16(math.Float32bits(v)>>16))
	return b
}

// Rounding to BF16 from float32 bits: to nearest even (c10's formula, which
// format.BF16FromFloat32 also uses; callers exclude NaN), and to odd.
func bf16RNE(bits uint32) uint32 { return (bits + 0x7FFF + (bits>>16)&1) >> 16 }
func bf16RTO(bits uint32) uint32 { return bits>>16 | (bits&0xFFFF+0xFFFF)>>16 }

// E4M3 codes of BF16 magnitudes, by 15-bit magnitude. Magnitudes up to
// 2^-10 (half the smallest subnormal, a tie that goes to the even 0) encode
// as 0, and magnitudes from 448 up as 0x7E: the encoding saturates, as CT's
// clamp before the cast does (and as torch's unclamped cast does below 464,
// which is all ModelOpt's unclamped casts ever see). The tables span every
// magnitude so that a lookup needs neither a clamp nor a bounds check; only
// the few lines between the limits are ever hot.
const (
	e4m3Lo = 0x3A80 // 2^-10
	e4m3Hi = 0x43E0 // 448
)

var e4m3FromBF16 = func() (t [0x8000]uint8) {
	for i := e4m3Lo; i <= e4m3Hi; i++ {
		t[i] = format.E4M3FromFloat32(bf16Value(uint32(i)))
	}
	for i := e4m3Hi + 1; i < len(t); i++ {
		t[i] = 0x7E
	}
	return t
}()

// e4m3Mag returns the E4M3 magnitude code of a BF16 magnitude (a value
// rounded to BF16 precision, to nearest even or to odd).
func e4m3Mag(mag uint32) uint8 { return e4m3FromBF16[mag&0x7FFF] }

// e4m3FromF32 returns the E4M3 code of float32 x (saturating, sign kept),
// exactly format.E4M3FromFloat32 for every non-NaN x.
func e4m3FromF32(x float32) uint8 {
	k := bf16RTO(math.Float32bits(x))
	return e4m3Mag(k) | uint8(k>>8)&0x80
}

// E2M1 magnitude codes of BF16 magnitudes: up to 0.25 (a tie that goes to
// 0) encode as 0, and from just above 5 (a tie between 4 and 6 that goes to
// 4) as 7, which also covers Inf and NaN (7 is what ModelOpt's searchsorted
// gives NaN; CT never produces one).
const (
	e2m1Lo = 0x3E80 // 0.25
	e2m1Hi = 0x40A1 // just above 5
)

var e2m1FromBF16 = func() (t [0x8000]uint8) {
	for i := e2m1Lo; i <= e2m1Hi; i++ {
		t[i] = format.E2M1FromFloat32(bf16Value(uint32(i)))
	}
	for i := e2m1Hi + 1; i < len(t); i++ {
		t[i] = 7
	}
	return t
}()

// e2m1Code returns the E2M1 code (0-15) of float32 x as both CT and
// ModelOpt store it: round to nearest even after clamping to ±6, and the
// sign bit set exactly when x < 0. So -0 gives +0 (code 0), as CT's
// torch.sign and ModelOpt's (x < 0) do, while a negative x that rounds to
// zero gives code 8, -0; NaN gives 7, ModelOpt's code for it. For non-NaN x
// other than -0 this is format.E2M1FromFloat32.
func e2m1Code(x float32) uint8 {
	b := math.Float32bits(x)
	code := e2m1FromBF16[bf16RTO(b)&0x7FFF]
	// The sign: bit 31 moved to bit 3, cleared for ±0 and NaN (whose
	// magnitude minus one wraps around or lands at or above +Inf's).
	neg := uint8(b>>28) & 8
	if b&0x7FFFFFFF-1 >= 0x7F800000 {
		neg = 0
	}
	return code | neg
}
