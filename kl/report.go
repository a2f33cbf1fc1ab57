package kl

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"
)

// Metric names: the exact KL and the three top-k estimators.
const (
	MetricKL    = "kl"
	MetricUnion = "union_tail"
	MetricLower = "lower_bound"
	MetricDelta = "delta_ll"
)

// value returns a position's value of metric.
func (p *Position) value(metric string) float64 {
	switch metric {
	case MetricKL:
		return p.KL
	case MetricUnion:
		return p.Union
	case MetricLower:
		return p.Lower
	case MetricDelta:
		return p.Delta
	}
	panic("kl: unknown metric " + metric)
}

// ReportOptions configure Summarize.
type ReportOptions struct {
	Ref, Cand string // what the two sides are (directories or URLs)
	// Worst is how many of the worst positions to list (default 10; < 0
	// none).
	Worst int
	// Primary is the metric that ranks the worst positions and fills the
	// histogram: MetricKL when the result is exact, else by default
	// MetricUnion.
	Primary string
	// Decode turns token ids into text (offline); nil leaves token texts
	// to the servers' decoded_token pieces, or empty.
	Decode func(ids []int) string
}

// Report is the summary of a Result that lowbit kl prints and writes as
// JSON.
type Report struct {
	Source    string `json:"source"` // "offline" or "online"
	Mode      string `json:"mode"`
	Ref       string `json:"ref"`
	Cand      string `json:"cand"`
	K         int    `json:"k"`
	Prompts   int    `json:"prompts"`
	Positions int    `json:"positions"`
	// Resampled is what the bootstrap intervals resampled: "prompts" or
	// "positions".
	Resampled string   `json:"ci_resampled"`
	KL        *Summary `json:"kl,omitempty"` // exact; offline only
	Union     Summary  `json:"union_tail"`
	Lower     Summary  `json:"lower_bound"`
	Delta     Summary  `json:"delta_ll"`
	// Top1 is the fraction of positions where both sides' argmax agree,
	// over Top1Known positions (online, a dict without rank 1 cannot
	// tell); 0 when none is known.
	Top1      float64 `json:"top1_agreement"`
	Top1Known int     `json:"top1_positions"`
	// Coverage is the mean probability mass of the reference's k listed
	// tokens: how much of P the estimators see.
	Coverage float64      `json:"ref_topk_mass"`
	Primary  string       `json:"primary"`
	Worst    []Worst      `json:"worst"`
	Layers   []LayerError `json:"layers,omitempty"`
	Study    []StudyRow   `json:"estimator_study,omitempty"`
	Score    *Score       `json:"score,omitempty"`

	values []float64 // the primary metric per position, for the histogram
}

// Worst is one of the positions with the largest primary metric.
type Worst struct {
	Prompt  int      `json:"prompt"`
	Pos     int      `json:"pos"`
	Token   int      `json:"token"`
	Text    string   `json:"text"`    // the token
	Context string   `json:"context"` // the text just before it
	KL      *float64 `json:"kl,omitempty"`
	Union   float64  `json:"union_tail"`
	Lower   float64  `json:"lower_bound"`
	Delta   float64  `json:"delta_ll"`
	RefTop  int      `json:"ref_top1"`
	CandTop int      `json:"cand_top1"`
	// RefTopText and CandTopText are the argmax tokens' texts.
	RefTopText  string `json:"ref_top1_text"`
	CandTopText string `json:"cand_top1_text"`
}

// contextTokens is how many tokens before a worst position are shown.
const contextTokens = 12

// Summarize turns a Result into a Report.
func Summarize(res *Result, opts ReportOptions) (*Report, error) {
	if len(res.Positions) == 0 {
		return nil, fmt.Errorf("kl: no positions were scored: prompts need at least two tokens (or, sampled, one sampled token)")
	}
	exact := res.Exact()
	if opts.Primary == "" {
		opts.Primary = MetricUnion
		if exact {
			opts.Primary = MetricKL
		}
	}
	switch opts.Primary {
	case MetricUnion, MetricLower, MetricDelta:
	case MetricKL:
		if !exact {
			return nil, fmt.Errorf("kl: the exact KL is known offline only; rank by %s, %s or %s", MetricUnion, MetricLower, MetricDelta)
		}
	default:
		return nil, fmt.Errorf("kl: metric %q: want %s, %s, %s or %s", opts.Primary, MetricKL, MetricUnion, MetricLower, MetricDelta)
	}
	if opts.Worst == 0 {
		opts.Worst = 10
	}
	r := &Report{Source: "offline", Mode: res.Mode, Ref: opts.Ref, Cand: opts.Cand, K: res.K,
		Prompts: len(res.Sequences), Positions: len(res.Positions), Primary: opts.Primary,
		Layers: res.Layers, Study: res.Study}
	if res.Online {
		r.Source = "online"
	}
	groups := make([]int, len(res.Positions))
	for i, p := range res.Positions {
		groups[i] = p.Prompt
	}
	col := func(metric string) []float64 {
		v := make([]float64, len(res.Positions))
		for i := range res.Positions {
			v[i] = res.Positions[i].value(metric)
		}
		return v
	}
	if exact {
		s, unit := summarize(col(MetricKL), groups)
		r.KL, r.Resampled = &s, unit
	}
	r.Union, r.Resampled = summarize(col(MetricUnion), groups)
	r.Lower, _ = summarize(col(MetricLower), groups)
	r.Delta, _ = summarize(col(MetricDelta), groups)
	var agree int
	for _, p := range res.Positions {
		r.Coverage += p.Coverage
		if p.RefTop1 >= 0 && p.CandTop1 >= 0 {
			r.Top1Known++
			if p.RefTop1 == p.CandTop1 {
				agree++
			}
		}
	}
	r.Coverage /= float64(len(res.Positions))
	if r.Top1Known > 0 {
		r.Top1 = float64(agree) / float64(r.Top1Known)
	}
	r.values = col(opts.Primary)
	r.Worst = worst(res, opts)
	return r, nil
}

// worst lists the opts.Worst positions with the largest primary metric.
func worst(res *Result, opts ReportOptions) []Worst {
	if opts.Worst < 0 {
		return nil
	}
	order := make([]int, len(res.Positions))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int {
		return cmp.Compare(res.Positions[b].value(opts.Primary), res.Positions[a].value(opts.Primary))
	})
	var out []Worst
	for _, i := range order[:min(opts.Worst, len(order))] {
		p := res.Positions[i]
		s := res.Sequences[p.Prompt]
		w := Worst{Prompt: p.Prompt, Pos: p.Pos, Token: p.Token, Union: p.Union, Lower: p.Lower, Delta: p.Delta,
			RefTop: p.RefTop1, CandTop: p.CandTop1, RefTopText: p.RefTopText, CandTopText: p.CandTopText}
		if !math.IsNaN(p.KL) {
			kl := p.KL
			w.KL = &kl
		}
		a := max(0, p.Pos-contextTokens)
		switch {
		case s.Pieces != nil:
			w.Text = s.Pieces[p.Pos]
			w.Context = strings.Join(s.Pieces[a:p.Pos], "")
		case opts.Decode != nil:
			w.Text = opts.Decode(s.IDs[p.Pos : p.Pos+1])
			w.Context = opts.Decode(s.IDs[a:p.Pos])
			if p.RefTop1 >= 0 {
				w.RefTopText = opts.Decode([]int{p.RefTop1})
			}
			if p.CandTop1 >= 0 {
				w.CandTopText = opts.Decode([]int{p.CandTop1})
			}
		}
		out = append(out, w)
	}
	return out
}
