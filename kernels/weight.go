package kernels

import "fmt"

// WeightFormat is how a linear layer's weight is stored in memory.
type WeightFormat uint8

const (
	// WeightBF16: Data holds Out*In little-endian BF16 values, row-major.
	WeightBF16 WeightFormat = iota + 1
	// WeightFP8Channel: Data holds Out*In E4M3 codes; Scales has Out
	// entries, w[o,i] = e4m3(Data[o*In+i]) * Scales[o].
	WeightFP8Channel
	// WeightFP8Tensor: as WeightFP8Channel with one scale, Scales[0].
	WeightFP8Tensor
	// WeightFP8Block: Scales has ceil(Out/128)*ceil(In/128) entries, row-major
	// over 128x128 blocks: w[o,i] = e4m3(Data[o*In+i]) * Scales[(o/128)*ceil(In/128)+i/128].
	WeightFP8Block
	// WeightNVFP4: Data holds Out*In/2 bytes of E2M1 codes, element 2i in
	// the low nibble; Scales has Out*In/16 entries, the E4M3 block scales
	// decoded to float32; w[o,i] = e2m1(code) * Scales[(o*In+i)/16] * GlobalScale.
	// GlobalScale is the dequantization multiplier: 1/weight_global_scale
	// of compressed-tensors, weight_scale_2 of ModelOpt.
	WeightNVFP4
)

func (f WeightFormat) String() string {
	switch f {
	case WeightBF16:
		return "bf16"
	case WeightFP8Channel:
		return "fp8-channel"
	case WeightFP8Tensor:
		return "fp8-tensor"
	case WeightFP8Block:
		return "fp8-block"
	case WeightNVFP4:
		return "nvfp4"
	}
	return fmt.Sprintf("WeightFormat(%d)", uint8(f))
}

// ActQuant is how a linear layer quantizes its input activations before the
// product. It is part of the numerical contract every backend implements:
// the CPU and CUDA kernels must give the same quantized activations, so the
// scales and quotients below are float32 operations evaluated exactly as
// written (amax/448 and x/s are divisions, never products with a
// reciprocal; (amax/6)·G in that order).
type ActQuant uint8

const (
	// ActNone: activations stay float32; y[t,o] = Σ_i x[t,i]·w[o,i].
	ActNone ActQuant = iota
	// ActFP8Token: per token t, s = max_i |x[t,i]| / 448 (s = 1 when the row
	// is all zeros); xq = E4M3(x/s) with round-to-nearest-even and
	// saturation to ±448; y = s · Σ_i e4m3(xq)·w[o,i].
	ActFP8Token
	// ActFP8Tensor: as ActFP8Token with the static s = InputScale.
	ActFP8Tensor
	// ActFP8Group128: per token and per group of 128 consecutive inputs g,
	// s[t,g] = max |x[t,g·128:(g+1)·128]| / 448 (1 for an all-zero group);
	// y = Σ_g s[t,g] · Σ_{i∈g} e4m3(xq)·w[o,i].
	ActFP8Group128
	// ActNVFP4: per token and group of 16 inputs, with the static global
	// scale G = InputScale (compressed-tensors' input_global_scale, a
	// multiplier): b = E4M3(max|x_g| / 6 · G) (b = 0.125 when that gives 0),
	// xq = E2M1(x / (e4m3(b) / G)) with round-to-nearest-even and clamping
	// to ±6; y = Σ_i e2m1(xq)·(e4m3(b)/G)·w[o,i].
	ActNVFP4
)

func (a ActQuant) String() string {
	switch a {
	case ActNone:
		return "none"
	case ActFP8Token:
		return "fp8-token"
	case ActFP8Tensor:
		return "fp8-tensor"
	case ActFP8Group128:
		return "fp8-group128"
	case ActNVFP4:
		return "nvfp4"
	}
	return fmt.Sprintf("ActQuant(%d)", uint8(a))
}

// Weight is a linear layer's weight, [Out, In] as in PyTorch, with the
// numerics its checkpoint declares. Every product accumulates in float32.
// Data and Scales are owned by the caller (often a mapped checkpoint) and
// must not change while the Weight is in use.
type Weight struct {
	Format      WeightFormat
	Out, In     int
	Data        []byte
	Scales      []float32
	GlobalScale float32
	Act         ActQuant
	// InputScale is the static activation scale of ActFP8Tensor (a
	// dequantization multiplier) or the input global scale of ActNVFP4 (a
	// quantization multiplier, as compressed-tensors stores it).
	InputScale float32
}

// Check reports whether w is consistent: sizes of Data and Scales for its
// format, and an activation quantization its format supports.
func (w *Weight) Check() error {
	if w.Out <= 0 || w.In <= 0 {
		return fmt.Errorf("kernels: weight [%d, %d]: dimensions must be positive", w.Out, w.In)
	}
	n := w.Out * w.In
	var data, scales int
	switch w.Format {
	case WeightBF16:
		data = 2 * n
	case WeightFP8Channel:
		data, scales = n, w.Out
	case WeightFP8Tensor:
		data, scales = n, 1
	case WeightFP8Block:
		data, scales = n, ((w.Out+127)/128)*((w.In+127)/128)
	case WeightNVFP4:
		if w.In%16 != 0 {
			return fmt.Errorf("kernels: nvfp4 weight [%d, %d]: In must be a multiple of 16", w.Out, w.In)
		}
		data, scales = n/2, n/16
	default:
		return fmt.Errorf("kernels: unknown weight format %v", w.Format)
	}
	if len(w.Data) != data || len(w.Scales) != scales {
		return fmt.Errorf("kernels: %v weight [%d, %d]: %d data bytes and %d scales, want %d and %d",
			w.Format, w.Out, w.In, len(w.Data), len(w.Scales), data, scales)
	}
	switch w.Act {
	case ActNone, ActFP8Token:
	case ActFP8Tensor:
		if !(w.InputScale > 0) {
			return fmt.Errorf("kernels: fp8-tensor activations need a positive InputScale")
		}
	case ActFP8Group128:
		if w.In%128 != 0 {
			return fmt.Errorf("kernels: fp8-group128 activations need In a multiple of 128, not %d", w.In)
		}
	case ActNVFP4:
		if w.In%16 != 0 || !(w.InputScale > 0) {
			return fmt.Errorf("kernels: nvfp4 activations need In a multiple of 16 and a positive InputScale")
		}
	default:
		return fmt.Errorf("kernels: unknown activation quantization %v", w.Act)
	}
	return nil
}
