package checkpoint

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
)

// This file detects how a checkpoint is quantized, from the
// quantization_config of config.json and, for NVIDIA ModelOpt checkpoints,
// from hf_quant_config.json. The formats are those vLLM loads; see
// shared/specs/formats.md §1 (compressed-tensors), §2 (ModelOpt) and §3 (FP8
// KV cache).

// HFQuantConfigFileName is the legacy config file NVIDIA ModelOpt writes next
// to config.json; vLLM's modelopt loader reads it.
const HFQuantConfigFileName = "hf_quant_config.json"

// QuantMethod is a quantization_config quant_method.
type QuantMethod string

const (
	// QuantCompressedTensors is written by llm-compressor.
	QuantCompressedTensors QuantMethod = "compressed-tensors"
	// QuantModelOpt is written by NVIDIA ModelOpt.
	QuantModelOpt QuantMethod = "modelopt"
	// QuantFP8 is vLLM's native fp8 method (Qwen's own -FP8 releases).
	QuantFP8 QuantMethod = "fp8"
)

// Scheme names, after compressed-tensors' presets (CT quant_scheme.py).
const (
	SchemeFP8Dynamic = "FP8_DYNAMIC" // FP8 per-channel weights, dynamic per-token activations
	SchemeFP8        = "FP8"         // FP8 per-tensor weights and static per-tensor activations
	SchemeFP8Block   = "FP8_BLOCK"   // FP8 block-scaled weights, dynamic per-group activations
	SchemeNVFP4      = "NVFP4"       // FP4 E2M1 weights and activations in groups of 16
	SchemeNVFP4A16   = "NVFP4A16"    // FP4 E2M1 weights in groups of 16, 16-bit activations
	// SchemeFP8PerTensorDynamic is vLLM fp8 without weight_block_size and with
	// activation_scheme "dynamic": per-tensor weights, activations quantized
	// at run time. It has no compressed-tensors preset.
	SchemeFP8PerTensorDynamic = "FP8_PER_TENSOR_DYNAMIC"
	// SchemeMixed marks a checkpoint whose modules use different schemes;
	// Groups (compressed-tensors) or QuantizedLayers (ModelOpt) say which.
	SchemeMixed = "MIXED_PRECISION"
)

// KV cache dtypes, as vLLM's --kv-cache-dtype names them.
const (
	KVCacheAuto = "auto" // the model dtype (BF16)
	KVCacheFP8  = "fp8"  // FP8 E4M3 with per-tensor k/v scales
)

// ErrUnsupportedQuantization is wrapped by the error for a quantization
// config whose method, algorithm or arguments lowbit does not know.
var ErrUnsupportedQuantization = errors.New("unsupported quantization")

func unsupportedQuantf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrUnsupportedQuantization, fmt.Sprintf(format, args...))
}

// Quantization summarizes a checkpoint's quantization.
type Quantization struct {
	Method QuantMethod
	// Scheme is the scheme of every quantized module (one of the Scheme*
	// constants), or SchemeMixed.
	Scheme string
	// Format is the compressed-tensors format ("float-quantized",
	// "nvfp4-pack-quantized", "naive-quantized", ...); "" for other methods.
	Format string
	// KVCacheDType is KVCacheFP8 when the checkpoint asks for an FP8 KV cache
	// (a compressed-tensors kv_cache_scheme, a ModelOpt kv_cache_quant_algo),
	// else KVCacheAuto.
	KVCacheDType string
	// Ignore lists the modules left unquantized, as written: names or
	// "re:"-prefixed regexes (compressed-tensors ignore, ModelOpt
	// exclude_modules with fnmatch wildcards, fp8 modules_to_not_convert).
	Ignore []string
	// Groups are the compressed-tensors (or ModelOpt config.json) config_groups.
	Groups []QuantGroup
	// WeightBlockSize is the FP8 block shape [rows, cols] of FP8_BLOCK.
	WeightBlockSize []int
	// GroupSize is the NVFP4 group size (16).
	GroupSize int
	// QuantizedLayers maps module names to ModelOpt algorithms for a ModelOpt
	// MIXED_PRECISION checkpoint.
	QuantizedLayers map[string]string
	// Producer is "name version" of the tool that wrote a ModelOpt checkpoint.
	Producer string
	// Raw is the quantization config object as written.
	Raw json.RawMessage
}

// QuantGroup is one config_groups entry.
type QuantGroup struct {
	Name    string
	Targets []string
	Format  string
	Weights *QuantArgs // nil when the group quantizes no weights
	Inputs  *QuantArgs // input_activations; nil for weight-only
	Scheme  string
}

// QuantArgs is a compressed-tensors QuantizationArgs, reduced to the fields
// that decide the scheme.
type QuantArgs struct {
	NumBits        int
	Type           string // "float" or "int"
	Strategy       string // "tensor", "channel", "group", "block", "tensor_group", "token", "attn_head"
	GroupSize      int
	BlockStructure []int
	Symmetric      bool
	// Dynamic is "false", "true" or "local" (per-group scales at run time,
	// static global scale: NVFP4 activations).
	Dynamic string
}

// ReadQuantConfig returns the quantization of the checkpoint in dir, from the
// quantization_config of config.json and from hf_quant_config.json (ModelOpt),
// or nil for an unquantized checkpoint. When both are present they must both
// be ModelOpt and agree on the algorithm and the KV cache dtype; the
// hf_quant_config.json summary is returned, as vLLM's modelopt loader reads
// that file. Errors name the file.
func ReadQuantConfig(dir string) (*Quantization, error) {
	cfgPath := filepath.Join(dir, ConfigFileName)
	data, err := os.ReadFile(cfgPath)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	fromCfg, err := quantFromConfigJSON(data)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: %s: %w", cfgPath, err)
	}
	hfPath := filepath.Join(dir, HFQuantConfigFileName)
	hfData, err := os.ReadFile(hfPath)
	if errors.Is(err, fs.ErrNotExist) {
		return fromCfg, nil
	}
	if err != nil {
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	fromHF, err := parseModelOptHFQuantConfig(hfData)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: %s: %w", hfPath, err)
	}
	if fromCfg == nil {
		return fromHF, nil
	}
	if fromCfg.Method != QuantModelOpt {
		return nil, fmt.Errorf("checkpoint: %s: %w: config.json quant_method is %q but %s is present",
			dir, ErrInvalidConfig, fromCfg.Method, HFQuantConfigFileName)
	}
	if fromCfg.Scheme != fromHF.Scheme || fromCfg.KVCacheDType != fromHF.KVCacheDType {
		return nil, fmt.Errorf("checkpoint: %s: %w: config.json says %s with %s KV cache, %s says %s with %s KV cache",
			dir, ErrInvalidConfig, fromCfg.Scheme, fromCfg.KVCacheDType, HFQuantConfigFileName, fromHF.Scheme, fromHF.KVCacheDType)
	}
	return fromHF, nil
}

// quantFromConfigJSON returns the quantization_config of a config.json, or
// nil when it has none; the rest of the file is not validated.
func quantFromConfigJSON(data []byte) (*Quantization, error) {
	top, err := parseCfgObject("", data)
	if err != nil {
		return nil, err
	}
	v, ok := top.raw("quantization_config")
	if !ok {
		return nil, nil
	}
	return parseQuantizationConfig("quantization_config", v)
}

// ParseQuantizationConfig parses a quantization_config object (as found in
// config.json). An unknown quant_method is an error wrapping
// ErrUnsupportedQuantization.
func ParseQuantizationConfig(data []byte) (*Quantization, error) {
	q, err := parseQuantizationConfig("quantization_config", data)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	return q, nil
}

func parseQuantizationConfig(path string, data []byte) (*Quantization, error) {
	obj, err := parseCfgObject(path, data)
	if err != nil {
		return nil, err
	}
	method, err := obj.string("quant_method", "")
	if err != nil {
		return nil, err
	}
	var q *Quantization
	switch QuantMethod(method) {
	case QuantCompressedTensors:
		q, err = parseCompressedTensors(obj)
	case QuantModelOpt:
		q, err = parseModelOptConfigJSON(obj)
	case QuantFP8:
		q, err = parseVLLMFP8(obj)
	case "":
		return nil, unsupportedQuantf("%s has no quant_method", path)
	default:
		return nil, unsupportedQuantf("%s.quant_method %q (supported: %s, %s, %s)",
			path, method, QuantCompressedTensors, QuantModelOpt, QuantFP8)
	}
	if err != nil {
		return nil, err
	}
	q.Method = QuantMethod(method)
	q.Raw = slices.Clone(data)
	return q, nil
}

// parseVLLMFP8 reads vLLM's native fp8 config: {"quant_method": "fp8",
// "activation_scheme": "dynamic"|"static", "weight_block_size": [128, 128],
// "modules_to_not_convert": [...]}. vLLM's Fp8Config accepts block weights
// only with dynamic activations.
func parseVLLMFP8(obj cfgObject) (*Quantization, error) {
	q := &Quantization{KVCacheDType: KVCacheAuto}
	act, err := obj.string("activation_scheme", "dynamic")
	if err != nil {
		return nil, err
	}
	if act != "dynamic" && act != "static" {
		return nil, unsupportedQuantf("%s: activation_scheme %q", obj.key("activation_scheme"), act)
	}
	block, hasBlock, err := obj.ints("weight_block_size")
	if err != nil {
		return nil, err
	}
	switch {
	case hasBlock:
		if len(block) != 2 || block[0] <= 0 || block[1] <= 0 {
			return nil, cfgErrorf("%s = %v, want two positive sizes", obj.key("weight_block_size"), block)
		}
		if act != "dynamic" {
			return nil, unsupportedQuantf("fp8 with weight_block_size needs activation_scheme dynamic, got %q", act)
		}
		q.Scheme, q.WeightBlockSize = SchemeFP8Block, block
	case act == "static":
		q.Scheme = SchemeFP8
	default:
		q.Scheme = SchemeFP8PerTensorDynamic
	}
	for _, key := range []string{"modules_to_not_convert", "ignored_layers"} {
		names, _, err := obj.strings(key)
		if err != nil {
			return nil, err
		}
		q.Ignore = append(q.Ignore, names...)
	}
	if v, ok := obj.raw("kv_cache_scheme"); ok {
		if q.KVCacheDType, err = kvCacheFromScheme(obj.key("kv_cache_scheme"), v); err != nil {
			return nil, err
		}
	}
	return q, nil
}
