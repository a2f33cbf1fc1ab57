package quantize

import (
	"fmt"
	"strings"

	"github.com/lowbit-ai/lowbit/checkpoint"
)

// Scheme is a quantization scheme: which number formats weights and
// activations take, and how their scales are laid out.
type Scheme uint8

const (
	FP8Dynamic Scheme = iota + 1 // FP8 weights with per-channel scales; activations quantized per token at run time
	FP8                          // FP8 weights and activations, static per-tensor scales (needs statistics)
	FP8Block                     // FP8 weights in 128x128 blocks; activations in 1x128 groups at run time
	NVFP4                        // FP4 E2M1 weights and activations in groups of 16 with E4M3 scales (input global scale needs statistics)
	NVFP4A16                     // FP4 E2M1 weights in groups of 16; 16-bit activations
)

var schemeNames = map[Scheme][2]string{ // CLI name, compressed-tensors preset
	FP8Dynamic: {"fp8-dynamic", checkpoint.SchemeFP8Dynamic},
	FP8:        {"fp8", checkpoint.SchemeFP8},
	FP8Block:   {"fp8-block", checkpoint.SchemeFP8Block},
	NVFP4:      {"nvfp4", checkpoint.SchemeNVFP4},
	NVFP4A16:   {"nvfp4a16", checkpoint.SchemeNVFP4A16},
}

// ParseScheme reads a scheme's CLI name (fp8-dynamic, fp8, fp8-block, nvfp4,
// nvfp4a16).
func ParseScheme(s string) (Scheme, error) {
	for sc, n := range schemeNames {
		if strings.EqualFold(s, n[0]) {
			return sc, nil
		}
	}
	return 0, fmt.Errorf("quantize: unknown scheme %q: choose fp8-dynamic, fp8, fp8-block, nvfp4 or nvfp4a16", s)
}

// String returns the CLI name.
func (s Scheme) String() string { return schemeNames[s][0] }

// Preset returns the compressed-tensors preset name (checkpoint.Scheme*).
func (s Scheme) Preset() string { return schemeNames[s][1] }

// FP4 reports whether weights are NVFP4.
func (s Scheme) FP4() bool { return s == NVFP4 || s == NVFP4A16 }

// StaticInputs reports whether the scheme stores activation scales, which
// come from calibration statistics.
func (s Scheme) StaticInputs() bool { return s == FP8 || s == NVFP4 }

// Format is the on-disk layout of a quantized checkpoint.
type Format uint8

const (
	CompressedTensors Format = iota + 1 // llm-compressor's layout, quant_method "compressed-tensors"
	ModelOpt                            // NVIDIA ModelOpt's layout, quant_method "modelopt" and hf_quant_config.json
)

// ParseFormat reads a format's CLI name.
func ParseFormat(s string) (Format, error) {
	switch strings.ToLower(s) {
	case "compressed-tensors", "ct":
		return CompressedTensors, nil
	case "modelopt":
		return ModelOpt, nil
	}
	return 0, fmt.Errorf("quantize: unknown format %q: choose compressed-tensors or modelopt", s)
}

func (f Format) String() string {
	if f == ModelOpt {
		return "modelopt"
	}
	return "compressed-tensors"
}
