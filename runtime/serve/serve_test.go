package serve

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lowbit-ai/lowbit/checkpoint"
	"github.com/lowbit-ai/lowbit/kernels"
	"github.com/lowbit-ai/lowbit/synth"
)

func tiny(t *testing.T) string {
	t.Helper()
	if err := kernels.Available(); err != nil {
		t.Skip(err)
	}
	dir := filepath.Join(t.TempDir(), "tiny")
	if _, err := synth.Write(dir, synth.Options{Arch: checkpoint.Qwen3, Size: synth.Tiny, Seed: 1}); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestRun serves the tiny model on a loopback port, answers a completion
// with prompt_logprobs over real HTTP, and returns cleanly when its context
// ends.
func TestRun(t *testing.T) {
	dir := tiny(t)
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, Config{Model: dir, Host: "127.0.0.1", Port: 0, Device: "cpu", MaxModelLen: 256,
			ServedModelNames: []string{"tiny"}, Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
			Ready: func(addr string) { ready <- addr }})
	}()
	var addr string
	select {
	case addr = <-ready:
	case err := <-done:
		t.Fatal(err)
	case <-time.After(60 * time.Second):
		t.Fatal("not ready after 60 s")
	}
	resp, err := http.Post("http://"+addr+"/v1/completions", "application/json",
		strings.NewReader(`{"model":"tiny","prompt":"Hello there","max_tokens":4,"temperature":0,"prompt_logprobs":1}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var r struct {
		Choices []struct {
			Text           string `json:"text"`
			FinishReason   string `json:"finish_reason"`
			PromptLogprobs []any  `json:"prompt_logprobs"`
		} `json:"choices"`
		Usage struct {
			CompletionTokens int `json:"completion_tokens"`
		} `json:"usage"`
	}
	if err := json.Unmarshal(body, &r); err != nil || resp.StatusCode != 200 {
		t.Fatalf("status %d, body %s, err %v", resp.StatusCode, body, err)
	}
	if len(r.Choices) != 1 || r.Usage.CompletionTokens != 4 || r.Choices[0].FinishReason != "length" ||
		len(r.Choices[0].PromptLogprobs) != 2 || r.Choices[0].PromptLogprobs[0] != nil {
		t.Errorf("unexpected response %s", body)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run after cancel: %v", err)
		}
	case <-time.After(40 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
}

// TestStartErrors: bad settings are refused with messages naming the flag.
func TestStartErrors(t *testing.T) {
	dir := tiny(t)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, tt := range []struct {
		c    Config
		want string
	}{
		{Config{Model: dir, Device: "tpu"}, "--device"},
		{Config{Model: dir, Device: "cpu", KVCacheDType: "int4"}, "--kv-cache-dtype"},
		{Config{Model: dir, Device: "cpu", GPUMemoryUtilization: 1.5}, "--gpu-memory-utilization"},
		{Config{Model: dir, Device: "cpu", GenerationConfig: "/nonexistent"}, "--generation-config"},
		{Config{Model: dir, Device: "cpu", KVCacheMemoryBytes: 1 << 10}, "max_model_len"},
		{Config{Model: filepath.Join(dir, "missing"), Device: "cpu"}, "missing"},
	} {
		st, err := Start(tt.c, log)
		if err == nil {
			st.Close()
			t.Errorf("Start(%+v): no error, want one mentioning %q", tt.c, tt.want)
		} else if !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Start(%+v) = %v, want it to mention %q", tt.c, err, tt.want)
		}
	}
}
