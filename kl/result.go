package kl

import "math"

// Modes of a Result.
const (
	ModeTeacherForced = "teacher-forced" // the prompts' own tokens
	ModeSampled       = "sampled"        // the reference's sampled continuations
)

// Position is one scored token: the prediction of Sequences[Prompt].IDs[Pos]
// from the tokens before it.
type Position struct {
	Prompt, Pos, Token int
	// KL is the exact full-vocabulary KL(P‖Q) (offline); NaN when only the
	// top-k estimates are known (online).
	KL float64
	Estimates
	// RefTopText and CandTopText are the rank-1 tokens' texts from the
	// servers' decoded_token (online; "" offline, where the report decodes
	// them).
	RefTopText, CandTopText string
}

// Sequence is one scored token sequence: the prompt and, in sampled mode,
// the reference's continuation.
type Sequence struct {
	IDs []int
	// From is the first scored position (1 teacher-forced, the prompt
	// length when sampled).
	From int
	// Pieces are the tokens' texts decoded alone, from the servers'
	// decoded_token (online; "" where unknown); nil offline.
	Pieces []string
}

// LayerError is one decoder layer's hidden-state error: how far the
// candidate's residual stream after that layer is from the reference's, on
// the same tokens.
type LayerError struct {
	Layer int `json:"layer"`
	// NMSE is Σ(h_cand − h_ref)² / Σ h_ref² over every position fed.
	NMSE float64 `json:"nmse"`
	// Added is NMSE minus the previous layer's: the error this layer adds
	// to what reaches it (the first layer's is its NMSE).
	Added float64 `json:"added"`
}

// Result is what Offline or Online measured, before summarizing.
type Result struct {
	Mode string
	// Online reports whether the positions came from two servers'
	// prompt_logprobs (no exact KL) rather than from the runtime.
	Online bool
	// K is the top-k of the Estimates (the prompt_logprobs k; -1 is the
	// whole vocabulary).
	K         int
	Sequences []Sequence
	Positions []Position
	// Layers is the per-layer hidden-state error (offline only).
	Layers []LayerError
	// Study compares the top-k estimators with the exact KL at several k
	// (offline, when asked).
	Study []StudyRow
}

// Exact reports whether the positions carry the exact KL.
func (r *Result) Exact() bool {
	return len(r.Positions) > 0 && !math.IsNaN(r.Positions[0].KL)
}
