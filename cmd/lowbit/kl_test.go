package main

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestKLOffline runs the README's kl command on a tiny model and its FP8
// quantization: JSON that parses, a histogram and a layers picture, and a
// score estimate.
func TestKLOffline(t *testing.T) {
	dir := t.TempDir()
	ref, cand := filepath.Join(dir, "bf16"), filepath.Join(dir, "fp8")
	if _, err := run(t, "synth", "--arch", "qwen3", "--out", ref, "--quiet"); err != nil {
		t.Fatal(err)
	}
	if _, err := run(t, "quantize", "--model", ref, "--scheme", "fp8-dynamic", "--out", cand, "--quiet"); err != nil {
		t.Fatal(err)
	}
	prompts := filepath.Join(dir, "p.jsonl")
	os.WriteFile(prompts, []byte(`"The quick brown fox jumps over the lazy dog."`+"\n"+`{"prompt": [100, 200, 300, 400]}`+"\n"), 0o644)
	png := filepath.Join(dir, "kl.png")
	out, err := run(t, "kl", "--ref", ref, "--cand", cand, "--prompts", prompts, "--json", "--png", png, "--quiet",
		"--mem-ratio", "1.9", "--speed-ratio", "1.2", "--study", "1,100")
	if err != nil {
		t.Fatal(err)
	}
	var r struct {
		Source    string `json:"source"`
		Positions int    `json:"positions"`
		KL        struct {
			Mean float64 `json:"mean"`
			Lo   float64 `json:"ci95_lo"`
			Hi   float64 `json:"ci95_hi"`
		} `json:"kl"`
		Layers []any `json:"layers"`
		Study  []any `json:"estimator_study"`
		Score  struct {
			Final float64 `json:"final"`
		} `json:"score"`
	}
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("kl --json printed invalid JSON: %v\n%s", err, out)
	}
	if r.Source != "offline" || r.Positions < 5 || !(r.KL.Mean > 0) || !(r.KL.Lo <= r.KL.Mean && r.KL.Mean <= r.KL.Hi) ||
		len(r.Layers) != 2 || len(r.Study) != 3 || !(r.Score.Final > 0) {
		t.Errorf("report %+v", r)
	}
	for _, p := range []string{png, filepath.Join(dir, "kl.layers.png")} {
		if st, err := os.Stat(p); err != nil || st.Size() == 0 {
			t.Errorf("%s: %v", p, err)
		}
	}
	text, err := run(t, "kl", "--ref", ref, "--cand", ref, "--prompts", prompts, "--quiet")
	if err != nil || !strings.Contains(text, "KL, full vocabulary") || !strings.Contains(text, "top-1 agreement 100.00%") {
		t.Errorf("a model against itself: %v\n%s", err, text)
	}
}

func TestKLUsage(t *testing.T) {
	for _, args := range [][]string{
		{"kl"},
		{"kl", "--ref", "a"},
		{"kl", "--ref", "a", "--cand", "b", "--ref-url", "http://x"},
		{"kl", "--ref-url", "http://x"},
		{"kl", "--ref-url", "http://x", "--cand-url", "http://y", "--study", "5"},
		{"kl", "--ref", "a", "--cand", "b", "--mem-ratio", "0"},
		{"kl", "--ref", "a", "--cand", "b", "--temperature", "-1"},
	} {
		_, err := run(t, args...)
		var ue usageError
		if !errors.As(err, &ue) {
			t.Errorf("%v: %v, want a usage error", args, err)
		}
	}
	if _, err := run(t, "kl", "--ref", "a", "--cand", "b", "--prompts", filepath.Join(t.TempDir(), "none.txt")); err == nil {
		t.Error("a missing prompts file was accepted")
	}
}
