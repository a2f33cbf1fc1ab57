package checkpoint

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// This file reads a Hugging Face config.json into a typed Config. The field
// names and the defaults of absent fields are those of the transformers 5.x
// config classes (configuration_qwen3.py, configuration_qwen3_moe.py,
// configuration_qwen3_5.py, configuration_qwen3_5_moe.py,
// configuration_llama.py, read at huggingface/transformers commit 008e574);
// each default is cited where it is applied, in config_text.go.

var (
	// ErrInvalidConfig is wrapped by every error that reports a config.json
	// (or quantization config) that is malformed, has a field of the wrong
	// type, or fails validation.
	ErrInvalidConfig = errors.New("invalid model config")
	// ErrUnknownArchitecture is wrapped by the error for a model_type or
	// architectures entry that lowbit does not support. Such configs are never
	// read as the nearest supported architecture.
	ErrUnknownArchitecture = errors.New("unknown model architecture")
)

// ConfigFileName is the name of the model config in a model directory.
const ConfigFileName = "config.json"

// Arch is a supported model architecture. The zero value is invalid.
type Arch uint8

const (
	// Qwen3 is the dense Qwen3 decoder (model_type "qwen3", Qwen3ForCausalLM).
	Qwen3 Arch = iota + 1
	// Qwen3MoE is Qwen3-MoE (model_type "qwen3_moe", Qwen3MoeForCausalLM).
	Qwen3MoE
	// Qwen35 is the dense Qwen3.5 hybrid Gated-DeltaNet/attention model
	// (model_type "qwen3_5", text settings under text_config).
	Qwen35
	// Qwen35MoE is the Qwen3.5/3.6 MoE hybrid (model_type "qwen3_5_moe").
	Qwen35MoE
	// Llama is LlamaForCausalLM (model_type "llama"), which MiniCPM5 uses.
	Llama
)

// archSpec describes how an architecture appears in config.json.
type archSpec struct {
	arch          Arch
	modelType     string   // top-level model_type; also Arch.String()
	textModelType string   // model_type of text_config ("" when flat)
	architectures []string // accepted architectures entries
}

var archSpecs = []archSpec{
	{Qwen3, "qwen3", "", []string{"Qwen3ForCausalLM"}},
	{Qwen3MoE, "qwen3_moe", "", []string{"Qwen3MoeForCausalLM"}},
	{Qwen35, "qwen3_5", "qwen3_5_text", []string{"Qwen3_5ForConditionalGeneration", "Qwen3_5ForCausalLM"}},
	{Qwen35MoE, "qwen3_5_moe", "qwen3_5_moe_text", []string{"Qwen3_5MoeForConditionalGeneration", "Qwen3_5MoeForCausalLM"}},
	{Llama, "llama", "", []string{"LlamaForCausalLM"}},
}

func (a Arch) spec() (archSpec, bool) {
	for _, s := range archSpecs {
		if s.arch == a {
			return s, true
		}
	}
	return archSpec{}, false
}

// String returns the architecture's Hugging Face model_type, e.g. "qwen3_5_moe".
func (a Arch) String() string {
	if s, ok := a.spec(); ok {
		return s.modelType
	}
	return fmt.Sprintf("Arch(%d)", uint8(a))
}

// Hybrid reports whether the architecture mixes linear-attention (Gated
// DeltaNet) and full-attention layers.
func (a Arch) Hybrid() bool { return a == Qwen35 || a == Qwen35MoE }

// MoE reports whether the architecture has routed experts.
func (a Arch) MoE() bool { return a == Qwen3MoE || a == Qwen35MoE }

// supportedArchs lists the accepted names, for error messages.
func supportedArchs() string {
	var names []string
	for _, s := range archSpecs {
		names = append(names, fmt.Sprintf("%s (%s)", s.modelType, strings.Join(s.architectures, ", ")))
	}
	return strings.Join(names, "; ")
}

func unknownArch(what, name string) error {
	return fmt.Errorf("%w: %s %q; supported: %s", ErrUnknownArchitecture, what, name, supportedArchs())
}

// ParseArch parses an architecture name as given on a command line: a
// model_type ("qwen3_5_moe"), a text model_type ("qwen3_5_moe_text") or an
// architectures class name ("Qwen3_5MoeForConditionalGeneration"), ignoring
// case. An unknown name is an error wrapping ErrUnknownArchitecture.
func ParseArch(s string) (Arch, error) {
	for _, spec := range archSpecs {
		if strings.EqualFold(s, spec.modelType) || (spec.textModelType != "" && strings.EqualFold(s, spec.textModelType)) {
			return spec.arch, nil
		}
		for _, a := range spec.architectures {
			if strings.EqualFold(s, a) {
				return spec.arch, nil
			}
		}
	}
	return 0, unknownArch("architecture", s)
}

// Config is a parsed config.json.
type Config struct {
	// Arch is the architecture, from model_type and architectures (which must
	// agree).
	Arch Arch
	// ModelType is the top-level model_type as written ("" when absent).
	ModelType string
	// Architectures is the architectures list as written.
	Architectures []string
	// Text holds the text-model settings, flattened from the top level
	// (qwen3, qwen3_moe, llama) or from text_config (qwen3_5, qwen3_5_moe),
	// with every absent field set to its transformers default.
	Text Text
	// TextNested reports that the text settings came from text_config.
	TextNested bool
	// Vision is the vision_config object as written (nil when absent). lowbit
	// does not run the vision tower; writers copy it through.
	Vision json.RawMessage
	// Quantization is the parsed quantization_config, nil for an unquantized
	// (BF16) checkpoint. ReadQuantConfig also consults hf_quant_config.json.
	Quantization *Quantization
	// Raw is the file as read, so that writers can round-trip fields this
	// package does not model.
	Raw json.RawMessage
}

// ReadConfig reads and parses dir/config.json. Errors name the file.
func ReadConfig(dir string) (*Config, error) {
	path := filepath.Join(dir, ConfigFileName)
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	c, err := parseConfig(data)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: %s: %w", path, err)
	}
	return c, nil
}

// ParseConfig parses the contents of a config.json.
func ParseConfig(data []byte) (*Config, error) {
	c, err := parseConfig(data)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: config.json: %w", err)
	}
	return c, nil
}

func parseConfig(data []byte) (*Config, error) {
	top, err := parseCfgObject("", data)
	if err != nil {
		return nil, err
	}
	c := &Config{Raw: slices.Clone(data)}
	if c.ModelType, err = top.string("model_type", ""); err != nil {
		return nil, err
	}
	if c.Architectures, _, err = top.strings("architectures"); err != nil {
		return nil, err
	}
	spec, flatText, err := detectArch(c.ModelType, c.Architectures)
	if err != nil {
		return nil, err
	}
	c.Arch = spec.arch

	if spec.textModelType != "" && c.ModelType == "" && !top.has("text_config") {
		flatText = true // architectures only, and the settings are at the top level
	}
	textObj := top
	if spec.textModelType != "" && !flatText {
		obj, ok, err := top.object("text_config")
		if err != nil {
			return nil, err
		}
		if !ok {
			return nil, cfgErrorf("model_type %q needs a text_config object", c.ModelType)
		}
		mt, err := obj.string("model_type", spec.textModelType)
		if err != nil {
			return nil, err
		}
		if mt != spec.textModelType {
			return nil, cfgErrorf("text_config.model_type is %q, want %q for model_type %q", mt, spec.textModelType, spec.modelType)
		}
		textObj, c.TextNested = obj, true
	}
	if v, ok := top.raw("vision_config"); ok {
		if v[0] != '{' {
			return nil, top.wrongType("vision_config", "an object", v)
		}
		c.Vision = slices.Clone(v)
	}

	if err := parseText(&c.Text, spec.arch, textObj, top, c.TextNested); err != nil {
		return nil, err
	}
	if err := c.Text.validate(spec.arch); err != nil {
		return nil, err
	}
	if v, ok := top.raw("quantization_config"); ok {
		if c.Quantization, err = parseQuantizationConfig("quantization_config", v); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// detectArch resolves the architecture from model_type and architectures.
// Both must name the same architecture when both are present; one of them
// must be present. flatText reports a text-only Qwen3.5 config (model_type
// "qwen3_5_text", as Qwen3_5ForCausalLM saves it) whose settings sit at the
// top level.
func detectArch(modelType string, architectures []string) (spec archSpec, flatText bool, err error) {
	found := false
	if modelType != "" {
		for _, s := range archSpecs {
			switch modelType {
			case s.modelType:
				spec, found = s, true
			case s.textModelType:
				if s.textModelType != "" {
					spec, found, flatText = s, true, true
				}
			}
		}
		if !found {
			return archSpec{}, false, unknownArch("model_type", modelType)
		}
	}
	for _, name := range architectures {
		var s archSpec
		ok := false
		for _, cand := range archSpecs {
			if slices.Contains(cand.architectures, name) {
				s, ok = cand, true
			}
		}
		if !ok {
			return archSpec{}, false, unknownArch("architectures entry", name)
		}
		if found && s.arch != spec.arch {
			return archSpec{}, false, cfgErrorf("architectures entry %q is %s, but model_type is %q", name, s.modelType, modelType)
		}
		spec, found = s, true
	}
	if !found {
		return archSpec{}, false, fmt.Errorf("%w: config has neither model_type nor architectures; supported: %s", ErrUnknownArchitecture, supportedArchs())
	}
	return spec, flatText, nil
}
