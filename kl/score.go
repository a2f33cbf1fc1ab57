package kl

import (
	"fmt"
	"math"
)

// LowBArena's constants (shared/seeds: "Scoring" and "The checkpoint").
const (
	// KLLimit is the contract's most KL from BF16, in nats per token: a
	// checkpoint above it breaks the contract and scores 0.
	KLLimit = 0.15
	// klWeight converts nats per token into accuracy points inside D.
	klWeight = 42.8
	// The speed gate: s − 1.645·0.05/√3 ≥ 0.95.
	speedGate = 0.95
	// The length gate: generated tokens within 10% of BF16's.
	lengthGate = 0.10
	// The accuracy gate: a drop of at most 5 points per gated domain.
	accGate = 5.0
	// failedGate is the share of its score a solution failing a gate keeps.
	failedGate = 0.1
)

// ScoreInputs are what LowBArena's score needs besides the KL, as the user
// measured or expects them. Ratios are geometric means over the arena's
// three workloads.
type ScoreInputs struct {
	// AccDrop is the mean accuracy drop against BF16, in points.
	AccDrop float64
	// Memory is m: BF16's peak memory over the candidate's (2 for half the
	// memory).
	Memory float64
	// Speed is s: the candidate's throughput over BF16's.
	Speed float64
	// Length is L: the relative change of the generated length (0.05 for
	// 5% longer than BF16).
	Length float64
}

// Score is LowBArena's score estimated from a KL and ScoreInputs:
//
//	D = 0.79 · AccDrop + 0.21 · 42.8 · KL
//	E = √(m · s / max(1, 1 + L))
//	LowBScore = E · exp(−max(D, 0) / 10)
//
// times 0.1 when a gate fails, and 0 when the KL breaks the contract.
type Score struct {
	KL        float64     `json:"kl"`
	Inputs    ScoreInputs `json:"inputs"`
	D         float64     `json:"d"`
	E         float64     `json:"e"`
	LowBScore float64     `json:"lowbscore"` // before gates
	// Final applies the gates: LowBScore, or 0.1 of it when a gate fails,
	// or 0 when KL > KLLimit.
	Final float64 `json:"final"`
	// Failed names the gates that fail: "kl-contract", "accuracy",
	// "speed", "length".
	Failed []string `json:"failed_gates"`
	// FinalLo and FinalHi are Final at the ends of the KL's interval
	// (FinalLo at its upper end).
	FinalLo float64 `json:"final_lo"`
	FinalHi float64 `json:"final_hi"`
}

// Validate reports inputs that cannot be ratios.
func (in ScoreInputs) Validate() error {
	switch {
	case !(in.Memory > 0) || math.IsInf(in.Memory, 0):
		return fmt.Errorf("kl: memory ratio %g: want BF16's peak memory over yours, > 0 (2 = half the memory)", in.Memory)
	case !(in.Speed > 0) || math.IsInf(in.Speed, 0):
		return fmt.Errorf("kl: speed ratio %g: want your throughput over BF16's, > 0", in.Speed)
	case !(in.Length > -1) || math.IsInf(in.Length, 0):
		return fmt.Errorf("kl: length change %g: want (yours − BF16's) / BF16's, > -1", in.Length)
	case math.IsNaN(in.AccDrop) || math.IsInf(in.AccDrop, 0):
		return fmt.Errorf("kl: accuracy drop %g: want points, e.g. 1.5", in.AccDrop)
	}
	return nil
}

// NewScore estimates the score for a mean KL and its 95% interval [lo, hi].
func NewScore(kl, lo, hi float64, in ScoreInputs) (*Score, error) {
	if err := in.Validate(); err != nil {
		return nil, err
	}
	s := &Score{KL: kl, Inputs: in}
	s.D, s.E, s.LowBScore, s.Final, s.Failed = score(kl, in)
	_, _, _, s.FinalLo, _ = score(hi, in)
	_, _, _, s.FinalHi, _ = score(lo, in)
	return s, nil
}

func score(kl float64, in ScoreInputs) (d, e, lowb, final float64, failed []string) {
	d = 0.79*in.AccDrop + 0.21*klWeight*kl
	e = math.Sqrt(in.Memory * in.Speed / max(1, 1+in.Length))
	lowb = e * math.Exp(-max(d, 0)/10)
	if kl > KLLimit {
		failed = append(failed, "kl-contract")
	}
	if in.AccDrop > accGate {
		failed = append(failed, "accuracy")
	}
	if in.Speed-1.645*0.05/math.Sqrt(3) < speedGate {
		failed = append(failed, "speed")
	}
	if math.Abs(in.Length) > lengthGate {
		failed = append(failed, "length")
	}
	final = lowb
	switch {
	case kl > KLLimit:
		final = 0
	case len(failed) > 0:
		final = failedGate * lowb
	}
	return d, e, lowb, final, failed
}
