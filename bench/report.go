package bench

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// WriteReport prints r's phases as vLLM's "Serving Benchmark Result"
// blocks, then a per-kind TTFT table for phases that mix kinds.
func WriteReport(w io.Writer, r *Result) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "workload %s (scale %g, seed %d) against %s, model %s\n", r.Spec.Name, r.Spec.Scale, r.Spec.Seed, r.URL, r.Model)
	for _, p := range r.Phases {
		m := p.Metrics
		fmt.Fprintf(tw, "%s\n", center(" "+p.Name+" ", 50, "="))
		row := func(k string, v any) { fmt.Fprintf(tw, "%s\t%v\n", k, v) }
		row("Successful requests:", m.Completed)
		row("Failed requests:", m.Failed)
		if p.MaxConcurrency > 0 {
			row("Maximum request concurrency:", p.MaxConcurrency)
		}
		if p.LoadUnit == "users" {
			row("Users:", p.NumUsers)
		}
		if p.RequestRate > 0 {
			row("Request rate configured (RPS):", fmt.Sprintf("%.2f", p.RequestRate))
		}
		row("Benchmark duration (s):", fmt.Sprintf("%.2f", p.Duration))
		row("Total input tokens:", m.TotalInput)
		row("Total generated tokens:", m.TotalOutput)
		row("Request throughput (req/s):", fmt.Sprintf("%.2f", m.RequestThroughput))
		row("Output token throughput (tok/s):", fmt.Sprintf("%.2f", m.OutputThroughput))
		row("Peak output token throughput (tok/s):", fmt.Sprintf("%.2f", m.MaxOutputTokensPerS))
		row("Peak concurrent requests (1-s buckets):", m.MaxConcurrentRequests)
		row("Peak requests in flight (exact):", m.PeakInFlight)
		row("Total token throughput (tok/s):", fmt.Sprintf("%.2f", m.TotalTokenThroughput))
		for _, s := range []struct {
			name, title string
			sum         Summary
		}{{"TTFT", "Time to First Token", m.TTFT}, {"TPOT", "Time per Output Token (excl. 1st token)", m.TPOT},
			{"ITL", "Inter-token Latency", m.ITL}, {"E2EL", "End-to-end Latency", m.E2EL}} {
			fmt.Fprintf(tw, "%s\n", center(s.title, 50, "-"))
			row("Mean "+s.name+" (ms):", fmt.Sprintf("%.2f", s.sum.Mean))
			row("Median "+s.name+" (ms):", fmt.Sprintf("%.2f", s.sum.Median))
			row("P90 "+s.name+" (ms):", fmt.Sprintf("%.2f", s.sum.P90))
			row("P99 "+s.name+" (ms):", fmt.Sprintf("%.2f", s.sum.P99))
		}
		if len(p.Kinds) > 0 {
			fmt.Fprintf(tw, "%s\n", center("By kind of traffic", 50, "-"))
			fmt.Fprintf(tw, "kind\trequests\tfailed\toutput tok/s\tTTFT p90 (ms)\tTPOT mean (ms)\n")
			for _, k := range p.Kinds {
				fmt.Fprintf(tw, "%s\t%d\t%d\t%.2f\t%.2f\t%.2f\n", k.Kind, k.Metrics.Completed, k.Metrics.Failed,
					k.Metrics.OutputThroughput, k.Metrics.TTFT.P90, k.Metrics.TPOT.Mean)
			}
		}
		if errs := distinctErrors(p.Records, 3); len(errs) > 0 {
			fmt.Fprintf(tw, "%s\n", center("Errors", 50, "-"))
			for _, e := range errs {
				fmt.Fprintln(tw, e)
			}
		}
	}
	fmt.Fprintln(tw, strings.Repeat("=", 50))
	return tw.Flush()
}

// WriteComparison prints c as a table and the three arenas' scores.
func WriteComparison(w io.Writer, c *Comparison) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(w, "workload %s: candidate %s against baseline %s\n", c.Workload, c.Candidate, c.Baseline)
	fmt.Fprintf(tw, "phase\tload\tbase tok/s\tcand tok/s\tratio\tbase TTFT p90\tcand TTFT p90\tfactor\tscore\tfailed (b/c)\t\n")
	for _, p := range c.Phases {
		fmt.Fprintf(tw, "%s\t%g %s\t%.2f\t%.2f\t%.3f\t%.1f ms\t%.1f ms\t%.3f\t%.3f\t%d/%d\t\n", p.Name, p.Load, p.LoadUnit,
			p.Base.OutputThroughput, p.Cand.OutputThroughput, p.OutputRatio, p.Base.TTFTP90, p.Cand.TTFTP90,
			p.Factor, p.Score, p.Base.Failed, p.Cand.Failed)
		if len(p.Kinds) > 1 {
			for _, k := range p.Kinds {
				fmt.Fprintf(tw, "  %s\t\t\t\t\t%.1f ms\t%.1f ms\t%.3f\t\t\t\n", k.Kind, k.BaseP90, k.CandP90, k.Factor)
			}
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	sb, lb, fo := c.Switchboard, c.LowBArena, c.FlagOS
	fmt.Fprintf(w, "\nSwitchboard: score %.4f (throughput ratio %.4f before the TTFT p90 rule of %.1fx per kind; geometric mean over %d phases)\n",
		sb.Score, sb.Unpenalized, TTFTAllowance, len(c.Phases))
	fmt.Fprintf(w, "LowBArena:   s = %.4f; speed gate s - 1.645*0.05/sqrt(%d) = %.4f %s 0.95 (%s); length change %+.2f%% (%s); speed term sqrt(s/max(1,1+L)) = %.4f\n",
		lb.S, len(c.Phases), lb.GateValue, map[bool]string{true: ">=", false: "<"}[lb.GatePass], passFail(lb.GatePass),
		100*lb.LengthChange, passFail(lb.LengthPass), lb.SpeedTerm)
	fmt.Fprintf(w, "FlagOS:      total-token gains")
	for i, g := range fo.Gains {
		fmt.Fprintf(w, " %s %+.2f%% (score %.2f)", c.Phases[i].Name, 100*g, fo.Scores[i])
	}
	fmt.Fprintf(w, "; mean performance score %.2f\n", fo.Mean)
	return nil
}

func passFail(ok bool) string {
	if ok {
		return "pass"
	}
	return "FAIL"
}

func center(s string, n int, fill string) string {
	if len(s) >= n {
		return s
	}
	left := (n - len(s)) / 2
	return strings.Repeat(fill, left) + s + strings.Repeat(fill, n-len(s)-left)
}

// distinctErrors returns up to n different error messages with counts.
func distinctErrors(recs []Record, n int) []string {
	count := map[string]int{}
	var order []string
	for _, r := range recs {
		if r.Success {
			continue
		}
		if count[r.Error] == 0 {
			order = append(order, r.Error)
		}
		count[r.Error]++
	}
	var out []string
	for i, e := range order {
		if i == n {
			out = append(out, fmt.Sprintf("... and %d other errors", len(order)-n))
			break
		}
		out = append(out, fmt.Sprintf("%d× %s", count[e], e))
	}
	return out
}
