package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"image/png"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lowbit-ai/lowbit/checkpoint"
	"github.com/lowbit-ai/lowbit/synth"
)

// benchTarget runs `lowbit serve` on the tiny Qwen3 in-process, on a free
// port, and returns its URL once /health answers.
func benchTarget(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "tiny")
	if _, err := synth.Write(dir, synth.Options{Arch: checkpoint.Qwen3, Size: synth.Tiny, Seed: 1}); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	ctx, cancel := context.WithCancel(context.Background())
	root := newRootCmd()
	root.SetArgs([]string{"serve", dir, "--host", "127.0.0.1", "--port", fmt.Sprint(port), "--device", "cpu",
		"--max-model-len", "512", "--kv-cache-memory-bytes", fmt.Sprint(16 << 20), "--served-model-name", "tiny"})
	root.SetErr(io.Discard)
	done := make(chan error, 1)
	go func() { done <- root.ExecuteContext(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("lowbit serve: %v", err)
		}
	})
	url := fmt.Sprintf("http://127.0.0.1:%d", port)
	deadline := time.Now().Add(time.Minute)
	for {
		select {
		case err := <-done:
			t.Fatalf("lowbit serve stopped: %v", err)
		default:
		}
		if resp, err := http.Get(url + "/health"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return url
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("lowbit serve did not answer /health within a minute")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

type side struct {
	Completed    int `json:"completed"`
	Failed       int `json:"failed"`
	OutputTokens int `json:"output_tokens"`
}

// TestBenchAndCompare runs lowbit bench twice against lowbit serve on the
// tiny model, then lowbit bench compare on the two results.
func TestBenchAndCompare(t *testing.T) {
	url := benchTarget(t)
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.json"), filepath.Join(dir, "b.json")
	for _, out := range []string{a, b} {
		stdout, err := run(t, "bench", "--url", url, "--workload", "random", "--num-prompts", "4", "--random-input-len", "24",
			"--random-output-len", "3", "--max-concurrency", "2", "--request-rate", "100", "--ignore-eos", "--quiet", "--out", out)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(stdout, "Successful requests:") || !strings.Contains(stdout, "P99 TTFT (ms):") {
			t.Errorf("report:\n%s", stdout)
		}
	}
	stdout, err := run(t, "bench", "compare", a, b, "--json", "--plot-dir", dir)
	if err != nil {
		t.Fatal(err)
	}
	var c struct {
		Phases []struct {
			Name      string  `json:"name"`
			Base      side    `json:"baseline"`
			Cand      side    `json:"candidate"`
			MaxConc   int     `json:"max_concurrency"`
			Rate      float64 `json:"request_rate"`
			IgnoreEOS bool    `json:"ignore_eos"`
		} `json:"phases"`
		Switchboard struct{ Score float64 } `json:"switchboard"`
	}
	if err := json.Unmarshal([]byte(stdout), &c); err != nil {
		t.Fatalf("compare --json printed %q: %v", stdout, err)
	}
	p := c.Phases[0]
	if len(c.Phases) != 1 || p.Name != "random" || p.Base.Completed != 4 || p.Cand.Failed != 0 || p.Base.OutputTokens != 12 ||
		p.MaxConc != 2 || p.Rate != 100 || !p.IgnoreEOS || c.Switchboard.Score <= 0 {
		t.Errorf("comparison %+v", c)
	}
	for _, name := range []string{"throughput.png", "ttft_cdf.png"} {
		f, err := os.Open(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := png.Decode(f); err != nil {
			t.Errorf("%s: %v", name, err)
		}
		f.Close()
	}
	// Multi-turn agent sessions through /v1/chat/completions.
	sb := filepath.Join(dir, "agent.json")
	if _, err := run(t, "bench", "--url", url, "--workload", "switchboard-agent", "--scale", "0.01", "--levels", "2", "--quiet", "--out", sb); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(sb)
	if err != nil {
		t.Fatal(err)
	}
	var res struct {
		Phases []struct {
			Name    string `json:"name"`
			Records []struct {
				Success    bool   `json:"success"`
				Error      string `json:"error"`
				Endpoint   string `json:"endpoint"`
				HistoryLen int    `json:"history_len"`
			} `json:"records"`
		} `json:"phases"`
	}
	if err := json.Unmarshal(data, &res); err != nil {
		t.Fatal(err)
	}
	// Two users with one session each (two per user, scaled by 0.01, at
	// least one) of two turns (the fewest a session keeps).
	if len(res.Phases) != 1 || res.Phases[0].Name != "agent@2" || len(res.Phases[0].Records) != 4 {
		t.Fatalf("agent results: %s", data)
	}
	for i, r := range res.Phases[0].Records {
		if !r.Success || r.Endpoint != "chat" || (i%2 == 1) != (r.HistoryLen > 0) {
			t.Errorf("agent request %d: %+v", i, r)
		}
	}
	if _, err := run(t, "bench", "compare", a, filepath.Join(dir, "missing.json")); err == nil {
		t.Error("compare with a missing file succeeded")
	}
}

func TestBenchUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{"bench", "--url", "http://127.0.0.1:1", "--workload", "lowbarena", "--max-concurrency", "4"},
		{"bench", "--url", "http://127.0.0.1:1", "--workload", "random", "--request-rate", "0"},
		{"bench", "--url", "http://127.0.0.1:1", "--workload", "random", "--backend", "grpc"},
		{"bench", "--url", "http://127.0.0.1:1", "--workload", "nope"},
		{"bench", "--url", "http://127.0.0.1:1", "--workload", "switchboard", "--levels", "1,x"},
		{"bench", "--url", "http://127.0.0.1:1", "--workload", "random", "--scale", "-1"},
		{"bench", "--workload", "random"},
		{"bench", "compare", "only-one.json"},
	} {
		_, err := run(t, args...)
		var ue usageError
		if !errors.As(err, &ue) {
			t.Errorf("lowbit %s: %v; want a usage error", strings.Join(args, " "), err)
		}
	}
}
