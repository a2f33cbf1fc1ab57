package bench

import (
	"encoding/json"
	"fmt"
	"os"

	"github.com/lowbit-ai/lowbit/checkpoint"
)

// ResultFormat is the version of the results file; ReadResult refuses
// others.
const ResultFormat = 1

// Record is one request as measured. Times are seconds (vLLM's units in
// its records); Start counts from the phase start.
type Record struct {
	Kind     string `json:"kind"`
	Endpoint string `json:"endpoint"`
	// User, Session, Step and Index place the request in the phase's
	// script.
	User    int `json:"user"`
	Session int `json:"session"`
	Step    int `json:"step"`
	Index   int `json:"index"`
	// PromptLen is the request's own new text in tokens (deterministic for
	// a spec); HistoryLen is the earlier turns a multi-turn chat resends
	// (earlier prompts plus the replies' output tokens). Their sum is the
	// request's input by the client's count, as vLLM's prompt_len.
	PromptLen  int `json:"prompt_len"`
	HistoryLen int `json:"history_len,omitempty"`
	MaxTokens  int `json:"max_tokens"`

	Success bool    `json:"success"`
	Error   string  `json:"error,omitempty"`
	Start   float64 `json:"start"`
	// TTFT is send to the first message with a choice; ITL the gaps
	// between later such messages; Latency send to the last one (chat: to
	// the last data message, the usage chunk included), as vLLM's client.
	TTFT    float64   `json:"ttft"`
	ITL     []float64 `json:"itl"`
	Latency float64   `json:"latency"`
	// OutputTokens is usage.completion_tokens, or the generated text
	// re-tokenized when the server sent no usage (OutputCounted).
	OutputTokens  int    `json:"output_tokens"`
	OutputCounted bool   `json:"output_counted,omitempty"`
	ServerPrompt  int    `json:"server_prompt_tokens,omitempty"`
	GeneratedText string `json:"generated_text"`
}

// InputLen is the request's input tokens by the client's count.
func (r *Record) InputLen() int { return r.PromptLen + r.HistoryLen }

// Result is a benchmark run: what was replayed, against what, and every
// request.
type Result struct {
	Format    int           `json:"format"`
	Spec      Spec          `json:"workload"`
	URL       string        `json:"url"`
	Model     string        `json:"model"`
	Tokenizer string        `json:"tokenizer"`
	Date      string        `json:"date"`
	Phases    []PhaseResult `json:"phases"`
}

// PhaseResult is one phase's duration, aggregate metrics (per traffic kind
// too when a phase mixes kinds) and records.
type PhaseResult struct {
	PhaseInfo
	Duration float64       `json:"duration"`
	Metrics  Metrics       `json:"metrics"`
	Kinds    []KindMetrics `json:"kinds,omitempty"`
	Records  []Record      `json:"records"`
}

// KindMetrics are the metrics of one traffic kind within a phase
// (throughputs over the whole phase's duration).
type KindMetrics struct {
	Kind    string  `json:"kind"`
	Metrics Metrics `json:"metrics"`
}

// Recompute fills Metrics and Kinds from Records and Duration.
func (p *PhaseResult) Recompute() {
	p.Metrics = Compute(p.Records, p.Duration)
	p.Kinds = nil
	kinds := recordKinds(p.Records)
	if len(kinds) < 2 {
		return
	}
	for _, k := range kinds {
		p.Kinds = append(p.Kinds, KindMetrics{Kind: k, Metrics: Compute(filterKind(p.Records, k), p.Duration)})
	}
}

// recordKinds returns the kinds of records in order of first appearance.
func recordKinds(recs []Record) []string {
	var kinds []string
	seen := map[string]bool{}
	for _, r := range recs {
		if !seen[r.Kind] {
			seen[r.Kind] = true
			kinds = append(kinds, r.Kind)
		}
	}
	return kinds
}

func filterKind(recs []Record, kind string) []Record {
	var out []Record
	for _, r := range recs {
		if r.Kind == kind {
			out = append(out, r)
		}
	}
	return out
}

// WriteResult writes r as indented JSON to path (atomically).
func WriteResult(path string, r *Result) error {
	data, err := json.MarshalIndent(r, "", " ")
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	return checkpoint.WriteFileAtomic(path, append(data, '\n'), 0o644)
}

// ReadResult reads a results file and recomputes every phase's metrics
// from its records, so that a comparison never trusts stored aggregates.
func ReadResult(path string) (*Result, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	r, err := ParseResult(data)
	if err != nil {
		return nil, fmt.Errorf("%w (in %s)", err, path)
	}
	return r, nil
}

// maxSeconds bounds every time in a results file (about eleven days), so
// that a corrupt file cannot ask for billions of one-second buckets.
const maxSeconds = 1e6

// ParseResult decodes and checks a results file's contents.
func ParseResult(data []byte) (*Result, error) {
	var r Result
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, fmt.Errorf("bench: not a lowbit bench results file: %w", err)
	}
	if r.Format != ResultFormat {
		return nil, fmt.Errorf("bench: results format %d: this lowbit reads format %d; rerun the benchmark", r.Format, ResultFormat)
	}
	if len(r.Phases) == 0 {
		return nil, fmt.Errorf("bench: the results hold no phases")
	}
	for i := range r.Phases {
		p := &r.Phases[i]
		if !(p.Duration > 0) || p.Duration > maxSeconds {
			return nil, fmt.Errorf("bench: phase %q: duration %v: want a positive number of seconds", p.Name, p.Duration)
		}
		for j, rec := range p.Records {
			for _, v := range append([]float64{rec.Start, rec.TTFT, rec.Latency}, rec.ITL...) {
				if !(v >= 0 && v <= maxSeconds) {
					return nil, fmt.Errorf("bench: phase %q, record %d: a time of %v seconds", p.Name, j, v)
				}
			}
			if rec.PromptLen < 0 || rec.HistoryLen < 0 || rec.OutputTokens < 0 {
				return nil, fmt.Errorf("bench: phase %q, record %d: a negative token count", p.Name, j)
			}
		}
		p.Recompute()
	}
	return &r, nil
}
