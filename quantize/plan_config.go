package quantize

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/lowbit-ai/lowbit/checkpoint"
)

// Producer is written into ModelOpt configs; the CLI sets it to lowbit's
// version.
var Producer = "lowbit dev"

// writeConfigs builds the output's config.json (the source's, with a
// quantization_config) and the format's extra files. linears lists every
// linear-like module of the model in model order.
func (p *Plan) writeConfigs(srcCfg []byte, linears []string) error {
	quantized := make(map[string]bool, len(p.Quantized))
	for _, m := range p.Quantized {
		quantized[m] = true
	}
	p.Ignore = p.Ignore[:0]
	for _, m := range linears {
		if !quantized[m] {
			p.Ignore = append(p.Ignore, m)
		}
	}
	spec := QuantConfigSpec{Scheme: p.Opts.Scheme.Preset(), Ignore: p.Ignore, Modules: linears,
		KVCacheFP8: p.Opts.KVCacheFP8, Producer: Producer}
	var qc json.RawMessage
	var err error
	switch p.Opts.Format {
	case ModelOpt:
		var hf []byte
		hf, qc, err = ModelOptConfig(spec)
		p.ExtraFiles = map[string][]byte{checkpoint.HFQuantConfigFileName: hf}
	default:
		qc, err = CompressedTensorsConfig(spec)
	}
	if err != nil {
		return err
	}
	p.ConfigJSON, err = withQuantizationConfig(srcCfg, qc)
	return err
}

// withQuantizationConfig returns config.json with quantization_config set
// (at the top level, also for multimodal configs, where loaders look for
// it), every other field kept with its exact number text, keys sorted and
// indented as transformers writes them.
func withQuantizationConfig(src []byte, qc json.RawMessage) ([]byte, error) {
	dec := json.NewDecoder(bytes.NewReader(src))
	dec.UseNumber()
	var cfg map[string]any
	if err := dec.Decode(&cfg); err != nil {
		return nil, fmt.Errorf("quantize: config.json: %w", err)
	}
	cfg["quantization_config"] = qc
	out, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("quantize: config.json: %w", err)
	}
	return append(out, '\n'), nil
}

// linearModules lists every linear-like module of the source model (a 2-D
// ".weight" other than the embeddings, plus the per-expert modules of split
// fused experts) in model order, for the config's ignore list.
func (b *planBuilder) linearModules() []string { return b.linears }
