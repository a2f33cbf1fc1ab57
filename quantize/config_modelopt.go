package quantize

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/lowbit-ai/lowbit/checkpoint"
)

// The NVIDIA ModelOpt config files, as ModelOpt's unified HF export writes
// them (modelopt/torch/export: quant_utils.get_quant_config for
// hf_quant_config.json, convert_hf_config.convert_hf_quant_config_format
// for config.json's quantization_config; formats.md §2).
//
// Schemes. ModelOpt and vLLM's modelopt loader (QUANT_ALGOS) have:
//
//	FP8_DYNAMIC -> FP8_PER_CHANNEL_PER_TOKEN  per-channel weight scales, dynamic per-token activations
//	FP8         -> FP8                        per-tensor weights and static activations
//	NVFP4       -> NVFP4                      group_size 16
//
// FP8_BLOCK and NVFP4A16 are refused (use compressed-tensors):
//   - ModelOpt's FP8_PB_WO is a block weight-only format: its weight_scale
//     is [out/128, 1, in/128, 1]. Newer vLLM runs it with dynamic 1x128
//     activations, like compressed-tensors FP8_BLOCK, but needs out_features
//     divisible by 128 per shard; SGLang's ModelOpt loaders know only FP8
//     and NVFP4; lowbit's reader (checkpoint.ReadQuantConfig) rejects it.
//   - ModelOpt's W4A16_NVFP4 is read by recent vLLM only (it is not in
//     QUANT_ALGOS at vLLM c9a5990, formats.md §2), SGLang's NVFP4 config
//     accepts only quant_algo NVFP4, and lowbit's reader rejects it.
//
// Producer. vLLM (ModelConfig._normalize_quantization_config) sets
// quant_method only when producer.name is "modelopt" for a config in the
// nested {"producer", "quantization"} form, and newer SGLang
// (detect_modelopt_quantization_scheme with require_modelopt_producer)
// checks the name too. So the name is "modelopt", the format lowbit
// writes; the version field carries the tool, spec.Producer ("lowbit dev"),
// which nothing parses.
//
// Exclusions. vLLM matches exclude_modules by exact name (with fused
// shards), then by substring, then as fnmatch wildcards; SGLang by full
// match with * wildcards. A regular expression cannot be expressed, so "re:"
// patterns are expanded to explicit names against spec.Modules, and the
// list is checked so that no entry is a substring of a quantized module or
// of the fused layer it belongs to, which vLLM would then leave
// unquantized as well.
//
// KV cache. hf_quant_config.json always carries kv_cache_quant_algo ("FP8"
// or null: vLLM requires the key for NVFP4); config.json carries
// kv_cache_scheme {"dynamic": false, "num_bits": 8, "type": "float"} only
// for an FP8 KV cache, as ModelOpt's converter writes it.

// moJSONAlgos maps schemes to ModelOpt quant_algo values.
var moJSONAlgos = map[string]string{
	checkpoint.SchemeFP8Dynamic: "FP8_PER_CHANNEL_PER_TOKEN",
	checkpoint.SchemeFP8:        "FP8",
	checkpoint.SchemeNVFP4:      "NVFP4",
}

// moJSONRefused explains the schemes ModelOpt configs cannot carry.
var moJSONRefused = map[string]string{
	checkpoint.SchemeFP8Block: "ModelOpt's block format FP8_PB_WO is weight-only with a [out/128, 1, in/128, 1] weight_scale, needs out_features divisible by 128, is unknown to SGLang's ModelOpt loader and to lowbit's reader",
	checkpoint.SchemeNVFP4A16: "ModelOpt's W4A16_NVFP4 is read only by recent vLLM, not by older vLLM, SGLang's ModelOpt loader or lowbit's reader",
}

type moJSONProducer struct {
	Name    string `json:"name"`
	Version string `json:"version"`
}

type moJSONQuantization struct {
	QuantAlgo        string   `json:"quant_algo"`
	KVCacheQuantAlgo *string  `json:"kv_cache_quant_algo"`
	GroupSize        int      `json:"group_size,omitempty"`
	ExcludeModules   []string `json:"exclude_modules"`
}

type moJSONHFQuant struct {
	Producer     moJSONProducer     `json:"producer"`
	Quantization moJSONQuantization `json:"quantization"`
}

// moJSONArgs are the arguments ModelOpt's converter writes: no strategy, no
// symmetric.
type moJSONArgs struct {
	Dynamic   bool   `json:"dynamic"`
	NumBits   int    `json:"num_bits"`
	Type      string `json:"type"`
	GroupSize int    `json:"group_size,omitempty"`
}

type moJSONGroup struct {
	InputActivations *moJSONArgs `json:"input_activations,omitempty"`
	Weights          moJSONArgs  `json:"weights"`
	Targets          []string    `json:"targets"`
}

// moJSONConfig is config.json's quantization_config, in the order of
// convert_hf_quant_config_format.
type moJSONConfig struct {
	ConfigGroups  map[string]moJSONGroup `json:"config_groups,omitempty"`
	Ignore        []string               `json:"ignore"`
	QuantAlgo     string                 `json:"quant_algo"`
	KVCacheScheme *moJSONArgs            `json:"kv_cache_scheme,omitempty"`
	Producer      moJSONProducer         `json:"producer"`
	QuantMethod   string                 `json:"quant_method"`
}

// ModelOptConfig returns the two config files of a ModelOpt checkpoint:
// hf_quant_config.json (indented by four spaces as ModelOpt writes it, with
// a final newline) and config.json's quantization_config (compact). The
// converter gives config_groups only for FP8 and NVFP4, so an
// FP8_PER_CHANNEL_PER_TOKEN quantization_config has none, as ModelOpt's
// own. Schemes ModelOpt cannot carry give an error wrapping
// checkpoint.ErrUnsupportedQuantization.
func ModelOptConfig(spec QuantConfigSpec) (hfQuantConfig []byte, configQuantization json.RawMessage, err error) {
	algo, ok := moJSONAlgos[spec.Scheme]
	if !ok {
		why, refused := moJSONRefused[spec.Scheme]
		if !refused {
			why = "not a scheme lowbit writes"
		}
		return nil, nil, fmt.Errorf("quantize: modelopt: %w: scheme %s: %s; write it in the compressed-tensors format", checkpoint.ErrUnsupportedQuantization, spec.Scheme, why)
	}
	exclude, err := resolveIgnore(spec, false, "modelopt")
	if err != nil {
		return nil, nil, err
	}
	if err := checkSubstringExclusions(exclude, spec.Modules); err != nil {
		return nil, nil, err
	}
	producer := moJSONProducer{Name: "modelopt", Version: spec.Producer}
	if producer.Version == "" {
		producer.Version = "lowbit"
	}

	hf := moJSONHFQuant{
		Producer:     producer,
		Quantization: moJSONQuantization{QuantAlgo: algo, ExcludeModules: exclude},
	}
	cfg := moJSONConfig{Ignore: exclude, QuantAlgo: algo, Producer: producer, QuantMethod: string(checkpoint.QuantModelOpt)}
	if spec.KVCacheFP8 {
		kv := "FP8"
		hf.Quantization.KVCacheQuantAlgo = &kv
		cfg.KVCacheScheme = &moJSONArgs{Dynamic: false, NumBits: 8, Type: "float"}
	}
	switch spec.Scheme {
	case checkpoint.SchemeFP8:
		fp8 := moJSONArgs{Dynamic: false, NumBits: 8, Type: "float"}
		cfg.ConfigGroups = map[string]moJSONGroup{"group_0": {InputActivations: &fp8, Weights: fp8, Targets: []string{"Linear"}}}
	case checkpoint.SchemeNVFP4:
		hf.Quantization.GroupSize = 16
		fp4 := moJSONArgs{Dynamic: false, NumBits: 4, Type: "float", GroupSize: 16}
		cfg.ConfigGroups = map[string]moJSONGroup{"group_0": {InputActivations: &fp4, Weights: fp4, Targets: []string{"Linear"}}}
	}

	if hfQuantConfig, err = encodeConfigJSON(hf, "    "); err != nil {
		return nil, nil, err
	}
	if configQuantization, err = encodeConfigJSON(cfg, ""); err != nil {
		return nil, nil, err
	}
	return append(hfQuantConfig, '\n'), configQuantization, nil
}

// checkSubstringExclusions rejects an exclude_modules entry that vLLM's
// substring rule would also apply to a quantized module: to its name, to
// the fused layer vLLM builds from it (qkv_proj, gate_up_proj, ...) or to
// the fused MoE layer of a routed expert (model.layers.N.mlp.experts).
func checkSubstringExclusions(exclude, modules []string) error {
	excluded := make(map[string]bool, len(exclude))
	for _, e := range exclude {
		excluded[e] = true
	}
	seen := map[string]bool{}
	for _, m := range modules {
		if excluded[m] {
			continue
		}
		names := []string{m, fusedGroup(m)}
		if sub := routedExpert.FindStringSubmatch(m); sub != nil {
			names = append(names, sub[1])
		}
		for _, name := range names {
			if seen[name] {
				continue
			}
			seen[name] = true
			if i := slices.IndexFunc(exclude, func(e string) bool { return strings.Contains(name, e) }); i >= 0 {
				return fmt.Errorf("quantize: modelopt: exclude_modules entry %q is part of the name %s of a quantized module, and vLLM, which also matches exclude_modules as substrings, would leave it unquantized; quantize or ignore both", exclude[i], name)
			}
		}
	}
	return nil
}
