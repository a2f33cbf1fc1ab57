package kl

import (
	"bytes"
	"context"
	"encoding/json"
	"image/png"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSummarizeBootstrap checks the summary statistics on known data and
// that the bootstrap interval behaves: it holds the mean, it is narrower
// for more data, and with 10 or more prompts it resamples prompts.
func TestSummarizeBootstrap(t *testing.T) {
	v := []float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	g := make([]int, len(v)) // one prompt
	s, unit := summarize(v, g)
	if s.Mean != 5.5 || s.Max != 10 || s.P50 != 5 || s.P90 != 9 || unit != ByPosition {
		t.Errorf("summary %+v (%s)", s, unit)
	}
	if !(s.Lo < 5.5 && 5.5 < s.Hi) || s.Lo < 1 || s.Hi > 10 {
		t.Errorf("interval [%g, %g] around 5.5", s.Lo, s.Hi)
	}
	rng := rand.New(rand.NewPCG(1, 1))
	width := func(n int) (float64, string) {
		v, g := make([]float64, n), make([]int, n)
		for i := range v {
			v[i], g[i] = rng.ExpFloat64(), i%50
		}
		s, unit := summarize(v, g)
		return s.Hi - s.Lo, unit
	}
	w1, u1 := width(200)
	w2, u2 := width(20000)
	// The standard error shrinks as 1/√n: 10 times narrower for 100 times
	// the data, give or take the bootstrap's own noise.
	if u1 != ByPrompt || u2 != ByPrompt || !(w2 < w1/5) {
		t.Errorf("interval widths %g (n=200, %s) and %g (n=20000, %s)", w1, u1, w2, u2)
	}
	// Correlated prompts: every position of a prompt has the prompt's
	// value, so the prompt bootstrap is wider than a position one would be.
	v, g = nil, nil
	for p := range 20 {
		x := rng.ExpFloat64()
		for range 50 {
			v, g = append(v, x), append(g, p)
		}
	}
	sp, _ := summarize(v, g)
	single := make([]int, len(v))
	for i := range single {
		single[i] = i // every position its own prompt
	}
	sq, _ := summarize(v, single)
	if !(sp.Hi-sp.Lo > 3*(sq.Hi-sq.Lo)) {
		t.Errorf("prompt bootstrap [%g, %g] not wider than the position one [%g, %g]", sp.Lo, sp.Hi, sq.Lo, sq.Hi)
	}
}

// TestReportOffline summarizes a real offline run and writes every output:
// text, JSON that parses back, and PNGs that decode.
func TestReportOffline(t *testing.T) {
	ref, cand := load(t, "bf16"), load(t, "fp8-dynamic")
	res, err := Offline(context.Background(), ref, cand, testPrompts(t, 3, 16), OfflineOptions{StudyK: []int{1, 5}})
	if err != nil {
		t.Fatal(err)
	}
	r, err := Summarize(res, ReportOptions{Ref: "bf16", Cand: "fp8", Worst: 4, Decode: func(ids []int) string { return "t" + strings.Repeat("x", len(ids)) }})
	if err != nil {
		t.Fatal(err)
	}
	if r.KL == nil || r.Primary != MetricKL || len(r.Worst) != 4 || len(r.Layers) != 2 || len(r.Study) != 3 {
		t.Fatalf("report: KL %v, primary %s, %d worst, %d layers, %d study rows", r.KL, r.Primary, len(r.Worst), len(r.Layers), len(r.Study))
	}
	var sum float64
	for _, p := range res.Positions {
		sum += p.KL
	}
	if math.Abs(r.KL.Mean-sum/float64(len(res.Positions))) > 1e-12 {
		t.Errorf("mean %g, want %g", r.KL.Mean, sum/float64(len(res.Positions)))
	}
	for i := 1; i < len(r.Worst); i++ {
		if *r.Worst[i].KL > *r.Worst[i-1].KL {
			t.Errorf("worst positions out of order")
		}
	}
	if *r.Worst[0].KL != r.KL.Max || r.Worst[0].Text != "tx" {
		t.Errorf("worst %+v, max %g", r.Worst[0], r.KL.Max)
	}
	var text bytes.Buffer
	if err := r.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"KL, full vocabulary", "union+tail, k=20", "lower bound", "worst positions by kl", "hidden-state error", "| 5 |"} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("text report lacks %q:\n%s", want, text.String())
		}
	}
	var js bytes.Buffer
	if err := r.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	var back map[string]any
	if err := json.Unmarshal(js.Bytes(), &back); err != nil {
		t.Fatalf("JSON does not parse: %v", err)
	}
	if back["kl"].(map[string]any)["mean"].(float64) != r.KL.Mean || back["source"] != "offline" {
		t.Errorf("JSON kl %v", back["kl"])
	}
	dir := t.TempDir()
	for name, write := range map[string]func(string) error{"hist.png": r.WriteHistogramPNG, "layers.png": r.WriteLayersPNG} {
		path := filepath.Join(dir, name)
		if err := write(path); err != nil {
			t.Fatal(err)
		}
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		img, err := png.Decode(f)
		f.Close()
		if err != nil || img.Bounds().Dx() < 100 {
			t.Errorf("%s: %v", name, err)
		}
	}
	// Online results have no exact KL to rank by.
	res.Online = true
	for i := range res.Positions {
		res.Positions[i].KL = math.NaN()
	}
	if _, err := Summarize(res, ReportOptions{Primary: MetricKL}); err == nil {
		t.Error("ranking an online result by the exact KL was accepted")
	}
	r, err = Summarize(res, ReportOptions{})
	if err != nil || r.KL != nil || r.Primary != MetricUnion || r.Source != "online" {
		t.Fatalf("online report: %v %+v", err, r)
	}
	js.Reset()
	if err := r.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	if err := r.WriteHistogramPNG(filepath.Join(dir, "online.png")); err != nil {
		t.Fatal(err)
	}
	if _, err := Summarize(&Result{}, ReportOptions{}); err == nil {
		t.Error("an empty result was summarized")
	}
}
