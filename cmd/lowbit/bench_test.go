package main

import (
	"encoding/json"
	"errors"
	"image/png"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lowbit-ai/lowbit/checkpoint"
	"github.com/lowbit-ai/lowbit/kernels"
	"github.com/lowbit-ai/lowbit/kernels/cpu"
	"github.com/lowbit-ai/lowbit/kernels/ref"
	"github.com/lowbit-ai/lowbit/runtime"
	"github.com/lowbit-ai/lowbit/runtime/engine"
	"github.com/lowbit-ai/lowbit/runtime/server"
	"github.com/lowbit-ai/lowbit/synth"
)

// benchTarget serves the tiny Qwen3 in-process, as lowbit serve would.
func benchTarget(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "tiny")
	if _, err := synth.Write(dir, synth.Options{Arch: checkpoint.Qwen3, Size: synth.Tiny, Seed: 1}); err != nil {
		t.Fatal(err)
	}
	var ops kernels.Ops = ref.Ops{}
	if c, err := cpu.New(); err == nil {
		ops = c
		t.Cleanup(c.Close)
	}
	m, err := runtime.Load(dir, ops)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	eng, err := engine.New(m, engine.Config{MaxModelLen: 512, KVCacheBytes: 16 << 20})
	if err != nil {
		t.Fatal(err)
	}
	opts, err := server.OptionsFromModelDir(dir, "", "auto")
	if err != nil {
		t.Fatal(err)
	}
	opts.Engine, opts.MaxModelLen = eng, 512
	srv, err := server.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	t.Cleanup(func() { hs.Close(); srv.Close(); eng.Close() })
	return hs.URL
}

type side struct {
	Completed    int `json:"completed"`
	Failed       int `json:"failed"`
	OutputTokens int `json:"output_tokens"`
}

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
