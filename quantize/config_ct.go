package quantize

import (
	"encoding/json"
	"fmt"

	"github.com/lowbit-ai/lowbit/checkpoint"
)

// The compressed-tensors quantization_config, as llm-compressor writes it
// (compressed-tensors ModelCompressor.update_config: the QuantizationConfig
// model dump plus quant_method, sparsity_config and transform_config, with
// sorted keys; formats.md §1.0), except for two choices made for older
// loaders.
//
// 1. QuantizationArgs carry only the keys that decide the scheme:
//    num_bits, type, strategy, symmetric, dynamic, and group_size or
//    block_structure where the strategy needs one. compressed-tensors
//    declares QuantizationArgs and QuantizationScheme with extra="forbid"
//    since 0.11.0 (commit d418aea, 2025-08), and added scale_dtype and
//    zp_dtype in 0.13.0 (commit 8471264, 2025-11), so a vLLM that bundles
//    compressed-tensors 0.11 or 0.12 rejects the config llm-compressor
//    writes today. Every key left out has a default that gives the same
//    scheme: actorder (null; lowbit writes no g_idx), observer and
//    observer_kwargs (calibration-time settings no loader reads),
//    scale_dtype (the NVFP4 E4M3 block scales are implied by
//    nvfp4-pack-quantized), zp_dtype (null for symmetric schemes). All the
//    kept keys exist in every compressed-tensors release vLLM has used;
//    block_structure as a list needs 0.11 (earlier ones took "128x128"),
//    the release that introduced the block strategy, and dynamic "local"
//    with tensor_group needs 0.10, the one that introduced NVFP4
//    activations.
// 2. "version" (the compressed-tensors version) is left out: no loader
//    reads it (vLLM's CompressedTensorsConfig.from_config reads ignore,
//    format, config_groups, sparsity_config, transform_config and
//    kv_cache_scheme; QuantizationConfig ignores unknown top-level keys),
//    and lowbit is not compressed-tensors.
//
// Keys and their sources:
//
//	config_groups.group_0   one QuantizationScheme: targets ["Linear"] (every
//	                        linear layer, routers included, minus ignore),
//	                        weights, input_activations (null for NVFP4A16),
//	                        output_activations null, format
//	format                  float-quantized (FP8: an FP weight with input
//	                        activations) or nvfp4-pack-quantized (FP4 with
//	                        group_size 16), compressors/format.py
//	global_compression_ratio null, as written
//	ignore                  the modules left unquantized, explicit names
//	                        when the module list is known (what
//	                        QuantizationConfig.from_pretrained writes),
//	                        always with lm_head
//	kv_cache_scheme         null for an auto KV cache, else per-tensor
//	                        symmetric static FP8, the only form vLLM's
//	                        CompressedTensorsKVCacheMethod accepts everywhere
//	quant_method            "compressed-tensors"
//	quantization_status     "compressed": the weights on disk are packed
//	sparsity_config         {}: llm-compressor writes it so; vLLM skips it
//	                        when empty
//	transform_config        {}: no rotations; vLLM skips it when empty

// ctJSONArgs is a compressed-tensors QuantizationArgs with only the keys above,
// in sorted order.
type ctJSONArgs struct {
	BlockStructure []int  `json:"block_structure,omitempty"`
	Dynamic        any    `json:"dynamic"` // false, true or "local"
	GroupSize      int    `json:"group_size,omitempty"`
	NumBits        int    `json:"num_bits"`
	Strategy       string `json:"strategy"`
	Symmetric      bool   `json:"symmetric"`
	Type           string `json:"type"`
}

type ctJSONGroup struct {
	Format            string      `json:"format"`
	InputActivations  *ctJSONArgs `json:"input_activations"`
	OutputActivations *ctJSONArgs `json:"output_activations"`
	Targets           []string    `json:"targets"`
	Weights           *ctJSONArgs `json:"weights"`
}

type ctJSONConfig struct {
	ConfigGroups           map[string]ctJSONGroup `json:"config_groups"`
	Format                 string                 `json:"format"`
	GlobalCompressionRatio *float64               `json:"global_compression_ratio"`
	Ignore                 []string               `json:"ignore"`
	KVCacheScheme          *ctJSONArgs            `json:"kv_cache_scheme"`
	QuantMethod            string                 `json:"quant_method"`
	QuantizationStatus     string                 `json:"quantization_status"`
	SparsityConfig         struct{}               `json:"sparsity_config"`
	TransformConfig        struct{}               `json:"transform_config"`
}

// ctJSONPreset is one compressed-tensors preset (quant_scheme.py), reduced to
// the kept keys.
type ctJSONPreset struct {
	format  string
	weights ctJSONArgs
	inputs  *ctJSONArgs
}

var (
	ctJSONFP8Tensor = ctJSONArgs{Dynamic: false, NumBits: 8, Strategy: "tensor", Symmetric: true, Type: "float"}
	ctJSONFP4Group  = ctJSONArgs{Dynamic: false, GroupSize: 16, NumBits: 4, Strategy: "tensor_group", Symmetric: true, Type: "float"}
)

var ctJSONPresets = map[string]ctJSONPreset{
	checkpoint.SchemeFP8Dynamic: {
		format:  "float-quantized",
		weights: ctJSONArgs{Dynamic: false, NumBits: 8, Strategy: "channel", Symmetric: true, Type: "float"},
		inputs:  &ctJSONArgs{Dynamic: true, NumBits: 8, Strategy: "token", Symmetric: true, Type: "float"},
	},
	checkpoint.SchemeFP8: {
		format:  "float-quantized",
		weights: ctJSONFP8Tensor,
		inputs:  &ctJSONFP8Tensor,
	},
	checkpoint.SchemeFP8Block: {
		format:  "float-quantized",
		weights: ctJSONArgs{BlockStructure: []int{128, 128}, Dynamic: false, NumBits: 8, Strategy: "block", Symmetric: true, Type: "float"},
		inputs:  &ctJSONArgs{Dynamic: true, GroupSize: 128, NumBits: 8, Strategy: "group", Symmetric: true, Type: "float"},
	},
	checkpoint.SchemeNVFP4: {
		format:  "nvfp4-pack-quantized",
		weights: ctJSONFP4Group,
		inputs:  &ctJSONArgs{Dynamic: "local", GroupSize: 16, NumBits: 4, Strategy: "tensor_group", Symmetric: true, Type: "float"},
	},
	checkpoint.SchemeNVFP4A16: {
		format:  "nvfp4-pack-quantized",
		weights: ctJSONFP4Group,
	},
}

// ctJSONKVCacheFP8 is the kv_cache_scheme of an FP8 KV cache with per-tensor
// scales.
var ctJSONKVCacheFP8 = ctJSONArgs{Dynamic: false, NumBits: 8, Strategy: "tensor", Symmetric: true, Type: "float"}

// CompressedTensorsConfig returns the quantization_config object of a
// compressed-tensors checkpoint's config.json, compact, with sorted keys.
// Without spec.Modules, "re:" ignore patterns are written as given; with
// it, they are expanded to explicit names, as llm-compressor writes them,
// because explicit names are what every vLLM and SGLang version matches
// the same way. An unknown scheme is an error wrapping
// checkpoint.ErrUnsupportedQuantization.
func CompressedTensorsConfig(spec QuantConfigSpec) (json.RawMessage, error) {
	p, ok := ctJSONPresets[spec.Scheme]
	if !ok {
		return nil, fmt.Errorf("quantize: compressed-tensors: %w: scheme %q (supported: %s, %s, %s, %s, %s)", checkpoint.ErrUnsupportedQuantization,
			spec.Scheme, checkpoint.SchemeFP8Dynamic, checkpoint.SchemeFP8, checkpoint.SchemeFP8Block, checkpoint.SchemeNVFP4, checkpoint.SchemeNVFP4A16)
	}
	ignore, err := resolveIgnore(spec, true, "compressed-tensors")
	if err != nil {
		return nil, err
	}
	w := p.weights
	cfg := ctJSONConfig{
		ConfigGroups: map[string]ctJSONGroup{"group_0": {
			Format:           p.format,
			InputActivations: p.inputs,
			Targets:          []string{"Linear"},
			Weights:          &w,
		}},
		Format:             p.format,
		Ignore:             ignore,
		QuantMethod:        string(checkpoint.QuantCompressedTensors),
		QuantizationStatus: "compressed",
	}
	if spec.KVCacheFP8 {
		kv := ctJSONKVCacheFP8
		cfg.KVCacheScheme = &kv
	}
	return encodeConfigJSON(cfg, "")
}
