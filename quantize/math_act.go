package quantize

import (
	"fmt"
	"math"

	"github.com/lowbit-ai/lowbit/format"
)

// Activation-side scales: static input scales and KV-cache scales, from an
// absmax that calibration observed (the running max of |x| over every
// calibration token: llm-compressor's static_minmax observer, ModelOpt's max
// calibrator). Both tools observe BF16 activations and hold the absmax in
// BF16, so each function first rounds amax to BF16 (a no-op for an absmax
// of BF16 values). Each returns the stored bytes, little-endian.
//
// compressed-tensors (quantization/utils/helpers.py calculate_qparams and
// generate_gparam; quantization/lifecycle/initialize.py, which gives input
// and KV scales the observed BF16 dtype and global scales float32):
//
//	FP8 input_scale, k_scale, v_scale = amax / 448          BF16 [1]  (BF16 division)
//	NVFP4 input_global_scale          = 448 * 6 / amax      F32 [1]   (RoundBF16(RoundBF16(1/amax) * 2688))
//
// ModelOpt (export/quant_utils.py get_activation_scaling_factor,
// get_scaling_factor and postprocess_state_dict;
// qtensor/nvfp4_tensor.py get_activation_scaling_factor):
//
//	FP8 input_scale          = float32(amax') / 448         F32 scalar
//	NVFP4 input_scale        = float32(amax') / (6 * 448)   F32 scalar
//	k_proj.k_scale, v_scale  = max(float32(amax) / 448, 1)  F32 scalar
//
// where amax' is amax raised to at least 2^-126 (export_amax's clamp).
//
// Where the tools would silently substitute a value (CT: 2^-7 for a zero
// scale, 1 for an infinite global scale; ModelOpt: 448 or 6 for a zero
// absmax) these functions fail instead, with an error wrapping
// ErrNotFinite: an absmax that is zero, negative, NaN or infinite, or so
// small that the formula underflows or overflows, means the calibration did
// not see the module.
//
// ModelOpt divides a float32 tensor by a Python number; on a CUDA tensor
// torch computes that as a * (1/b), which differs from the division in the
// last bit for 20% to 54% of the BF16 values of amax. These functions
// divide, as torch does on the CPU (see math_golden_test.go). CT's BF16
// divisions give the same result either way.

// checkAmax validates and rounds a calibrated absmax.
func checkAmax(fn string, amax float32) (float32, error) {
	a := format.RoundBF16(amax)
	if !(a > 0) || math.IsInf(float64(a), 0) {
		return 0, fmt.Errorf("quantize: %s: %w: activation absmax %v (was the module calibrated?)", fn, ErrNotFinite, amax)
	}
	return a, nil
}

// ctFP8ActScale is CT's amax/448 in BF16, failing where CT would use eps.
func ctFP8ActScale(fn string, amax float32) (float32, error) {
	a, err := checkAmax(fn, amax)
	if err != nil {
		return 0, err
	}
	s := format.RoundBF16(a / format.E4M3Max)
	if s == 0 || math.IsInf(float64(s), 0) {
		return 0, fmt.Errorf("quantize: %s: %w: activation absmax %v gives a scale of %v", fn, ErrNotFinite, amax, s)
	}
	return s, nil
}

// CTFP8InputScale returns compressed-tensors' FP8 (static, per-tensor)
// input_scale, BF16 [1]: amax/448 evaluated in BF16.
func CTFP8InputScale(amax float32) ([]byte, error) {
	s, err := ctFP8ActScale("CTFP8InputScale", amax)
	if err != nil {
		return nil, err
	}
	return bf16Bytes(nil, s), nil
}

// CTKVScale returns compressed-tensors' per-tensor FP8 KV-cache scale
// (self_attn.k_scale or v_scale, from the absmax of the post-RoPE keys or of
// the values), BF16 [1]: amax/448 evaluated in BF16.
func CTKVScale(amax float32) ([]byte, error) {
	s, err := ctFP8ActScale("CTKVScale", amax)
	if err != nil {
		return nil, err
	}
	return bf16Bytes(nil, s), nil
}

// CTNVFP4InputGlobalScale returns compressed-tensors' NVFP4 (W4A4)
// input_global_scale, F32 [1]: 448*6/amax evaluated as generate_gparam
// does, reciprocal then multiply in BF16. vLLM inverts it on load.
func CTNVFP4InputGlobalScale(amax float32) ([]byte, error) {
	const fn = "CTNVFP4InputGlobalScale"
	a, err := checkAmax(fn, amax)
	if err != nil {
		return nil, err
	}
	gs := format.NVFP4GlobalScale(max(a, 0x1p-126), format.BF16)
	if math.IsInf(float64(gs), 0) {
		return nil, fmt.Errorf("quantize: %s: %w: activation absmax %v is so small that 2688/absmax overflows", fn, ErrNotFinite, amax)
	}
	return f32Bytes(nil, gs), nil
}

// moActScale is ModelOpt's float32(amax) / div; clampTiny applies
// export_amax's clamp(min=finfo.tiny), which the input scales go through and
// the KV scales do not.
func moActScale(fn string, amax, div float32, clampTiny bool) (float32, error) {
	a, err := checkAmax(fn, amax)
	if err != nil {
		return 0, err
	}
	if clampTiny {
		a = max(a, 0x1p-126)
	}
	s := a / div
	if s == 0 {
		return 0, fmt.Errorf("quantize: %s: %w: activation absmax %v gives a scale of 0", fn, ErrNotFinite, amax)
	}
	return s, nil
}

// ModelOptFP8InputScale returns ModelOpt's FP8 input_scale, an F32 scalar
// (shape []): float32(amax)/448.
func ModelOptFP8InputScale(amax float32) ([]byte, error) {
	s, err := moActScale("ModelOptFP8InputScale", amax, format.E4M3Max, true)
	if err != nil {
		return nil, err
	}
	return f32Bytes(nil, s), nil
}

// ModelOptNVFP4InputScale returns ModelOpt's NVFP4 input_scale, an F32
// scalar (shape []): float32(amax)/(6*448), the reciprocal of CT's
// input_global_scale.
func ModelOptNVFP4InputScale(amax float32) ([]byte, error) {
	s, err := moActScale("ModelOptNVFP4InputScale", amax, format.E2M1Max*format.E4M3Max, true)
	if err != nil {
		return nil, err
	}
	return f32Bytes(nil, s), nil
}

// ModelOptKVScale returns ModelOpt's FP8 KV-cache scale (self_attn.k_proj.k_scale
// or v_proj.v_scale), an F32 scalar (shape []): float32(amax)/448, raised
// to at least 1 as postprocess_state_dict does for an FP8 KV cache
// ("we recommend default kv cache scaling factor to be 1"), so that only an
// absmax above 448 changes it.
func ModelOptKVScale(amax float32) ([]byte, error) {
	s, err := moActScale("ModelOptKVScale", amax, format.E4M3Max, false)
	if err != nil {
		return nil, err
	}
	return f32Bytes(nil, max(s, 1)), nil
}
