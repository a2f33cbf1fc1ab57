package bench

import (
	"math"
	"sort"
)

// Summary is a latency distribution in milliseconds: mean, standard
// deviation (numpy's, population), median and percentiles (numpy's linear
// interpolation). All are 0 for no samples, as vLLM reports them.
type Summary struct {
	Mean   float64 `json:"mean_ms"`
	Median float64 `json:"median_ms"`
	Std    float64 `json:"std_ms"`
	P50    float64 `json:"p50_ms"`
	P90    float64 `json:"p90_ms"`
	P99    float64 `json:"p99_ms"`
}

// Metrics are vLLM's calculate_metrics over a set of records.
type Metrics struct {
	Completed   int     `json:"completed"`
	Failed      int     `json:"failed"`
	Duration    float64 `json:"duration"`
	TotalInput  int     `json:"total_input_tokens"`
	TotalOutput int     `json:"total_output_tokens"`
	// Throughputs are per second of Duration: completed requests, output
	// tokens, and input plus output tokens of completed requests.
	RequestThroughput    float64 `json:"request_throughput"`
	OutputThroughput     float64 `json:"output_throughput"`
	TotalTokenThroughput float64 `json:"total_token_throughput"`
	// TTFT, TPOT ((latency-TTFT)/(output-1), requests with more than one
	// output token), ITL (every gap of every request) and E2EL (latency).
	TTFT Summary `json:"ttft"`
	TPOT Summary `json:"tpot"`
	ITL  Summary `json:"itl"`
	E2EL Summary `json:"e2el"`
	// MaxOutputTokensPerS and MaxConcurrentRequests are vLLM's peaks over
	// one-second buckets from the first start (each streamed message counts
	// one token; a request counts in every bucket it touches). PeakInFlight
	// is the exact most requests in flight at one instant, failed ones
	// included.
	MaxOutputTokensPerS   float64 `json:"max_output_tokens_per_s"`
	MaxConcurrentRequests int     `json:"max_concurrent_requests"`
	PeakInFlight          int     `json:"peak_in_flight"`
}

// Compute returns the metrics of recs over a run of duration seconds.
func Compute(recs []Record, duration float64) Metrics {
	m := Metrics{Duration: duration}
	var ttfts, tpots, itls, e2els []float64
	var ok []Record
	for _, r := range recs {
		if !r.Success {
			m.Failed++
			continue
		}
		ok = append(ok, r)
		m.Completed++
		m.TotalInput += r.InputLen()
		m.TotalOutput += r.OutputTokens
		if r.OutputTokens > 1 {
			tpots = append(tpots, (r.Latency-r.TTFT)/float64(r.OutputTokens-1))
		}
		itls = append(itls, r.ITL...)
		ttfts = append(ttfts, r.TTFT)
		e2els = append(e2els, r.Latency)
	}
	if duration > 0 {
		m.RequestThroughput = float64(m.Completed) / duration
		m.OutputThroughput = float64(m.TotalOutput) / duration
		m.TotalTokenThroughput = float64(m.TotalInput+m.TotalOutput) / duration
	}
	m.TTFT, m.TPOT, m.ITL, m.E2EL = summarize(ttfts), summarize(tpots), summarize(itls), summarize(e2els)
	m.MaxOutputTokensPerS, m.MaxConcurrentRequests = secondPeaks(ok)
	m.PeakInFlight = peakInFlight(recs)
	return m
}

// summarize returns the Summary of x (seconds) in milliseconds.
func summarize(x []float64) Summary {
	if len(x) == 0 {
		return Summary{}
	}
	s := sortedCopy(x)
	mean := 0.0
	for _, v := range s {
		mean += v
	}
	mean /= float64(len(s))
	v := 0.0
	for _, e := range s {
		v += (e - mean) * (e - mean)
	}
	med := percentile(s, 50)
	return Summary{Mean: mean * 1000, Median: med * 1000, Std: math.Sqrt(v/float64(len(s))) * 1000,
		P50: med * 1000, P90: percentile(s, 90) * 1000, P99: percentile(s, 99) * 1000}
}

// percentile is numpy.percentile's default (linear) method on sorted s.
func percentile(s []float64, p float64) float64 {
	if len(s) == 0 {
		return 0
	}
	h := p / 100 * float64(len(s)-1)
	lo := int(math.Floor(h))
	if lo >= len(s)-1 {
		return s[len(s)-1]
	}
	return s[lo] + (h-float64(lo))*(s[lo+1]-s[lo])
}

// secondPeaks reproduces vLLM's max_output_tokens_per_s and
// max_concurrent_requests over successful records.
func secondPeaks(ok []Record) (float64, int) {
	if len(ok) == 0 {
		return 0, 0
	}
	minStart, maxEnd := math.Inf(1), math.Inf(-1)
	for _, r := range ok {
		minStart = math.Min(minStart, r.Start)
		maxEnd = math.Max(maxEnd, r.Start+r.Latency)
	}
	n := int(math.Ceil(maxEnd-minStart)) + 1
	tokens := make([]float64, n)
	conc := make([]int, n)
	for _, r := range ok {
		t := r.Start + r.TTFT
		times := []float64{t}
		for _, g := range r.ITL {
			t += g
			times = append(times, t)
		}
		for _, t := range times {
			if b := int(t - minStart); b >= 0 && b < n {
				tokens[b]++
			}
		}
		for s := int(r.Start - minStart); s <= int(r.Start+r.Latency-minStart) && s < n; s++ {
			conc[s]++
		}
	}
	maxTok, maxConc := 0.0, 0
	for i := range n {
		maxTok = math.Max(maxTok, tokens[i])
		maxConc = max(maxConc, conc[i])
	}
	return maxTok, maxConc
}

// peakInFlight is the most requests in flight at once, each holding
// [Start, Start+Latency): a request ending as another starts does not
// overlap it. Requests that took no time (refused at once) hold nothing.
func peakInFlight(recs []Record) int {
	type ev struct {
		t     float64
		delta int
	}
	evs := make([]ev, 0, 2*len(recs))
	for _, r := range recs {
		if r.Latency > 0 {
			evs = append(evs, ev{r.Start, 1}, ev{r.Start + r.Latency, -1})
		}
	}
	sort.Slice(evs, func(i, j int) bool {
		if evs[i].t != evs[j].t {
			return evs[i].t < evs[j].t
		}
		return evs[i].delta < evs[j].delta
	})
	cur, peak := 0, 0
	for _, e := range evs {
		cur += e.delta
		peak = max(peak, cur)
	}
	return peak
}
