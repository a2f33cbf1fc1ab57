package main

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lowbit-ai/lowbit/calibrate/stats"
)

// TestCalibrateQuantizeGenerate runs the documented flow on the tiny model:
// calibrate with Hessians, quantize with GPTQ and static NVFP4 scales and
// an FP8 KV cache from the statistics, and generate from the result.
func TestCalibrateQuantizeGenerate(t *testing.T) {
	dir := t.TempDir()
	model, st, q := filepath.Join(dir, "tiny"), filepath.Join(dir, "stats.safetensors"), filepath.Join(dir, "q")
	if _, err := run(t, "synth", "--arch", "qwen3", "--out", model, "--quiet"); err != nil {
		t.Fatal(err)
	}
	if _, err := run(t, "calibrate", "--model", model, "--out", st, "--samples", "4", "--seq-len", "32", "--hessian", "--quiet"); err != nil {
		t.Fatal(err)
	}
	s, err := stats.Open(st)
	if err != nil {
		t.Fatal(err)
	}
	if m := s.Meta(); m.Samples != 4 || m.SeqLen != 32 || m.Dataset != "builtin" || !s.HasHessian("model.layers.1.mlp.down_proj") {
		t.Errorf("statistics: %+v", m)
	}
	s.Close()
	if _, err := os.Stat(st + ".partial"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("work directory left behind: %v", err)
	}
	if _, err := run(t, "quantize", "--model", model, "--scheme", "nvfp4", "--calib", st, "--method", "gptq", "--kv-cache-dtype", "fp8", "--out", q, "--quiet"); err != nil {
		t.Fatal(err)
	}
	out, err := run(t, "generate", "--model", q, "--prompt", "Hello", "--max-tokens", "3", "--backend", "ref")
	if err != nil || out == "" {
		t.Fatalf("generate: %q, %v", out, err)
	}
}

func TestCalibrateErrors(t *testing.T) {
	dir := t.TempDir()
	model := filepath.Join(dir, "tiny")
	if _, err := run(t, "synth", "--arch", "qwen3", "--out", model, "--quiet"); err != nil {
		t.Fatal(err)
	}
	exists := filepath.Join(dir, "exists")
	os.WriteFile(exists, nil, 0o644)
	bad := filepath.Join(dir, "bad.jsonl")
	os.WriteFile(bad, []byte(`{"messages": []}`+"\n"), 0o644)
	for _, c := range []struct {
		args  []string
		want  string
		usage bool
	}{
		{[]string{"calibrate", "--model", filepath.Join(dir, "none"), "--out", filepath.Join(dir, "a")}, "tokenizer", false},
		{[]string{"calibrate", "--model", model, "--out", exists, "--samples", "1", "--quiet"}, "already exists", false},
		{[]string{"calibrate", "--model", model, "--out", filepath.Join(dir, "b"), "--data", bad}, `no "text" field: render its "messages"`, false},
		{[]string{"calibrate", "--model", model, "--out", filepath.Join(dir, "c"), "--samples", "0"}, "at least 1", true},
		{[]string{"calibrate", "--model", model, "--out", filepath.Join(dir, "d"), "--hessian-memory", "lots"}, "--hessian-memory", true},
		{[]string{"quantize", "--model", model, "--scheme", "nvfp4a16", "--method", "awq", "--out", filepath.Join(dir, "e")}, "choose rtn, mse or gptq", true},
		{[]string{"quantize", "--model", model, "--scheme", "nvfp4a16", "--method", "gptq", "--out", filepath.Join(dir, "f")}, "calibrate --hessian", false},
	} {
		_, err := run(t, c.args...)
		var ue usageError
		if err == nil || !strings.Contains(err.Error(), c.want) || errors.As(err, &ue) != c.usage {
			t.Errorf("%v: %v (usage error: %v), want an error containing %q (usage error: %v)", c.args, err, errors.As(err, &ue), c.want, c.usage)
		}
	}
}
