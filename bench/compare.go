package bench

import (
	"fmt"
	"math"
	"reflect"
	"slices"
)

// Comparison is a candidate run against a baseline run of the same
// workload, scored by the arenas' rules.
type Comparison struct {
	Baseline  string            `json:"baseline"`
	Candidate string            `json:"candidate"`
	Workload  string            `json:"workload"`
	Phases    []PhaseComparison `json:"phases"`
	// Switchboard, LowBArena and FlagOS apply their rules to the phases
	// whatever the workload, so that a random run can be read as any of
	// them; each arena scores its own workloads.
	Switchboard SwitchboardScore `json:"switchboard"`
	LowBArena   LowBArenaSpeed   `json:"lowbarena"`
	FlagOS      FlagOSScore      `json:"flagos"`
}

// PhaseSide is one run's numbers for a phase.
type PhaseSide struct {
	OutputThroughput     float64 `json:"output_throughput"`
	TotalTokenThroughput float64 `json:"total_token_throughput"`
	TTFTP90              float64 `json:"ttft_p90_ms"`
	OutputTokens         int     `json:"output_tokens"`
	Completed            int     `json:"completed"`
	Failed               int     `json:"failed"`
}

// KindTTFT is Switchboard's latency rule in one kind of traffic.
type KindTTFT struct {
	Kind    string  `json:"kind"`
	BaseP90 float64 `json:"baseline_ttft_p90_ms"`
	CandP90 float64 `json:"candidate_ttft_p90_ms"`
	// Factor is min(1, 1.5·BaseP90/CandP90): 1 within the allowance.
	Factor float64 `json:"factor"`
}

// PhaseComparison compares one phase.
type PhaseComparison struct {
	PhaseInfo
	Base PhaseSide `json:"baseline"`
	Cand PhaseSide `json:"candidate"`
	// OutputRatio and TotalRatio are the candidate's throughputs over the
	// baseline's (output tokens/s; input plus output tokens/s).
	OutputRatio float64    `json:"output_ratio"`
	TotalRatio  float64    `json:"total_ratio"`
	Kinds       []KindTTFT `json:"kinds"`
	// Factor is the smallest kind's factor; Score is OutputRatio×Factor.
	Factor float64 `json:"factor"`
	Score  float64 `json:"score"`
}

// TTFTAllowance is how far the candidate's p90 TTFT may exceed the
// baseline's in each kind of traffic before its throughput counts for
// less (Switchboard).
const TTFTAllowance = 1.5

// SwitchboardScore is throughput relative to the baseline, each phase's
// ratio cut by its latency factor, combined over phases (load levels) by
// the geometric mean. Unpenalized leaves the factors out.
type SwitchboardScore struct {
	Score       float64 `json:"score"`
	Unpenalized float64 `json:"unpenalized"`
}

// LowBArenaSpeed is LowBArena's speed term: s, the geometric mean over
// phases (its three workloads) of output throughput over the baseline's
// (BF16's); the speed gate s − 1.645·0.05/√n ≥ 0.95; the length change L
// (generated tokens over the baseline's, less 1) and its gate |L| ≤ 0.1;
// and SpeedTerm = √(s / max(1, 1+L)), the score's E with the memory
// ratio m left at 1 (memory is not visible to an HTTP client).
type LowBArenaSpeed struct {
	S            float64 `json:"s"`
	GateValue    float64 `json:"speed_gate_value"`
	GatePass     bool    `json:"speed_gate_pass"`
	LengthChange float64 `json:"length_change"`
	LengthPass   bool    `json:"length_gate_pass"`
	SpeedTerm    float64 `json:"speed_term"`
}

// FlagOSScore is FlagOS's performance score per phase (scenario): the
// relative gain in total tokens/s, times 100 and the 70% weight; Mean
// averages the phases.
type FlagOSScore struct {
	Gains  []float64 `json:"gains"`
	Scores []float64 `json:"scores"`
	Mean   float64   `json:"mean_score"`
}

// Compare scores cand against base. The two must have replayed the same
// workload: the same spec and the same prompts in every phase.
func Compare(base, cand *Result, baseName, candName string) (*Comparison, error) {
	if !reflect.DeepEqual(base.Spec, cand.Spec) {
		return nil, fmt.Errorf("bench: %s replayed workload %+v but %s replayed %+v; rerun one with the other's --workload, --scale, --seed and flags",
			baseName, base.Spec, candName, cand.Spec)
	}
	if len(base.Phases) != len(cand.Phases) {
		return nil, fmt.Errorf("bench: %s has %d phases, %s %d; was one run interrupted?", baseName, len(base.Phases), candName, len(cand.Phases))
	}
	c := &Comparison{Baseline: baseName, Candidate: candName, Workload: base.Spec.Name}
	var scores, ratios []float64
	var baseOut, candOut int
	for i := range base.Phases {
		b, k := &base.Phases[i], &cand.Phases[i]
		if b.Name != k.Name || !slices.Equal(promptLens(b.Records), promptLens(k.Records)) {
			return nil, fmt.Errorf("bench: phase %d (%s, %s) sent different prompts in the two runs; were they built with different tokenizers?", i, b.Name, k.Name)
		}
		pc := PhaseComparison{PhaseInfo: b.PhaseInfo, Base: side(b), Cand: side(k), Factor: 1}
		pc.OutputRatio = ratio(pc.Cand.OutputThroughput, pc.Base.OutputThroughput)
		pc.TotalRatio = ratio(pc.Cand.TotalTokenThroughput, pc.Base.TotalTokenThroughput)
		for _, kind := range recordKinds(b.Records) {
			bm := Compute(filterKind(b.Records, kind), b.Duration)
			km := Compute(filterKind(k.Records, kind), k.Duration)
			kt := KindTTFT{Kind: kind, BaseP90: bm.TTFT.P90, CandP90: km.TTFT.P90, Factor: ttftFactor(bm, km)}
			pc.Kinds = append(pc.Kinds, kt)
			pc.Factor = math.Min(pc.Factor, kt.Factor)
		}
		pc.Score = pc.OutputRatio * pc.Factor
		scores = append(scores, pc.Score)
		ratios = append(ratios, pc.OutputRatio)
		baseOut += pc.Base.OutputTokens
		candOut += pc.Cand.OutputTokens
		gain := pc.TotalRatio - 1
		c.FlagOS.Gains = append(c.FlagOS.Gains, gain)
		c.FlagOS.Scores = append(c.FlagOS.Scores, 100*gain*0.7)
		c.Phases = append(c.Phases, pc)
	}
	c.Switchboard = SwitchboardScore{Score: geomean(scores), Unpenalized: geomean(ratios)}
	s := geomean(ratios)
	l := ratio(float64(candOut), float64(baseOut)) - 1
	gate := s - 1.645*0.05/math.Sqrt(float64(len(ratios)))
	c.LowBArena = LowBArenaSpeed{S: s, GateValue: gate, GatePass: gate >= 0.95, LengthChange: l,
		LengthPass: math.Abs(l) <= 0.1, SpeedTerm: math.Sqrt(s / math.Max(1, 1+l))}
	for _, v := range c.FlagOS.Scores {
		c.FlagOS.Mean += v / float64(len(c.FlagOS.Scores))
	}
	return c, nil
}

func promptLens(recs []Record) []int {
	out := make([]int, len(recs))
	for i, r := range recs {
		out[i] = r.PromptLen
	}
	return out
}

func side(p *PhaseResult) PhaseSide {
	m := p.Metrics
	return PhaseSide{OutputThroughput: m.OutputThroughput, TotalTokenThroughput: m.TotalTokenThroughput,
		TTFTP90: m.TTFT.P90, OutputTokens: m.TotalOutput, Completed: m.Completed, Failed: m.Failed}
}

// ttftFactor is Switchboard's latency rule for one kind: 1 while the
// candidate's p90 TTFT is within 1.5× the baseline's, then the allowance
// over the actual (so throughput counts in proportion to how far over it
// is). A candidate that completed nothing gets 0; a baseline that did
// cannot judge, and the rule is left out (1).
func ttftFactor(base, cand Metrics) float64 {
	switch {
	case cand.Completed == 0:
		return 0
	case base.Completed == 0 || cand.TTFT.P90 <= TTFTAllowance*base.TTFT.P90:
		return 1
	}
	return TTFTAllowance * base.TTFT.P90 / cand.TTFT.P90
}

// ratio is a/b, 0 when b is 0.
func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

// geomean is the geometric mean, 0 if any value is 0 or there are none.
func geomean(x []float64) float64 {
	if len(x) == 0 {
		return 0
	}
	sum := 0.0
	for _, v := range x {
		if v <= 0 {
			return 0
		}
		sum += math.Log(v)
	}
	return math.Exp(sum / float64(len(x)))
}
