package runtime

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"time"
)

// GenerateOptions configure Generate.
type GenerateOptions struct {
	// MaxTokens bounds the tokens generated (> 0).
	MaxTokens int
	Sampling  SamplingOptions
	// StopIDs end generation when sampled (the stop token is emitted too);
	// ReadGenerationConfig gives a checkpoint's own.
	StopIDs []int
}

// GenerateStats describe a finished Generate.
type GenerateStats struct {
	PromptTokens    int
	Generated       int           // tokens sampled, the stop token included
	Prefill, Decode time.Duration // the prompt's forward; every later step
	Stopped         bool          // ended at a stop id rather than MaxTokens or the sequence limit
}

// PrefillTokensPerSecond returns the prompt throughput.
func (s GenerateStats) PrefillTokensPerSecond() float64 {
	return float64(s.PromptTokens) / s.Prefill.Seconds()
}

// DecodeTokensPerSecond returns the throughput of the decode steps: every
// generated token but the first, which the prefill produced.
func (s GenerateStats) DecodeTokensPerSecond() float64 {
	if s.Generated <= 1 || s.Decode <= 0 {
		return 0
	}
	return float64(s.Generated-1) / s.Decode.Seconds()
}

// Generate runs prompt through seq (which may already hold a prefix), then
// samples up to opts.MaxTokens tokens, calling emit with each as soon as it
// is chosen, until a stop id, MaxTokens, the sequence limit, an emit error
// or ctx's end. The prefill computes only the last row of logits.
func (m *Model) Generate(ctx context.Context, seq *Sequence, prompt []int, opts GenerateOptions, emit func(id int) error) (st GenerateStats, err error) {
	st.PromptTokens = len(prompt)
	if err := opts.Sampling.Validate(); err != nil {
		return st, err
	}
	if opts.MaxTokens <= 0 {
		return st, fmt.Errorf("runtime: Generate: max tokens %d, want > 0", opts.MaxTokens)
	}
	sampler := NewSampler(opts.Sampling)
	t0 := time.Now()
	logits, err := m.ForwardWith(seq, prompt, ForwardOptions{LastOnly: true})
	st.Prefill = time.Since(t0)
	if err != nil {
		return st, err
	}
	t1 := time.Now()
	defer func() { st.Decode = time.Since(t1) }()
	for {
		id := sampler.Sample(logits)
		st.Generated++
		if err := emit(id); err != nil {
			return st, err
		}
		if slices.Contains(opts.StopIDs, id) {
			st.Stopped = true
			return st, nil
		}
		if st.Generated == opts.MaxTokens || seq.Len() == seq.Limit() {
			return st, nil
		}
		if err := ctx.Err(); err != nil {
			return st, err
		}
		if logits, err = m.Forward(seq, []int{id}); err != nil {
			return st, err
		}
	}
}

// GenerationConfig is what a checkpoint says about generation: the
// default sampling of a request that sets none, and the stop ids.
type GenerationConfig struct {
	Sampling SamplingOptions
	StopIDs  []int
}

// ReadGenerationConfig reads dir/generation_config.json as vLLM applies it
// to requests: its temperature, top_p, top_k and min_p replace vLLM's
// defaults (temperature 1, the other filters off) where present, and its
// eos_token_id (an id or a list) gives the stop ids. Without the file, or
// without eos_token_id in it, the stop ids are config.json's eos_token_id.
func ReadGenerationConfig(dir string) (*GenerationConfig, error) {
	g := &GenerationConfig{Sampling: SamplingOptions{Temperature: 1}}
	var gen struct {
		Temperature *float64        `json:"temperature"`
		TopP        *float64        `json:"top_p"`
		TopK        *int            `json:"top_k"`
		MinP        *float64        `json:"min_p"`
		EOS         json.RawMessage `json:"eos_token_id"`
	}
	path := filepath.Join(dir, "generation_config.json")
	data, err := os.ReadFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return nil, fmt.Errorf("runtime: %w", err)
	default:
		if err := json.Unmarshal(data, &gen); err != nil {
			return nil, fmt.Errorf("runtime: %s: %w", path, err)
		}
	}
	s := &g.Sampling
	if gen.Temperature != nil {
		s.Temperature = *gen.Temperature
	}
	if gen.TopP != nil {
		s.TopP = *gen.TopP
	}
	if gen.TopK != nil && *gen.TopK > 0 { // -1 and 0 mean off in transformers and vLLM
		s.TopK = *gen.TopK
	}
	if gen.MinP != nil {
		s.MinP = *gen.MinP
	}
	if err := s.Validate(); err != nil {
		return nil, fmt.Errorf("%w (from %s)", err, path)
	}
	if g.StopIDs, err = parseIDs(gen.EOS, path); err != nil {
		return nil, err
	}
	if g.StopIDs != nil {
		return g, nil
	}
	path = filepath.Join(dir, "config.json")
	data, err = os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("runtime: %w", err)
	}
	var cfg struct {
		EOS json.RawMessage `json:"eos_token_id"`
		// Text models nested in a multimodal config (Qwen3.5).
		Text struct {
			EOS json.RawMessage `json:"eos_token_id"`
		} `json:"text_config"`
	}
	if err := json.Unmarshal(data, &cfg); err != nil {
		return nil, fmt.Errorf("runtime: %s: %w", path, err)
	}
	if len(cfg.EOS) == 0 {
		cfg.EOS = cfg.Text.EOS
	}
	g.StopIDs, err = parseIDs(cfg.EOS, path)
	return g, err
}

// parseIDs reads an id, a list of ids, or null/absent (no ids).
func parseIDs(raw json.RawMessage, path string) ([]int, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var one int
	if json.Unmarshal(raw, &one) == nil {
		return []int{one}, nil
	}
	var ids []int
	if err := json.Unmarshal(raw, &ids); err != nil {
		return nil, fmt.Errorf("runtime: %s: eos_token_id %s: want an id or a list of ids", path, raw)
	}
	return ids, nil
}

// ChatPrompt wraps one user message in the Qwen3 chat template with the
// generation prompt: "<|im_start|>user\n{msg}<|im_end|>\n<|im_start|>assistant\n".
// Its special tokens must be encoded as added tokens.
func ChatPrompt(msg string) string {
	return "<|im_start|>user\n" + msg + "<|im_end|>\n<|im_start|>assistant\n"
}
