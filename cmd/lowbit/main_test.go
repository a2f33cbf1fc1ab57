package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// run executes lowbit in-process with args and returns what it printed to
// stdout.
func run(t *testing.T, args ...string) (string, error) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout := os.Stdout
	os.Stdout = w
	defer func() { os.Stdout = stdout }()
	done := make(chan []byte)
	go func() {
		b, _ := io.ReadAll(r)
		done <- b
	}()
	root := newRootCmd()
	root.SetArgs(args)
	root.SetErr(io.Discard)
	err = root.Execute()
	w.Close()
	return string(<-done), err
}

// The README's first command: synth a tiny model, then inspect it.
func TestSynthThenInspect(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "tiny")
	if _, err := run(t, "synth", "--arch", "qwen3", "--out", dir, "--quiet"); err != nil {
		t.Fatal(err)
	}
	out, err := run(t, "inspect", "--json", "--tensors", dir)
	if err != nil {
		t.Fatal(err)
	}
	var s struct {
		Config struct {
			Arch   string `json:"arch"`
			Layers int    `json:"layers"`
		} `json:"config"`
		Tensors    int `json:"tensors"`
		TensorList []struct {
			Name string `json:"name"`
		} `json:"tensor_list"`
	}
	if err := json.Unmarshal([]byte(out), &s); err != nil {
		t.Fatalf("inspect --json printed invalid JSON: %v\n%s", err, out)
	}
	if s.Config.Arch != "qwen3" || s.Config.Layers != 2 || s.Tensors != len(s.TensorList) || s.Tensors == 0 {
		t.Errorf("inspect --json = %+v", s)
	}
	text, err := run(t, "inspect", dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"architecture   qwen3 (Qwen3ForCausalLM)", "quantization   none", "BF16"} {
		if !strings.Contains(text, want) {
			t.Errorf("inspect output lacks %q:\n%s", want, text)
		}
	}
}

func TestUsageErrors(t *testing.T) {
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"inspect without path", []string{"inspect"}, "accepts 1 arg"},
		{"unknown arch", []string{"synth", "--arch", "gpt2", "--out", "x"}, "unknown model architecture"},
		{"bad shard size", []string{"synth", "--arch", "qwen3", "--out", "x", "--max-shard-size", "lots"}, "not a positive size"},
		{"unknown flag", []string{"inspect", "--frobnicate", "x"}, "unknown flag"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := run(t, c.args...)
			var ue usageError
			if err == nil || !errors.As(err, &ue) || !strings.Contains(err.Error(), c.want) {
				t.Errorf("lowbit %v = %v, want a usage error containing %q", c.args, err, c.want)
			}
		})
	}
}

func TestInspectCorruptFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "bad.safetensors")
	if err := os.WriteFile(path, bytes.Repeat([]byte{0xff}, 16), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := run(t, "inspect", path)
	if err == nil || !strings.Contains(err.Error(), "bad.safetensors") {
		t.Errorf("inspect of a corrupt file = %v, want an error naming the file", err)
	}
}

func TestParseBytes(t *testing.T) {
	cases := map[string]int64{"5GB": 5e9, "500MB": 5e8, "1GiB": 1 << 30, "1048576": 1 << 20, "2 kb": 2000}
	for in, want := range cases {
		if got, err := parseBytes(in); err != nil || got != want {
			t.Errorf("parseBytes(%q) = %d, %v, want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "-1GB", "GB", "x"} {
		if _, err := parseBytes(in); err == nil {
			t.Errorf("parseBytes(%q) succeeded, want error", in)
		}
	}
}

// The README's quantize step: synth, quantize to NVFP4A16, inspect.
func TestQuantizeCommand(t *testing.T) {
	dir := t.TempDir()
	src, out := filepath.Join(dir, "tiny"), filepath.Join(dir, "tiny-nvfp4")
	if _, err := run(t, "synth", "--arch", "qwen3", "--out", src, "--quiet"); err != nil {
		t.Fatal(err)
	}
	plan, err := run(t, "quantize", "--model", src, "--scheme", "nvfp4a16", "--dry-run")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(plan, "14 modules quantized") || !strings.Contains(plan, "model.layers.0.self_attn.q_proj") {
		t.Errorf("dry run printed:\n%s", plan)
	}
	if _, err := os.Stat(out); err == nil {
		t.Fatalf("--dry-run wrote %s", out)
	}
	if _, err := run(t, "quantize", "--model", src, "--scheme", "nvfp4a16", "--out", out, "--quiet"); err != nil {
		t.Fatal(err)
	}
	text, err := run(t, "inspect", out)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(text, "compressed-tensors, NVFP4A16") {
		t.Errorf("inspect of the quantized model:\n%s", text)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"quantize", "--model", src, "--scheme", "int3", "--out", out + "2"}, "unknown scheme"},
		{[]string{"quantize", "--model", src, "--scheme", "nvfp4", "--out", out + "2"}, "lowbit calibrate"},
		{[]string{"quantize", "--model", out, "--scheme", "fp8-dynamic", "--out", out + "2"}, "already quantized"},
		{[]string{"quantize", "--model", src, "--scheme", "fp8", "--kv-cache-dtype", "int8", "--out", out + "2"}, "choose auto or fp8"},
		{[]string{"quantize", "--model", src, "--scheme", "fp8-dynamic"}, "--out is required"},
	} {
		if _, err := run(t, c.args...); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("lowbit %v = %v, want an error containing %q", c.args, err, c.want)
		}
	}
}

// generate runs end to end on the tiny model, greedily and reproducibly.
func TestGenerateCommand(t *testing.T) {
	src := filepath.Join(t.TempDir(), "tiny")
	if _, err := run(t, "synth", "--arch", "qwen3", "--out", src, "--quiet"); err != nil {
		t.Fatal(err)
	}
	args := []string{"generate", "--model", src, "--prompt", "Hello", "--max-tokens", "6", "--temperature", "0", "--backend", "ref"}
	a, err := run(t, args...)
	if err != nil {
		t.Fatal(err)
	}
	b, err := run(t, args...)
	if err != nil {
		t.Fatal(err)
	}
	if strings.TrimSpace(a) == "" || a != b {
		t.Errorf("greedy generate printed %q, then %q: want the same non-empty text", a, b)
	}
	if c, err := run(t, append(args, "--no-mmap")...); err != nil || c != a {
		t.Errorf("generate --no-mmap printed %q (error %v), want %q as without it", c, err, a)
	}
	if _, err := run(t, "generate", "--model", filepath.Join(src, "absent"), "--prompt", "x", "--backend", "ref"); err == nil || !strings.Contains(err.Error(), "absent") {
		t.Errorf("generate on a missing model = %v, want an error naming it", err)
	}
	if _, err := run(t, "generate", "--model", src, "--prompt", "x", "--backend", "gpu9"); err == nil || !strings.Contains(err.Error(), "--backend") {
		t.Errorf("generate --backend gpu9 = %v, want a usage error", err)
	}
	for _, kv := range []string{"float32", "fp8", "bf16"} {
		if c, err := run(t, append(args, "--kv-cache-dtype", kv)...); err != nil || strings.TrimSpace(c) == "" {
			t.Errorf("generate --kv-cache-dtype %s printed %q, error %v", kv, c, err)
		} else if kv == "bf16" && c != a {
			t.Errorf("generate --kv-cache-dtype bf16 printed %q, want %q as the default (auto)", c, a)
		}
	}
	if _, err := run(t, "generate", "--model", src, "--prompt", "x", "--backend", "ref", "--kv-cache-dtype", "int4"); err == nil || !strings.Contains(err.Error(), "int4") {
		t.Errorf("generate --kv-cache-dtype int4 = %v, want an error naming it", err)
	}
}
