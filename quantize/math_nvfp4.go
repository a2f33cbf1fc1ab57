package quantize

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/lowbit-ai/lowbit/format"
)

// NVFP4 weights: E2M1 codes in groups of 16 along the input dimension, one
// E4M3 scale per group, and one float32 scale per fused group of matrices.
//
// compressed-tensors, every release up to 0.18.0 (CT:
// quantization/utils/helpers.py generate_gparam and calculate_qparams,
// quantization/lifecycle/forward_helpers.py _quantize and _process_group,
// quantization/utils/fp4_utils.py cast_to_fp4, compressors/nvfp4/helpers.py
// pack_fp4_to_uint8; llm-compressor observers/base.py get_global_scale):
//
//	A     = max |w| over every matrix of the fused group     (BF16)
//	gs    = 2688 / A, as torch evaluates it: RoundBF16(RoundBF16(1/A) * 2688),
//	        with A at least 2^-126 and an overflow to Inf replaced by 1
//	        ("weight_global_scale", F32 [1])
//	local = RoundBF16(amax16 / 6)                           (amax16: the group of 16's absmax)
//	scale = E4M3(clamp(gs * local, ±448)), 0 replaced by 0.125   ("weight_scale", float32 product)
//	s     = float32(E4M3value(scale) / gs)
//	code  = E2M1(clamp(w / s, ±6))                          (float32 quotient, rounded once)
//
// The division w / s is float32 because the BF16 weight is divided by a
// float32 tensor. (A development version of CT, 2026-07-23 to 2026-08-06,
// rounded w / s to BF16 before the E2M1 thresholds, as
// format.QuantizeNVFP4Block does with compute BF16; no release did, and CT
// removed it in #820, so CT's NVFP4 here does not use that helper.)
//
// ModelOpt (modelopt/torch/quantization/qtensor/nvfp4_tensor.py
// get_weights_scaling_factor, quantize and _cast_fp4;
// export/quant_utils.py get_weight_scaling_factor_2; the fused group's amax
// is the max over its members, export/quant_utils.py preprocess_linear_fusion):
//
//	s2    = float32(A) / 2688                               ("weight_scale_2", F32 scalar)
//	pbs   = float32(amax16) / float32(6 * s2)               (float32)
//	pbs   = 1 where pbs == 0                                 (an all-zero group)
//	scale = E4M3(pbs)                                        ("weight_scale", torch's cast, unclamped)
//	code  = E2M1(w / float32(E4M3value(scale) * s2))        (float32 quotient; searchsorted on the E2M1 midpoints)
//
// A group whose pbs is positive but below 2^-10 gets scale code 0; ModelOpt
// then divides by zero, and its codes are 7 for w >= 0 (+Inf, and NaN for
// ±0) and 15 for w < 0. That is reproduced.
//
// Both pack two codes per byte, element 2i in the low nibble, and set a
// code's sign bit exactly when w / s < 0 (so -0.0 stores +0, and a small
// negative value that rounds to zero stores -0, code 8).

// CTNVFP4GlobalScale returns compressed-tensors' weight_global_scale for a
// fused group (q/k/v, gate/up, an expert's w1/w3, or a single matrix) from
// the AbsMax of each of its matrices: gs = 448*6/A with A the largest amax,
// evaluated as CT evaluates it (see above). A group that is all zeros gets
// 1, CT's replacement for the infinite quotient. It fails, with an error
// wrapping ErrNotFinite, when no amax is given or any is negative, NaN or
// infinite.
func CTNVFP4GlobalScale(amax ...float32) (float32, error) {
	a, err := groupAmax("CTNVFP4GlobalScale", amax)
	if err != nil {
		return 0, err
	}
	return ctGlobalScale(a), nil
}

// ctGlobalScale is generate_gparam on a BF16 amax (format.NVFP4GlobalScale
// with compute BF16) with its nan_to_num(posinf=1) step.
func ctGlobalScale(a float32) float32 {
	gs := format.NVFP4GlobalScale(format.RoundBF16(a), format.BF16)
	if math.IsInf(float64(gs), 0) {
		return 1
	}
	return gs
}

// ModelOptNVFP4WeightScale2 returns ModelOpt's weight_scale_2 for a fused
// group from the AbsMax of each of its matrices: float32(A)/(6*448) with A
// the largest amax. It fails, with an error wrapping ErrNotFinite, when no
// amax is given, any is negative, NaN or infinite, or all are zero (ModelOpt
// would store 0 and NaN block scales).
func ModelOptNVFP4WeightScale2(amax ...float32) (float32, error) {
	a, err := groupAmax("ModelOptNVFP4WeightScale2", amax)
	if err != nil {
		return 0, err
	}
	if a == 0 {
		return 0, fmt.Errorf("quantize: ModelOptNVFP4WeightScale2: %w: the group is all zeros, which ModelOpt's NVFP4 scales cannot represent", ErrNotFinite)
	}
	return format.RoundBF16(a) / (format.E2M1Max * format.E4M3Max), nil
}

// groupAmax returns the largest of the member absmax values.
func groupAmax(fn string, amax []float32) (float32, error) {
	if len(amax) == 0 {
		return 0, fmt.Errorf("quantize: %s: %w: no absmax given", fn, ErrNotFinite)
	}
	var a float32
	for i, v := range amax {
		if !(v >= 0) || math.IsInf(float64(v), 0) {
			return 0, fmt.Errorf("quantize: %s: %w: absmax %d is %v", fn, ErrNotFinite, i, v)
		}
		a = max(a, v)
	}
	return a, nil
}

// CTNVFP4 quantizes m as compressed-tensors' NVFP4 and NVFP4A16 presets do
// (weights: float, 4 bits, strategy tensor_group, group_size 16, scale_dtype
// float8_e4m3fn), with globalScale the group's CTNVFP4GlobalScale:
// dst.Packed gets "weight_packed", U8 [Rows, Cols/2]; dst.Scale gets
// "weight_scale", F8_E4M3 [Rows, Cols/16]; dst.GlobalScale gets
// "weight_global_scale", F32 [1], which is globalScale.
//
// It fails for a shape NVFP4 cannot take (CheckNVFP4Shape), a matrix that
// holds a NaN or an infinity, a globalScale that is not positive and finite,
// and a globalScale too small for the matrix (a block scale above 464,
// where the E4M3 cast would overflow: the global scale was not computed
// over a group that includes m). dst then holds partial results.
func CTNVFP4(dst *NVFP4Weight, m Matrix, globalScale float32) error {
	return ctNVFP4(dst, m, globalScale, nil)
}

// ctNVFP4 is CTNVFP4 with clip[b], when clip is not nil, for the absmax of
// group b (row-major, Cols/16 per row).
func ctNVFP4(dst *NVFP4Weight, m Matrix, globalScale float32, clip []float32) error {
	if err := checkNVFP4(m); err != nil {
		return err
	}
	if !(globalScale > 0) || math.IsInf(float64(globalScale), 0) {
		return fmt.Errorf("quantize: CTNVFP4: %w: global scale %v", ErrNotFinite, globalScale)
	}
	p := ctNVFP4Params(globalScale)
	p.clip = clip
	dst.GlobalScale = f32Bytes(dst.GlobalScale, p.s)
	return quantizeNVFP4(dst, m, p)
}

// ctNVFP4Params returns the constants of CT's NVFP4 with global scale gs.
func ctNVFP4Params(gs float32) *nvfp4Params {
	p := &nvfp4Params{modelOpt: false, s: gs}
	// inv[c] = 1/float64(s) for block scale code c: s = float32(E4M3value(c) / gs).
	// Code 0 never occurs (it becomes 0.125).
	for c := 1; c < 127; c++ {
		p.inv[c] = 1 / float64(format.E4M3ToFloat32(uint8(c))/p.s)
	}
	return p
}

// ModelOptNVFP4 quantizes m as ModelOpt's NVFP4 export does, with
// weightScale2 the group's ModelOptNVFP4WeightScale2: dst.Packed gets
// "weight", U8 [Rows, Cols/2]; dst.Scale gets "weight_scale", F8_E4M3
// [Rows, Cols/16]; dst.GlobalScale gets "weight_scale_2", an F32 scalar
// (shape []), which is weightScale2. It fails as CTNVFP4 does.
func ModelOptNVFP4(dst *NVFP4Weight, m Matrix, weightScale2 float32) error {
	return moNVFP4(dst, m, weightScale2, nil)
}

// moNVFP4 is ModelOptNVFP4 with clip[b], when clip is not nil, for the
// absmax of group b.
func moNVFP4(dst *NVFP4Weight, m Matrix, weightScale2 float32, clip []float32) error {
	if err := checkNVFP4(m); err != nil {
		return err
	}
	if !(weightScale2 > 0) || math.IsInf(float64(weightScale2), 0) {
		return fmt.Errorf("quantize: ModelOptNVFP4: %w: weight_scale_2 %v", ErrNotFinite, weightScale2)
	}
	p := moNVFP4Params(weightScale2)
	p.clip = clip
	dst.GlobalScale = f32Bytes(dst.GlobalScale, p.s)
	return quantizeNVFP4(dst, m, p)
}

// moNVFP4Params returns the constants of ModelOpt's NVFP4 with
// weight_scale_2 s2.
func moNVFP4Params(s2 float32) *nvfp4Params {
	p := &nvfp4Params{modelOpt: true, s: s2}
	p.d = float32(format.E2M1Max * p.s) // 6.0 * weights_scaling_factor_2, in float32
	// inv[c] = 1/float64(float32(E4M3value(c) * s2)); code 0 gives +Inf,
	// which quantizeNVFP4 handles apart.
	for c := range 127 {
		p.inv[c] = 1 / float64(float32(format.E4M3ToFloat32(uint8(c))*p.s))
	}
	return p
}

// nvfp4Params holds one NVFP4 call's per-tensor constants.
type nvfp4Params struct {
	modelOpt bool
	s        float32      // CT's global scale, or ModelOpt's weight_scale_2
	d        float32      // ModelOpt: float32(6 * weight_scale_2)
	inv      [128]float64 // 1/float64(element scale), by block scale code
	clip     []float32    // when set, each group's absmax as an MSE search chose it
}

// blockScale returns the scale code of a group of 16 whose absmax is amax.
func (p *nvfp4Params) blockScale(m Matrix, amax float32) (uint8, error) {
	if p.modelOpt {
		pbs := amax / p.d
		if pbs == 0 {
			pbs = 1 // per_block_scale[per_block_scale == 0] = 1.0
		}
		if pbs > nvfp4ScaleLimit {
			return 0, errNVFP4Scale(m, "weight_scale_2", p.s, pbs)
		}
		return e4m3FromF32(pbs), nil
	}
	local := format.RoundBF16(amax / format.E2M1Max)
	scale := p.s * local
	if scale > nvfp4ScaleLimit {
		return 0, errNVFP4Scale(m, "global scale", p.s, scale)
	}
	code := e4m3FromF32(scale)
	if code == 0 {
		code = 0x20 // 0.125, CT's eps for an FP8 scale
	}
	return code, nil
}

// nvfp4ScaleLimit is the largest block scale the E4M3 cast takes (torch
// rounds anything up to 464 to 448, and a correct global scale keeps every
// block scale within a few BF16 roundings of 448).
const nvfp4ScaleLimit = 464

func errNVFP4Scale(m Matrix, what string, v, scale float32) error {
	return fmt.Errorf("quantize: weight [%d, %d]: %w: %s %v gives a block scale of %v, beyond E4M3's range: compute it over a group that includes this matrix",
		m.Rows, m.Cols, ErrNotFinite, what, v, scale)
}

func checkNVFP4(m Matrix) error {
	if err := m.Check(); err != nil {
		return err
	}
	return CheckNVFP4Shape(m.Rows, m.Cols)
}

// quantizeNVFP4 runs the NVFP4 loop shared by both formats: for each group
// of 16 it computes the absmax and the scale code, and encodes the 16 E2M1
// codes of w / s. A scale whose inverse is +Inf (ModelOpt's code 0) takes
// ModelOpt's division-by-zero codes.
func quantizeNVFP4(dst *NVFP4Weight, m Matrix, p *nvfp4Params) error {
	const g = format.NVFP4BlockSize
	n := m.Rows * m.Cols
	dst.Packed = resize(dst.Packed, n/2)
	dst.Scale = resize(dst.Scale, n/g)
	src, packed, scales := m.BF16, dst.Packed, dst.Scale
	for b := range scales {
		blk := src[2*g*b : 2*g*(b+1) : 2*g*(b+1)]
		v := [4]uint64{
			binary.LittleEndian.Uint64(blk[0:]), binary.LittleEndian.Uint64(blk[8:]),
			binary.LittleEndian.Uint64(blk[16:]), binary.LittleEndian.Uint64(blk[24:]),
		}
		var amax uint64
		for _, x := range v {
			amax = max(amax, x&0x7FFF, x>>16&0x7FFF, x>>32&0x7FFF, x>>48&0x7FFF)
		}
		if amax >= bf16Inf {
			return checkFinite(m, uint32(amax), b*g/m.Cols, -1)
		}
		code, err := p.blockScale(m, clipped(p.clip, b, bf16Value(uint32(amax))))
		if err != nil {
			return err
		}
		scales[b] = code
		inv := p.inv[code&0x7F]
		out := packed[g/2*b : g/2*(b+1) : g/2*(b+1)]
		if math.IsInf(inv, 1) {
			encodeE2M1DivZero(out, blk)
			continue
		}
		for i, x := range v {
			o := out[2*i : 2*i+2 : 2*i+2]
			o[0] = e2m1Scaled(uint32(x)<<16, inv) | e2m1Scaled(uint32(x>>16)<<16, inv)<<4
			o[1] = e2m1Scaled(uint32(x>>32)<<16, inv) | e2m1Scaled(uint32(x>>48)<<16, inv)<<4
		}
	}
	return nil
}

// e2m1Scaled returns the E2M1 code of float32(w * inv) for the float32 bits
// w of a BF16 value.
func e2m1Scaled(w uint32, inv float64) uint8 {
	return e2m1Code(float32(float64(math.Float32frombits(w)) * inv))
}

// encodeE2M1DivZero packs ModelOpt's codes for a block whose scale is zero:
// w / 0 is +Inf, -Inf or NaN, which _cast_fp4 encodes as 7, 15 and 7.
func encodeE2M1DivZero(out, blk []byte) {
	for i := range out {
		lo := binary.LittleEndian.Uint16(blk[4*i:])
		hi := binary.LittleEndian.Uint16(blk[4*i+2:])
		out[i] = divZeroCode(lo) | divZeroCode(hi)<<4
	}
}

// divZeroCode is 15 for a negative BF16 w and 7 for the rest (±0 included).
func divZeroCode(w uint16) uint8 {
	nonzero := (uint32(w&0x7FFF) + 0x7FFF) >> 15 // 1 unless w is ±0
	return 7 | uint8(uint32(w>>15)&nonzero)<<3
}
