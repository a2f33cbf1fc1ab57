package kl

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"text/tabwriter"
)

// WriteJSON writes the report as indented JSON. NaN values (an interval
// that could not be computed) are written as null.
func (r *Report) WriteJSON(w io.Writer) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return fmt.Errorf("kl: %w", err)
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

// jnum formats a float as JSON, NaN and ±Inf (which encoding/json refuses)
// as null.
func jnum(v float64) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return "null"
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}

// MarshalJSON writes NaN and ±Inf as null.
func (s Summary) MarshalJSON() ([]byte, error) {
	return fmt.Appendf(nil, `{"mean":%s,"ci95_lo":%s,"ci95_hi":%s,"p50":%s,"p90":%s,"p99":%s,"max":%s}`,
		jnum(s.Mean), jnum(s.Lo), jnum(s.Hi), jnum(s.P50), jnum(s.P90), jnum(s.P99), jnum(s.Max)), nil
}

// MarshalJSON writes NaN (the bias when the exact KL is 0) as null.
func (e EstErr) MarshalJSON() ([]byte, error) {
	return fmt.Appendf(nil, `{"mean":%s,"rel_bias":%s,"mae":%s}`, jnum(e.Mean), jnum(e.Bias), jnum(e.MAE)), nil
}

// WriteText writes the report for a person.
func (r *Report) WriteText(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "KL(reference ‖ candidate), %s, %s: %d prompts, %d positions\n", r.Source, r.Mode, r.Prompts, r.Positions)
	fmt.Fprintf(&b, "  reference  %s\n  candidate  %s\n\n", r.Ref, r.Cand)
	k := strconv.Itoa(r.K)
	if r.K < 0 {
		k = "vocab"
	}
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "nats/token\tmean\t95%% CI (%s)\tp50\tp90\tp99\tmax\t\n", r.Resampled)
	row := func(name string, s Summary) {
		fmt.Fprintf(tw, "%s\t%.5f\t[%.5f, %.5f]\t%.5f\t%.5f\t%.5f\t%.5f\t\n", name, s.Mean, s.Lo, s.Hi, s.P50, s.P90, s.P99, s.Max)
	}
	if r.KL != nil {
		row("KL, full vocabulary", *r.KL)
	}
	row("union+tail, k="+k, r.Union)
	row("lower bound, k="+k, r.Lower)
	row("Δ log-lik of actual tokens", r.Delta)
	tw.Flush()
	fmt.Fprintf(&b, "\ntop-1 agreement %.2f%% (%d positions); the reference's top-%s tokens hold %.1f%% of its probability on average\n",
		100*r.Top1, r.Top1Known, k, 100*r.Coverage)
	if r.KL == nil {
		b.WriteString("union+tail overestimates where the top-k sets differ; the lower bound never exceeds the true KL;\n")
		if r.Mode == ModeSampled {
			b.WriteString("Δ log-lik is unbiased here, the tokens being the reference's samples (noisy per token).\n")
		} else {
			b.WriteString("Δ log-lik on given text is a cross-entropy gap, not a KL (it can be negative).\n")
		}
	}
	if len(r.Worst) > 0 {
		fmt.Fprintf(&b, "\nworst positions by %s:\n", r.Primary)
		tw = tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "  value\tprompt\tpos\ttoken\tref top-1\tcand top-1\tcontext")
		for _, x := range r.Worst {
			v := x.Union
			switch r.Primary {
			case MetricKL:
				v = *x.KL
			case MetricLower:
				v = x.Lower
			case MetricDelta:
				v = x.Delta
			}
			fmt.Fprintf(tw, "  %.4f\t%d\t%d\t%d %q\t%d %q\t%d %q\t%s\n", v, x.Prompt, x.Pos, x.Token, x.Text,
				x.RefTop, x.RefTopText, x.CandTop, x.CandTopText, quote(tail(x.Context, 40)))
		}
		tw.Flush()
	}
	if len(r.Layers) > 0 {
		b.WriteString("\nhidden-state error after each layer (NMSE; added = this layer's increase):\n")
		top := 0.0
		for _, l := range r.Layers {
			top = max(top, l.Added)
		}
		tw = tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "  layer\tNMSE\tadded\t")
		for _, l := range r.Layers {
			bar := ""
			if top > 0 && l.Added > 0 {
				bar = strings.Repeat("#", int(math.Round(30*l.Added/top)))
			}
			fmt.Fprintf(tw, "  %d\t%.3e\t%+.3e\t%s\n", l.Layer, l.NMSE, l.Added, bar)
		}
		tw.Flush()
		b.WriteString("layers with the largest added error are the first to keep in BF16 (quantize --ignore).\n")
	}
	if len(r.Study) > 0 {
		b.WriteString("\nestimators against the exact KL (bias = error of the mean; MAE per position):\n")
		b.WriteString(StudyTable(r.Study))
	}
	if s := r.Score; s != nil {
		fmt.Fprintf(&b, "\nLowBArena score estimate from KL %.5f, accuracy drop %.2f points, m %.3f, s %.3f, L %+.3f:\n",
			s.KL, s.Inputs.AccDrop, s.Inputs.Memory, s.Inputs.Speed, s.Inputs.Length)
		fmt.Fprintf(&b, "  D = 0.79·drop + 0.21·42.8·KL = %.4f;  E = √(m·s/max(1, 1+L)) = %.4f;  LowBScore = E·exp(−D/10) = %.4f\n", s.D, s.E, s.LowBScore)
		gates := "all gates pass"
		if len(s.Failed) > 0 {
			gates = "failed gates: " + strings.Join(s.Failed, ", ")
		}
		fmt.Fprintf(&b, "  %s; score %.4f (%.4f to %.4f over the KL's 95%% interval)\n", gates, s.Final, s.FinalLo, s.FinalHi)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// StudyTable formats study rows as a Markdown table.
func StudyTable(rows []StudyRow) string {
	var b strings.Builder
	b.WriteString("| k | P mass listed | exact KL | union+tail (bias, MAE) | lower bound (bias, MAE) | Δ log-lik (bias, MAE) |\n")
	b.WriteString("|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range rows {
		e := func(x EstErr) string { return fmt.Sprintf("%.4f (%+.1f%%, %.4f)", x.Mean, 100*x.Bias, x.MAE) }
		fmt.Fprintf(&b, "| %d | %.3f | %.4f | %s | %s | %s |\n", r.K, r.Coverage, r.KL, e(r.Union), e(r.Lower), e(r.Delta))
	}
	return b.String()
}

func quote(s string) string {
	q := strconv.Quote(s)
	return q[1 : len(q)-1]
}

// tail returns the last n runes of s.
func tail(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return "…" + string(r[len(r)-n:])
}
