package quantize

// Reference quantizers: plain loops over float32 values that state each
// formula once with package format's scalar helpers, as the tools write
// them. The fast paths in math*.go must agree with them byte for byte
// (math_test.go), and the golden file ties both to torch
// (math_golden_test.go).

import (
	"encoding/binary"
	"math"

	"github.com/lowbit-ai/lowbit/format"
)

// refDecode returns m's values as float32.
func refDecode(m Matrix) []float32 {
	x := make([]float32, m.Rows*m.Cols)
	format.DecodeBF16(x, m.BF16)
	return x
}

func refBF16Bytes(v []float32) []byte {
	b := make([]byte, 2*len(v))
	format.EncodeBF16(b, v)
	return b
}

func refF32Bytes(v []float32) []byte {
	b := make([]byte, 4*len(v))
	format.EncodeF32(b, v)
	return b
}

// refCTFP8Channel: scale = FP8Scale(amax_row, BF16); codes =
// E4M3(RoundBF16(w / scale)).
func refCTFP8Channel(m Matrix) (w, s []byte) {
	x := refDecode(m)
	w = make([]byte, len(x))
	sc := make([]float32, m.Rows)
	for r := range m.Rows {
		row := x[r*m.Cols : (r+1)*m.Cols]
		sc[r] = format.FP8Scale(format.AbsMax(row), format.BF16)
		format.QuantizeE4M3(w[r*m.Cols:(r+1)*m.Cols], row, sc[r], format.BF16)
	}
	return w, refBF16Bytes(sc)
}

// refCTFP8Tensor: one scale for the whole matrix.
func refCTFP8Tensor(m Matrix) (w, s []byte) {
	x := refDecode(m)
	sc := format.FP8Scale(format.AbsMax(x), format.BF16)
	w = make([]byte, len(x))
	format.QuantizeE4M3(w, x, sc, format.BF16)
	return w, refBF16Bytes([]float32{sc})
}

// refCTFP8Block: one scale per 128x128 block (the last row of blocks may be
// partial), codes as for the channel scheme.
func refCTFP8Block(m Matrix) (w, s []byte) {
	const bs = 128
	x := refDecode(m)
	nbr, nbc := (m.Rows+bs-1)/bs, m.Cols/bs
	w = make([]byte, len(x))
	sc := make([]float32, nbr*nbc)
	for br := range nbr {
		for bc := range nbc {
			var blk []float32
			for r := br * bs; r < min((br+1)*bs, m.Rows); r++ {
				blk = append(blk, x[r*m.Cols+bc*bs:r*m.Cols+(bc+1)*bs]...)
			}
			s := format.FP8Scale(format.AbsMax(blk), format.BF16)
			sc[br*nbc+bc] = s
			for r := br * bs; r < min((br+1)*bs, m.Rows); r++ {
				i := r*m.Cols + bc*bs
				format.QuantizeE4M3(w[i:i+bs], x[i:i+bs], s, format.BF16)
			}
		}
	}
	return w, refBF16Bytes(sc)
}

// refMOFP8Channel: amax 0 -> 448, at least 2^-126; scale = amax/448 in
// float32; codes = E4M3(w / scale) rounded once.
func refMOFP8Channel(m Matrix) (w, s []byte) {
	x := refDecode(m)
	w = make([]byte, len(x))
	sc := make([]float32, m.Rows)
	for r := range m.Rows {
		row := x[r*m.Cols : (r+1)*m.Cols]
		a := format.AbsMax(row)
		if a == 0 {
			a = 448
		}
		a = max(a, 0x1p-126)
		sc[r] = a / 448
		for i, v := range row {
			w[r*m.Cols+i] = format.E4M3FromFloat32Torch(v / sc[r])
		}
	}
	return w, refF32Bytes(sc)
}

// refMOFP8Tensor: scale = amax/448 in float32; codes = E4M3(RoundBF16(w /
// scale)).
func refMOFP8Tensor(m Matrix) (w, s []byte) {
	x := refDecode(m)
	sc := format.AbsMax(x) / 448
	w = make([]byte, len(x))
	for i, v := range x {
		w[i] = format.E4M3FromFloat32Torch(format.RoundBF16(v / sc))
	}
	return w, refF32Bytes([]float32{sc})
}

// refCTNVFP4: CT's block scale (format.NVFP4BlockScale, compute BF16), then
// E2M1 of the float32 quotient, the sign kept only for a negative quotient
// (torch.sign(-0.0) is +0).
func refCTNVFP4(m Matrix, gs float32) (packed, scales []byte) {
	x := refDecode(m)
	packed = make([]byte, len(x)/2)
	scales = make([]byte, len(x)/16)
	codes := make([]uint8, len(x))
	for b := range scales {
		blk := x[16*b : 16*(b+1)]
		sc := format.NVFP4BlockScale(format.AbsMax(blk), gs, format.BF16)
		scales[b] = sc
		s := format.E4M3ToFloat32(sc) / gs
		for i, v := range blk {
			q := v / s
			c := format.E2M1FromFloat32(q)
			if q == 0 {
				c = 0
			}
			codes[16*b+i] = c
		}
	}
	format.PackE2M1(packed, codes)
	return packed, scales
}

// refMONVFP4: ModelOpt's per-block scale and its _cast_fp4, written out
// with a literal searchsorted over the E2M1 midpoints.
func refMONVFP4(m Matrix, s2 float32) (packed, scales []byte) {
	x := refDecode(m)
	packed = make([]byte, len(x)/2)
	scales = make([]byte, len(x)/16)
	codes := make([]uint8, len(x))
	d := float32(6 * s2)
	for b := range scales {
		blk := x[16*b : 16*(b+1)]
		pbs := format.AbsMax(blk) / d
		if pbs == 0 {
			pbs = 1
		}
		sc := format.E4M3FromFloat32Torch(pbs)
		scales[b] = sc
		s := float32(format.E4M3ToFloat32(sc) * s2)
		for i, v := range blk {
			codes[16*b+i] = refModelOptCastFP4(v / s)
		}
	}
	format.PackE2M1(packed, codes)
	return packed, scales
}

// refModelOptCastFP4 is NVFP4QTensor._cast_fp4 on one value: the sign bit
// from x < 0, the index from torch.searchsorted (left) of |x| in the
// midpoints, plus one where |x| equals an odd midpoint (0.75, 1.75, 3.5).
func refModelOptCastFP4(x float32) uint8 {
	bounds := [...]float32{0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5}
	var sign uint8
	if x < 0 {
		sign = 1
	}
	a := float32(math.Abs(float64(x)))
	// searchsorted: the first index whose bound is >= a; NaN compares false
	// everywhere and lands at the end.
	ord := uint8(len(bounds))
	for i, b := range bounds {
		if b >= a {
			ord = uint8(i)
			break
		}
	}
	var odd uint8
	if a == 0.75 || a == 1.75 || a == 3.5 {
		odd = 1
	}
	return sign<<3 + ord + odd
}

// refBF16 builds a Matrix from float32 values, rounding each to BF16.
func refBF16(rows, cols int, x []float32) Matrix {
	b := make([]byte, 2*len(x))
	for i, v := range x {
		binary.LittleEndian.PutUint16(b[2*i:], format.BF16FromFloat32(v))
	}
	return Matrix{Rows: rows, Cols: cols, BF16: b}
}
