// Package engine schedules generation requests on one runtime.Model:
// continuous batching with chunked prefill, a paged KV cache with prefix
// caching, preemption by recompute, and per-request sampling and
// log-probabilities. It knows token ids only; text, HTTP and chat templates
// belong to the server above it.
package engine

import (
	"errors"
	"fmt"

	"github.com/lowbit-ai/lowbit/kernels"
	"github.com/lowbit-ai/lowbit/runtime"
)

// Errors of Submit. The server maps ErrOverloaded to 503 and the others to
// 400.
var (
	// ErrOverloaded: the waiting queue is full.
	ErrOverloaded = errors.New("engine: the server is overloaded: the waiting queue is full")
	// ErrPromptTooLong: prompt plus max_tokens exceed the model length, or
	// the prompt alone needs more KV blocks than the whole cache holds.
	ErrPromptTooLong = errors.New("engine: prompt too long")
	// ErrClosed: the engine has shut down.
	ErrClosed = errors.New("engine: closed")
	// ErrInvalid wraps every other rejected request field.
	ErrInvalid = errors.New("engine: invalid request")
)

// Config sizes the engine. Zero values take the defaults documented on each
// field.
type Config struct {
	// MaxModelLen caps prompt plus generated tokens; 0 means the model's
	// max_position_embeddings.
	MaxModelLen int
	// MaxNumSeqs caps the sequences in one step (default 64).
	MaxNumSeqs int
	// MaxNumBatchedTokens caps the tokens of one step, prefill chunks and
	// decode tokens together (default 2048; at least 1 per running sequence).
	MaxNumBatchedTokens int
	// BlockSize is the number of positions per KV block (default 16).
	BlockSize int
	// KVCacheBytes is the memory for the KV cache (default 1 GiB).
	KVCacheBytes int64
	// KVCacheDType is "auto" (BF16) or "fp8" (E4M3 with the checkpoint's
	// k_scale and v_scale, or 1.0 where it has none).
	KVCacheDType string
	// MaxWaiting bounds the queue of admitted but unscheduled requests
	// (default 1024); Submit returns ErrOverloaded beyond it.
	MaxWaiting int
	// DisablePrefixCaching turns off reuse of cached full blocks.
	DisablePrefixCaching bool
	// PromptNumerics says the executor computes prompt rows
	// (BatchEntry.Prompt) with other numerics than generated ones
	// (runtime.WithPrefillBF16): the prefix cache then keeps only blocks
	// of prompt positions, so that a block found there holds what the
	// request would have computed itself.
	PromptNumerics bool
	// Scheduling says whether generated tokens ride beside prompt chunks
	// (Mixed, the default) or wait for them (PrefillFirst).
	Scheduling Scheduling
	// NewExecutor makes the executor that owns the KV cache and runs the
	// forwards (runtime.NewCUDAExecutor on a GPU); nil runs on the CPU
	// with the model's kernels (a runtime.KVPool).
	NewExecutor func(blocks, blockSize int, dtype kernels.KVDType) (runtime.Executor, error)
}

// Scheduling is the engine's choice of work for a step when both prompts
// and generated tokens are waiting for one.
type Scheduling int

const (
	// Mixed: the running sequences' next tokens first, then prompt chunks
	// in the token budget left (vLLM's chunked prefill). Generated tokens
	// never wait for a prompt, and on an executor that computes every row
	// with the same kernels they share the step's pass over the weights.
	Mixed Scheduling = iota
	// PrefillFirst: while a prompt (or a preempted sequence's recompute)
	// can run, a step runs prompt chunks only and the running sequences'
	// next tokens wait (SGLang's default). For throughput where prompt
	// rows run other kernels than generated ones (Config.PromptNumerics):
	// there a generated row beside a prompt chunk reads every weight again
	// in its own kernels, so it saves no pass over the weights, and
	// starting the batch's sequences together keeps the last decode steps
	// full. Generated tokens wait at most until the running set reaches
	// MaxNumSeqs or the KV cache fills.
	PrefillFirst
)

// ParseScheduling reads a --scheduling value: mixed, prefill-first, or auto
// (PrefillFirst when promptNumerics, else Mixed).
func ParseScheduling(s string, promptNumerics bool) (Scheduling, error) {
	switch s {
	case "", "auto":
		if promptNumerics {
			return PrefillFirst, nil
		}
		return Mixed, nil
	case "mixed":
		return Mixed, nil
	case "prefill-first":
		return PrefillFirst, nil
	}
	return 0, fmt.Errorf("engine: scheduling %q: want auto, mixed or prefill-first", s)
}

// String is the name ParseScheduling reads.
func (s Scheduling) String() string {
	if s == PrefillFirst {
		return "prefill-first"
	}
	return "mixed"
}

// Request is one generation request in token ids.
type Request struct {
	// ID names the request in logs; the engine does not interpret it.
	ID string
	// Prompt is the token ids; at least one.
	Prompt []int
	// MaxTokens is the number of tokens to generate, or 0 to only score the
	// prompt (prompt_logprobs with echo and max_tokens 0).
	MaxTokens int
	// MinTokens suppresses the stop tokens until this many are generated.
	MinTokens int
	// Sampling picks tokens (temperature 0 is greedy).
	Sampling runtime.SamplingOptions
	// StopTokenIDs finish the request with FinishStop when generated (the
	// token is part of the output). The server puts the EOS ids here unless
	// ignore_eos.
	StopTokenIDs []int
	// PromptLogprobs is -1 for none, or k >= 0: for every prompt position
	// after the first, the actual token with its rank and the top k (the
	// whole vocabulary is k = vocab size). Note that 0, the zero value, asks
	// for the actual tokens' log-probabilities. Requests that ask skip the
	// prefix cache: every prompt position's logits are computed.
	PromptLogprobs int
	// Logprobs is -1 for none, or k >= 0: for every generated token, its
	// own log-probability and rank and the top k.
	Logprobs int
}

// TokenLogprob is a token's log-probability (log-softmax of the raw logits
// over the full vocabulary, float32) and its rank: the number of vocabulary
// entries whose log-probability is >= its own (1 is the argmax).
type TokenLogprob struct {
	ID      int
	Logprob float32
	Rank    int
}

// PositionLogprobs are the log-probabilities at one position: the actual
// (or sampled) token and the top k, in descending order of log-probability
// (ties by ascending id); Top's ranks are 1..k.
type PositionLogprobs struct {
	Token TokenLogprob
	Top   []TokenLogprob
}

// Finish reasons, vLLM's words.
const (
	FinishStop   = "stop"   // a stop token
	FinishLength = "length" // MaxTokens or the model length reached
	FinishAbort  = "abort"  // cancelled by the caller's context
)

// Output is one step's news for a request. The first Output of a request
// carries PromptLogprobs when asked (one entry per prompt token, entry 0
// nil) and the prompt statistics; later ones carry new tokens. The last one
// has Finish set (or Err), and then the channel is closed.
type Output struct {
	Tokens         []int
	Logprobs       []PositionLogprobs // one per token of Tokens, when asked
	PromptLogprobs []*PositionLogprobs
	// Finish is "" until the request ends; StopToken is the stop token id
	// when Finish is FinishStop.
	Finish    string
	StopToken int
	// Err is set when the request failed inside the engine.
	Err error
	// PromptTokens and CachedTokens: the prompt's length and how many of
	// its positions came from the prefix cache (set on the first Output).
	PromptTokens, CachedTokens int
}

// Stats is a snapshot of the engine for /metrics.
type Stats struct {
	Running, Waiting            int
	KVBlocksTotal, KVBlocksUsed int
	// PrefixQueries and PrefixHits count prompt positions looked up in the
	// prefix cache and found there.
	PrefixQueries, PrefixHits int64
	Preemptions               int64
	PromptTokens              int64 // prefilled (not cached) prompt tokens
	GenerationTokens          int64
	Steps                     int64
}
