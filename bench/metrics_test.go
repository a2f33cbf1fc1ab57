package bench

import (
	"context"
	"math"
	"reflect"
	"slices"
	"testing"
	"testing/synctest"
	"time"
)

const ms = time.Millisecond

// near compares float results computed in a different order than the
// expectation; everything measured is exact (virtual time), so only
// float rounding is allowed for.
func near(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(1, math.Abs(b)) }

func secs(d ...time.Duration) []float64 {
	out := make([]float64, len(d))
	for i, v := range d {
		out[i] = v.Seconds()
	}
	return out
}

func sum(d []time.Duration) time.Duration {
	var s time.Duration
	for _, v := range d {
		s += v
	}
	return s
}

// TestMetricsAgainstScriptedServer runs a phase against a fake server
// whose every chunk comes after a scripted delay, in a synctest bubble
// (virtual time: the measured times are exactly the scripted ones), and
// checks each record and every aggregate against values derived from the
// script by vLLM's definitions.
func TestMetricsAgainstScriptedServer(t *testing.T) {
	tok := qwenTok(t)
	scripts := map[string]script{
		"p0": {ttft: 100 * ms, gaps: []time.Duration{50 * ms, 50 * ms, 50 * ms}, texts: []string{"a", "b", "c", "d"}, usage: 4, usageDelay: 40 * ms},
		"p1": {ttft: 200 * ms, gaps: []time.Duration{100 * ms}, texts: []string{"x", "y"}, usage: 2},
		// No usage chunk: output tokens are the text re-tokenized (" the"
		// is one Qwen3 token, so five).
		"p2": {ttft: 150 * ms, gaps: []time.Duration{25 * ms, 25 * ms, 25 * ms, 25 * ms}, texts: []string{" the", " the", " the", " the", " the"}},
	}
	lens := map[string]int{"p0": 10, "p1": 20, "p2": 30}
	var reqs []RequestSpec
	for _, p := range []string{"p0", "p1", "p2"} {
		reqs = append(reqs, RequestSpec{Kind: "k", Endpoint: Completions, Prompt: p, PromptLen: lens[p], MaxTokens: 8})
	}
	// Two in flight at most: p2 waits for p0, the first to finish.
	w := &Workload{Spec: Spec{Name: "test", Scale: 1}, Phases: []Phase{oneUserEach("test", 2, reqs...)}}

	var res *Result
	synctest.Test(t, func(t *testing.T) {
		fake := &fakeServer{t: t, scripts: scripts}
		hc, stop := serveInPipe(fake)
		defer stop()
		var err error
		res, err = Run(context.Background(), w, Options{URL: "http://fake", Tokenizer: tok, HTTPClient: hc})
		if err != nil {
			t.Fatal(err)
		}
		// The initial test request, then the three.
		if len(fake.bodies) != 4 {
			t.Errorf("server saw %d requests, want 4", len(fake.bodies))
		}
		for _, b := range fake.bodies {
			so, _ := b["stream_options"].(map[string]any)
			if b["model"] != "fake-model" || b["stream"] != true || so["include_usage"] != true || b["max_tokens"] != 8.0 || b["repetition_penalty"] != 1.0 {
				t.Errorf("payload %v: want vLLM's (model from /v1/models, stream with usage, max_tokens, repetition_penalty 1)", b)
			}
			if _, ok := b["temperature"]; ok {
				t.Errorf("payload %v sends a temperature; vLLM's client leaves it to the server", b)
			}
		}
	})

	// Derived from the script: p0 and p1 start at 0; p2 starts when p0
	// ends (completions latency ends at the last choice, before usage, but
	// the request holds its slot until [DONE], after the usage delay).
	p0End := scripts["p0"].ttft + sum(scripts["p0"].gaps) + scripts["p0"].usageDelay
	starts := map[string]time.Duration{"p0": 0, "p1": 0, "p2": p0End}
	outputs := map[string]int{"p0": 4, "p1": 2, "p2": 5}
	ph := res.Phases[0]
	if len(ph.Records) != 3 {
		t.Fatalf("%d records, want 3", len(ph.Records))
	}
	var wantTTFT, wantTPOT, wantITL, wantE2E []float64
	end, totalIn, totalOut := time.Duration(0), 0, 0
	for i, name := range []string{"p0", "p1", "p2"} {
		s, r := scripts[name], ph.Records[i]
		lat := s.ttft + sum(s.gaps)
		want := Record{Kind: "k", Endpoint: Completions, User: i, PromptLen: lens[name], MaxTokens: 8, Success: true,
			Start: starts[name].Seconds(), TTFT: s.ttft.Seconds(), ITL: secs(s.gaps...), Latency: lat.Seconds(),
			OutputTokens: outputs[name], OutputCounted: s.usage == 0, GeneratedText: textOf(s)}
		if s.usage > 0 {
			want.ServerPrompt = 7
		}
		if !recordEqual(r, want) {
			t.Errorf("record %s:\n got %+v\nwant %+v", name, r, want)
		}
		wantTTFT = append(wantTTFT, s.ttft.Seconds())
		wantTPOT = append(wantTPOT, (lat-s.ttft).Seconds()/float64(outputs[name]-1))
		wantITL = append(wantITL, secs(s.gaps...)...)
		wantE2E = append(wantE2E, lat.Seconds())
		end = max(end, starts[name]+lat+s.usageDelay)
		totalIn += lens[name]
		totalOut += outputs[name]
	}
	dur := end.Seconds()
	if ph.Duration != dur {
		t.Errorf("duration %v, want %v", ph.Duration, dur)
	}
	m := ph.Metrics
	checks := []struct {
		name      string
		got, want float64
	}{
		{"request throughput", m.RequestThroughput, 3 / dur},
		{"output throughput", m.OutputThroughput, float64(totalOut) / dur},
		{"total token throughput", m.TotalTokenThroughput, float64(totalIn+totalOut) / dur},
		// By hand: TTFTs 100, 200, 150 ms: p90 = 150 + 0.8·50.
		{"TTFT p90", m.TTFT.P90, 190},
		{"TTFT p99", m.TTFT.P99, 199},
		{"TTFT median", m.TTFT.Median, 150},
		{"TTFT mean", m.TTFT.Mean, mean(wantTTFT) * 1000},
		{"TTFT std", m.TTFT.Std, math.Sqrt(5000.0/3) * 1},
		{"TPOT mean", m.TPOT.Mean, mean(wantTPOT) * 1000},
		{"TPOT p50", m.TPOT.P50, 50},
		{"ITL mean", m.ITL.Mean, mean(wantITL) * 1000},
		{"ITL p90", m.ITL.P90, numpyPercentile(wantITL, 90) * 1000},
		{"E2EL p99", m.E2EL.P99, numpyPercentile(wantE2E, 99) * 1000},
		{"E2EL mean", m.E2EL.Mean, mean(wantE2E) * 1000},
		// Every chunk falls in the first second: 4+2+5 messages, 3 requests.
		{"peak output tokens/s", m.MaxOutputTokensPerS, 11},
		{"peak concurrent (1-s buckets)", float64(m.MaxConcurrentRequests), 3},
		// The cap held: never more than two in flight.
		{"peak in flight", float64(m.PeakInFlight), 2},
	}
	for _, c := range checks {
		if !near(c.got, c.want) {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}
	if m.Completed != 3 || m.Failed != 0 || m.TotalInput != totalIn || m.TotalOutput != totalOut {
		t.Errorf("counts %+v", m)
	}
}

// TestChatSessionTiming checks chat's definitions (TTFT at the role chunk,
// latency to the usage chunk) and that a multi-turn session resends the
// conversation with the assistant's actual reply.
func TestChatSessionTiming(t *testing.T) {
	tok := qwenTok(t)
	scripts := map[string]script{
		"turn one": {ttft: 300 * ms, gaps: []time.Duration{20 * ms, 30 * ms}, texts: []string{"", "Hel", "lo"}, usage: 2, usageDelay: 70 * ms},
		"turn two": {ttft: 120 * ms, gaps: []time.Duration{10 * ms}, texts: []string{"", "ok"}, usage: 1, usageDelay: 5 * ms},
	}
	se := Session{MultiTurn: true, Steps: []Step{
		{Requests: []RequestSpec{{Kind: "agent", Endpoint: Chat, Prompt: "turn one", PromptLen: 11, MaxTokens: 2}}},
		{Requests: []RequestSpec{{Kind: "agent", Endpoint: Chat, Prompt: "turn two", PromptLen: 13, MaxTokens: 1}}},
	}}
	w := &Workload{Spec: Spec{Name: "chat", Scale: 1}, Phases: []Phase{{PhaseInfo: PhaseInfo{Name: "chat", NumUsers: 1, Requests: 2, IgnoreEOS: true},
		Users: []User{{Sessions: []Session{se}}}}}}
	var res *Result
	var bodies []map[string]any
	synctest.Test(t, func(t *testing.T) {
		fake := &fakeServer{t: t, scripts: scripts}
		hc, stop := serveInPipe(fake)
		defer stop()
		var err error
		res, err = Run(context.Background(), w, Options{URL: "http://fake/", Model: "m", Tokenizer: tok, HTTPClient: hc})
		if err != nil {
			t.Fatal(err)
		}
		bodies = fake.bodies
	})
	recs := res.Phases[0].Records
	t1, t2 := scripts["turn one"], scripts["turn two"]
	lat1 := t1.ttft + sum(t1.gaps) + t1.usageDelay
	lat2 := t2.ttft + sum(t2.gaps) + t2.usageDelay
	want := []Record{
		{Kind: "agent", Endpoint: Chat, PromptLen: 11, MaxTokens: 2, Success: true, TTFT: t1.ttft.Seconds(),
			ITL: secs(t1.gaps...), Latency: lat1.Seconds(), OutputTokens: 2, ServerPrompt: 7, GeneratedText: "Hello"},
		{Kind: "agent", Endpoint: Chat, Step: 1, PromptLen: 13, HistoryLen: 11 + 2, MaxTokens: 1, Success: true,
			Start: lat1.Seconds(), TTFT: t2.ttft.Seconds(), ITL: secs(t2.gaps...), Latency: lat2.Seconds(),
			OutputTokens: 1, ServerPrompt: 7, GeneratedText: "ok"},
	}
	for i := range want {
		if !recordEqual(recs[i], want[i]) {
			t.Errorf("turn %d:\n got %+v\nwant %+v", i+1, recs[i], want[i])
		}
	}
	if res.Phases[0].Duration != (lat1 + lat2).Seconds() {
		t.Errorf("duration %v, want %v", res.Phases[0].Duration, (lat1 + lat2).Seconds())
	}
	last := bodies[len(bodies)-1]
	msgs := last["messages"].([]any)
	if len(msgs) != 3 || msgs[1].(map[string]any)["role"] != "assistant" || msgs[1].(map[string]any)["content"] != "Hello" {
		t.Errorf("second turn's messages %v: want turn one, the reply \"Hello\", turn two", msgs)
	}
	if last["max_completion_tokens"] != 1.0 || last["ignore_eos"] != true {
		t.Errorf("chat payload %v: want max_completion_tokens 1 and ignore_eos", last)
	}
}

func recordEqual(a, b Record) bool {
	fa, fb := append([]float64{a.Start, a.TTFT, a.Latency}, a.ITL...), append([]float64{b.Start, b.TTFT, b.Latency}, b.ITL...)
	a.Start, a.TTFT, a.Latency, a.ITL = 0, 0, 0, nil
	b.Start, b.TTFT, b.Latency, b.ITL = 0, 0, 0, nil
	return reflect.DeepEqual(a, b) && len(fa) == len(fb) && slices.EqualFunc(fa, fb, near)
}

func mean(x []float64) float64 {
	s := 0.0
	for _, v := range x {
		s += v
	}
	return s / float64(len(x))
}

// numpyPercentile is numpy.percentile's linear method, written out
// independently of percentile.
func numpyPercentile(x []float64, p float64) float64 {
	s := sortedCopy(x)
	rank := p / 100 * float64(len(s)-1)
	i := int(rank)
	if i+1 >= len(s) {
		return s[len(s)-1]
	}
	return s[i]*(1-(rank-float64(i))) + s[i+1]*(rank-float64(i))
}

func TestPercentileMatchesNumpy(t *testing.T) {
	// numpy.percentile([1, 2, 3, 4], [0, 25, 50, 90, 99, 100]) =
	// [1, 1.75, 2.5, 3.7, 3.97, 4].
	x := []float64{4, 1, 3, 2}
	for p, want := range map[float64]float64{0: 1, 25: 1.75, 50: 2.5, 90: 3.7, 99: 3.97, 100: 4} {
		if got := percentile(sortedCopy(x), p); !near(got, want) {
			t.Errorf("percentile %v = %v, want %v", p, got, want)
		}
	}
	if got := summarize(nil); got != (Summary{}) {
		t.Errorf("summary of nothing %+v, want zeros (vLLM's np.mean(x or 0))", got)
	}
}

func TestSecondPeaksAndInFlight(t *testing.T) {
	// Two requests over two seconds: tokens at 0.5, 1.2, 1.4 (first) and
	// 1.1, 2.9 (second); the second runs from 1.0 to 2.9.
	recs := []Record{
		{Success: true, Start: 0, TTFT: 0.5, ITL: []float64{0.7, 0.2}, Latency: 1.4},
		{Success: true, Start: 1.0, TTFT: 0.1, ITL: []float64{1.8}, Latency: 1.9},
		{Success: false, Start: 3.5, Latency: 0.5},
		{Success: false, Start: 1.2, Latency: 0}, // refused at once: holds nothing
	}
	tok, conc := secondPeaks(recs[:2])
	if tok != 3 || conc != 2 {
		t.Errorf("secondPeaks = %v, %v; want 3 tokens in second 1, 2 requests", tok, conc)
	}
	if p := peakInFlight(recs); p != 2 {
		t.Errorf("peakInFlight = %d, want 2", p)
	}
	back := []Record{{Start: 0, Latency: 1}, {Start: 1, Latency: 1}, {Start: 2, Latency: 1}}
	if p := peakInFlight(back); p != 1 {
		t.Errorf("back-to-back requests: peak %d, want 1", p)
	}
}
