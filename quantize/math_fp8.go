package quantize

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/lowbit-ai/lowbit/format"
)

// FP8 E4M3 weights, in three layouts of the scale (per output channel, per
// tensor, per 128x128 block) and two formats.
//
// compressed-tensors (CT: quantization/utils/helpers.py calculate_qparams,
// quantization/lifecycle/forward_helpers.py _quantize and _process_block,
// compressors/naive_quantized/base.py) computes on the BF16 tensors it
// observes:
//
//	amax  = max |w| over the row, tensor or block       (BF16, exact)
//	scale = amax / 448                                   (BF16 division: float32, then rounded to BF16)
//	scale = finfo(bf16).eps = 2^-7 where scale == 0      (an all-zero or underflowing amax)
//	code  = E4M3(clamp(w / scale, -448, 448))           (w / scale is BF16 / BF16: rounded to BF16 first)
//
// and stores scale as BF16. format.FP8Scale and format.QuantizeE4M3 with
// compute BF16 state the same formulas; the golden file pins them to torch.
//
// ModelOpt (modelopt/torch/export/unified_export_hf.py _export_quantized_weight,
// quant_utils.py get_scaling_factor and to_quantized_weight,
// nn/modules/tensor_quantizer.py export_amax) computes in float32:
//
//	per channel:  amax = max |w| per row, 0 replaced by 448, at least 2^-126
//	              scale = float32(amax) / 448               (float32 [out])
//	              code  = E4M3(w / scale)                   (BF16 / F32 [out,1]: a float32 quotient, one rounding)
//	per tensor:   scale = float32(amax) / 448               (float32 scalar)
//	              code  = E4M3(w / scale)                   (BF16 / 0-dim F32 stays BF16: the quotient is rounded to BF16 first)
//
// ModelOpt casts without clamping; its quotients never exceed 464, below
// which torch's cast rounds to 448 exactly as a clamp would.
//
// Device dependence. The float32 scales are float32(amax) divided by a
// Python number: torch divides on the CPU, and on CUDA multiplies by the
// float32 reciprocal, which differs in the last bit for 20% (/2688) to 54%
// (/448) of the BF16 values of amax. (CT's BF16 divisions come out the same
// both ways.) And for the per-tensor weight, torch on the CPU
// (since 2.1) divides the BF16 weight by the exact float32 scale, while its
// CUDA kernel first casts the 0-dim float32 scale to BF16, which moves the
// quotients by up to 2^-9 and some codes by one step. These functions follow
// torch 2.11 on the CPU (the golden file's): the correctly rounded scale,
// and codes that use exactly the scale that is stored.
//
// The sign of zero: a weight of -0.0 encodes as 0x80 (-0), as
// clamp(w / scale).to(float8_e4m3fn) gives. (llm-compressor's oneshot flow
// also adds a symmetric zero point of 0.0 before the cast, which turns -0
// into +0, code 0x00; its model_free_ptq flow and ModelOpt keep 0x80. Both
// decode to zero.)

// CTFP8Channel quantizes m as compressed-tensors' FP8_DYNAMIC preset does
// (weights: float, 8 bits, strategy channel, symmetric, static): dst.Weight
// gets "weight", F8_E4M3 [Rows, Cols], and dst.Scale gets "weight_scale",
// BF16 [Rows, 1], one scale per output row. An all-zero row gets the scale
// 2^-7 and zero codes. It fails for a malformed matrix or one that holds a
// NaN or an infinity; dst then holds partial results.
func CTFP8Channel(dst *FP8Weight, m Matrix) error { return ctFP8Channel(dst, m, nil) }

// ctFP8Channel is CTFP8Channel with, when clip is not nil, clip[r] (a BF16
// value, at most the row's absmax) standing in for row r's absmax: the
// clipping ranges an MSE search chose.
func ctFP8Channel(dst *FP8Weight, m Matrix, clip []float32) error {
	if err := m.Check(); err != nil {
		return err
	}
	dst.Weight = resize(dst.Weight, m.Rows*m.Cols)
	dst.Scale = resize(dst.Scale, 2*m.Rows)
	for r := range m.Rows {
		row := m.row(r)
		amax := absMaxBits(row)
		if err := checkFinite(m, amax, r, -1); err != nil {
			return err
		}
		s := format.FP8Scale(clipped(clip, r, bf16Value(amax)), format.BF16)
		binary.LittleEndian.PutUint16(dst.Scale[2*r:], uint16(math.Float32bits(s)>>16))
		encodeE4M3ViaBF16(dst.Weight[r*m.Cols:(r+1)*m.Cols], row, 1/float64(s))
	}
	return nil
}

// CTFP8Tensor quantizes m as compressed-tensors' FP8 preset does (weights:
// strategy tensor, static): dst.Weight gets "weight", F8_E4M3 [Rows, Cols],
// and dst.Scale gets "weight_scale", BF16 [1]. An all-zero matrix gets the
// scale 2^-7. It fails for a malformed matrix or one that holds a NaN or an
// infinity.
//
// vLLM requantizes the per-tensor shards of a fused layer to their largest
// scale when it loads them, so the members of a fused group need no shared
// scale here.
func CTFP8Tensor(dst *FP8Weight, m Matrix) error { return ctFP8Tensor(dst, m, nil) }

// ctFP8Tensor is CTFP8Tensor with clip[0], when clip is not nil, for the
// absmax.
func ctFP8Tensor(dst *FP8Weight, m Matrix, clip []float32) error {
	if err := m.Check(); err != nil {
		return err
	}
	amax := absMaxBits(m.BF16)
	if err := checkFinite(m, amax, -1, -1); err != nil {
		return err
	}
	s := format.FP8Scale(clipped(clip, 0, bf16Value(amax)), format.BF16)
	dst.Scale = bf16Bytes(dst.Scale, s)
	dst.Weight = resize(dst.Weight, m.Rows*m.Cols)
	encodeE4M3ViaBF16(dst.Weight, m.BF16, 1/float64(s))
	return nil
}

// CTFP8Block quantizes m as compressed-tensors' FP8_BLOCK preset does
// (weights: strategy block, block_structure [128, 128]): dst.Weight gets
// "weight", F8_E4M3 [Rows, Cols], and dst.Scale gets "weight_scale", BF16
// [ceil(Rows/128), Cols/128] row-major, one scale per 128x128 block. The
// last row of blocks may be partial: CT zero-pads the matrix to whole
// blocks (maybe_pad_tensor_for_block_quant), which leaves every block's
// absmax unchanged, and cuts the padding off again. A block that is all
// zeros, or whose absmax/448 underflows BF16 (absmax below about 2^-125),
// gets the scale 2^-7.
//
// Cols must be a multiple of 128 (CheckFP8BlockShape). It fails for other
// shapes and for a matrix that holds a NaN or an infinity.
func CTFP8Block(dst *FP8Weight, m Matrix) error { return ctFP8Block(dst, m, nil) }

// ctFP8Block is CTFP8Block with clip[br*nbc+bc], when clip is not nil, for
// the absmax of block [br, bc].
func ctFP8Block(dst *FP8Weight, m Matrix, clip []float32) error {
	if err := m.Check(); err != nil {
		return err
	}
	if err := CheckFP8BlockShape(m.Rows, m.Cols); err != nil {
		return err
	}
	const bs = format.FP8BlockSize
	nbr, nbc := (m.Rows+bs-1)/bs, m.Cols/bs
	dst.Weight = resize(dst.Weight, m.Rows*m.Cols)
	dst.Scale = resize(dst.Scale, 2*nbr*nbc)
	amax := make([]uint32, nbc)
	inv := make([]float64, nbc)
	for br := range nbr {
		r0, r1 := br*bs, min((br+1)*bs, m.Rows)
		clear(amax)
		for r := r0; r < r1; r++ {
			row := m.row(r)
			for bc := range amax {
				amax[bc] = max(amax[bc], absMaxBits(row[2*bc*bs:2*(bc+1)*bs]))
			}
		}
		for bc, a := range amax {
			if err := checkFinite(m, a, br, bc); err != nil {
				return err
			}
			s := format.FP8Scale(clipped(clip, br*nbc+bc, bf16Value(a)), format.BF16)
			binary.LittleEndian.PutUint16(dst.Scale[2*(br*nbc+bc):], uint16(math.Float32bits(s)>>16))
			inv[bc] = 1 / float64(s)
		}
		for r := r0; r < r1; r++ {
			row, out := m.row(r), dst.Weight[r*m.Cols:(r+1)*m.Cols]
			for bc, v := range inv {
				encodeE4M3ViaBF16(out[bc*bs:(bc+1)*bs], row[2*bc*bs:2*(bc+1)*bs], v)
			}
		}
	}
	return nil
}

// ModelOptFP8Channel quantizes m as ModelOpt's FP8_PER_CHANNEL_PER_TOKEN
// export does: dst.Weight gets "weight", F8_E4M3 [Rows, Cols], and
// dst.Scale gets "weight_scale", F32 [Rows]. Each row's scale is
// float32(amax)/448 with export_amax's fixes applied to amax: an all-zero
// row counts as amax 448 (scale 1), and amax is at least 2^-126; codes are
// the single rounding of the float32 quotient. It fails for a malformed
// matrix or one that holds a NaN or an infinity.
func ModelOptFP8Channel(dst *FP8Weight, m Matrix) error { return moFP8Channel(dst, m, nil) }

// moFP8Channel is ModelOptFP8Channel with clip[r], when clip is not nil,
// for row r's absmax.
func moFP8Channel(dst *FP8Weight, m Matrix, clip []float32) error {
	if err := m.Check(); err != nil {
		return err
	}
	dst.Weight = resize(dst.Weight, m.Rows*m.Cols)
	dst.Scale = resize(dst.Scale, 4*m.Rows)
	for r := range m.Rows {
		row := m.row(r)
		a := absMaxBits(row)
		if err := checkFinite(m, a, r, -1); err != nil {
			return err
		}
		amax := clipped(clip, r, bf16Value(a))
		if amax == 0 {
			amax = format.E4M3Max // export_amax: amax[amax == 0] = maxbound
		}
		amax = max(amax, 0x1p-126) // export_amax: clamp(min=finfo(bfloat16).tiny)
		s := amax / format.E4M3Max
		binary.LittleEndian.PutUint32(dst.Scale[4*r:], math.Float32bits(s))
		encodeE4M3(dst.Weight[r*m.Cols:(r+1)*m.Cols], row, 1/float64(s))
	}
	return nil
}

// ModelOptFP8Tensor quantizes m as ModelOpt's FP8 (per-tensor) export
// does: dst.Weight gets "weight", F8_E4M3 [Rows, Cols], and dst.Scale gets
// "weight_scale", an F32 scalar (shape []), float32(amax)/448. The weight
// is divided by that 0-dim float32 tensor while staying BF16, so each
// quotient is rounded to BF16 before the cast, as in CT. (ModelOpt on CUDA
// rounds the divisor to BF16 too; see "Device dependence" above.)
//
// ModelOpt has no fallback for an all-zero matrix (its scale would be 0 and
// its codes NaN), so that fails with an error wrapping ErrNotFinite, as do
// a malformed matrix and one that holds a NaN or an infinity.
func ModelOptFP8Tensor(dst *FP8Weight, m Matrix) error { return moFP8Tensor(dst, m, nil) }

// moFP8Tensor is ModelOptFP8Tensor with clip[0], when clip is not nil, for
// the absmax.
func moFP8Tensor(dst *FP8Weight, m Matrix, clip []float32) error {
	if err := m.Check(); err != nil {
		return err
	}
	a := absMaxBits(m.BF16)
	if err := checkFinite(m, a, -1, -1); err != nil {
		return err
	}
	if a == 0 {
		return fmt.Errorf("quantize: weight [%d, %d]: %w: all zeros, which ModelOpt's per-tensor FP8 scale (absmax/448) cannot represent",
			m.Rows, m.Cols, ErrNotFinite)
	}
	s := clipped(clip, 0, bf16Value(a)) / format.E4M3Max
	dst.Scale = f32Bytes(dst.Scale, s)
	dst.Weight = resize(dst.Weight, m.Rows*m.Cols)
	encodeE4M3ViaBF16(dst.Weight, m.BF16, 1/float64(s))
	return nil
}

// encodeE4M3ViaBF16 writes dst[i] = E4M3(RoundBF16(w[i] / s)) for the
// len(dst) BF16 values w in src, with inv = 1/float64(s): CT's FP8 weight
// cast (and ModelOpt's per-tensor one).
func encodeE4M3ViaBF16(dst, src []byte, inv float64) {
	src = src[:2*len(dst)]
	for len(dst) >= 4 {
		v := binary.LittleEndian.Uint64(src)
		d := dst[:4:4]
		d[0] = e4m3ViaBF16(uint32(v)<<16, inv)
		d[1] = e4m3ViaBF16(uint32(v>>16)<<16, inv)
		d[2] = e4m3ViaBF16(uint32(v>>32)<<16, inv)
		d[3] = e4m3ViaBF16(uint32(v>>48)<<16, inv)
		dst, src = dst[4:], src[8:]
	}
	for i := range dst {
		dst[i] = e4m3ViaBF16(uint32(binary.LittleEndian.Uint16(src[2*i:]))<<16, inv)
	}
}

// e4m3ViaBF16 returns E4M3(RoundBF16(float32(w * inv))) for the float32
// bits w of a BF16 value.
func e4m3ViaBF16(w uint32, inv float64) uint8 {
	q := float32(float64(math.Float32frombits(w)) * inv)
	k := bf16RNE(math.Float32bits(q))
	return e4m3Mag(k&0x7FFF) | uint8(k>>8)&0x80
}

// encodeE4M3 writes dst[i] = E4M3(w[i] / s), the float32 quotient rounded
// once, for the len(dst) BF16 values w in src, with inv = 1/float64(s):
// ModelOpt's per-channel cast.
func encodeE4M3(dst, src []byte, inv float64) {
	src = src[:2*len(dst)]
	for len(dst) >= 4 {
		v := binary.LittleEndian.Uint64(src)
		d := dst[:4:4]
		d[0] = e4m3Direct(uint32(v)<<16, inv)
		d[1] = e4m3Direct(uint32(v>>16)<<16, inv)
		d[2] = e4m3Direct(uint32(v>>32)<<16, inv)
		d[3] = e4m3Direct(uint32(v>>48)<<16, inv)
		dst, src = dst[4:], src[8:]
	}
	for i := range dst {
		dst[i] = e4m3Direct(uint32(binary.LittleEndian.Uint16(src[2*i:]))<<16, inv)
	}
}

// e4m3Direct returns E4M3(float32(w * inv)) for the float32 bits w of a
// BF16 value.
func e4m3Direct(w uint32, inv float64) uint8 {
	return e4m3FromF32(float32(float64(math.Float32frombits(w)) * inv))
}

// clipped returns clip[i], the absmax an MSE search chose, or amax when
// there is no search (clip is nil).
func clipped(clip []float32, i int, amax float32) float32 {
	if clip == nil {
		return amax
	}
	return clip[i]
}
