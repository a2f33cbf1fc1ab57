package serve

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
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

// startTiny serves the tiny model on a loopback port until the test ends.
func startTiny(t *testing.T, c Config) string {
	t.Helper()
	c.Model, c.Host, c.Port, c.Device = tiny(t), "127.0.0.1", 0, "cpu"
	if c.MaxModelLen == 0 {
		c.MaxModelLen = 512
	}
	c.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	ready := make(chan string, 1)
	c.Ready = func(addr string) { ready <- addr }
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Run(ctx, c) }()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	select {
	case addr := <-ready:
		return addr
	case err := <-done:
		t.Fatal(err)
	case <-time.After(60 * time.Second):
		t.Fatal("not ready after 60 s")
	}
	return ""
}

func post(t *testing.T, url, body string) (int, []byte) {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Error(err)
		return 0, nil
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// TestDeterminismUnderLoad: a greedy request with prompt_logprobs and
// logprobs gets byte-identical choices alone and when sent eight times at
// once among other concurrent requests (sampled, streamed, longer), over
// real HTTP: the engine's batch invariance, end to end.
func TestDeterminismUnderLoad(t *testing.T) {
	addr := startTiny(t, Config{MaxNumBatchedTokens: 48})
	url := "http://" + addr + "/v1/completions"
	probe := `{"prompt":"The quick brown fox jumps over the lazy dog","max_tokens":8,"temperature":0,"prompt_logprobs":5,"logprobs":3}`
	choices := func(b []byte) string {
		var r struct {
			Choices json.RawMessage `json:"choices"`
		}
		if err := json.Unmarshal(b, &r); err != nil {
			t.Errorf("bad response %s: %v", b, err)
		}
		return string(r.Choices)
	}
	status, alone := post(t, url, probe)
	if status != 200 {
		t.Fatalf("status %d: %s", status, alone)
	}
	want := choices(alone)
	others := []string{
		`{"prompt":"Once upon a time","max_tokens":24,"temperature":1,"seed":7}`,
		`{"prompt":"def main():\n    print(","max_tokens":16,"stream":true}`,
		`{"prompt":"你好，世界","max_tokens":12,"temperature":0.7,"top_p":0.9}`,
		`{"prompt":"A much longer prompt that takes several prefill chunks to get through, because the step budget is small in this test, and it keeps going for a while yet.","max_tokens":10}`,
	}
	var wg sync.WaitGroup
	got := make([]string, 8)
	for i := range 8 {
		wg.Go(func() {
			_, b := post(t, url, probe)
			got[i] = choices(b)
		})
		wg.Go(func() {
			if s, b := post(t, url, others[i%len(others)]); s != 200 {
				t.Errorf("concurrent request: status %d: %s", s, b)
			}
		})
	}
	wg.Wait()
	for i, g := range got {
		if g != want {
			t.Errorf("copy %d under load differs from the request alone:\n%s\nwant\n%s", i, g, want)
		}
	}
}

// TestCancelMidStream: a client that goes away in the middle of a stream
// frees its sequence and KV blocks (the engine's gauges return to zero), and
// the server keeps answering.
func TestCancelMidStream(t *testing.T) {
	addr := startTiny(t, Config{})
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "POST", "http://"+addr+"/v1/completions",
		strings.NewReader(`{"prompt":"Tell me a long story","max_tokens":400,"stream":true,"ignore_eos":true}`))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 256)
	if _, err := resp.Body.Read(buf); err != nil {
		t.Fatal(err)
	}
	cancel()
	resp.Body.Close()
	gauge := func(name string) string {
		r, err := http.Get("http://" + addr + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer r.Body.Close()
		b, _ := io.ReadAll(r.Body)
		for _, line := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(line, name+"{") {
				return line[strings.LastIndexByte(line, ' ')+1:]
			}
		}
		return "missing"
	}
	deadline := time.Now().Add(20 * time.Second)
	for gauge("vllm:num_requests_running") != "0" || gauge("vllm:kv_cache_usage_perc") != "0" {
		if time.Now().After(deadline) {
			t.Fatalf("20 s after the client left: running %s, KV usage %s", gauge("vllm:num_requests_running"), gauge("vllm:kv_cache_usage_perc"))
		}
		time.Sleep(20 * time.Millisecond)
	}
	if s, b := post(t, "http://"+addr+"/v1/completions", `{"prompt":"Hi","max_tokens":2}`); s != 200 {
		t.Errorf("after a cancelled stream: status %d: %s", s, b)
	}
}

// TestNoMmap: a server that copied its weights (--no-mmap) answers a greedy
// request with prompt_logprobs and logprobs exactly as one that maps them.
func TestNoMmap(t *testing.T) {
	probe := `{"prompt":"The quick brown fox","max_tokens":6,"temperature":0,"prompt_logprobs":5,"logprobs":3}`
	var got [2]string
	for i, noMmap := range []bool{false, true} {
		addr := startTiny(t, Config{NoMmap: noMmap})
		status, b := post(t, "http://"+addr+"/v1/completions", probe)
		var r struct {
			Choices json.RawMessage `json:"choices"`
		}
		if err := json.Unmarshal(b, &r); err != nil || status != 200 {
			t.Fatalf("NoMmap %v: status %d, body %s, err %v", noMmap, status, b, err)
		}
		got[i] = string(r.Choices)
	}
	if got[0] != got[1] {
		t.Errorf("with --no-mmap:\n%s\nwithout:\n%s", got[1], got[0])
	}
}

// TestActivationFlags: the activation and scheduling flags are checked
// before anything is loaded: BF16 prefill needs a GPU, BF16 decode needs
// BF16 prefill, and anything but float32 or bf16, or a scheduling other
// than auto, mixed or prefill-first, is refused by name.
func TestActivationFlags(t *testing.T) {
	for _, c := range []struct{ prefill, decode, scheduling, want string }{
		{"bf16", "", "", "needs a GPU"},
		{"", "bf16", "", "--decode-activations bf16 needs --prefill-activations bf16"},
		{"float32", "bf16", "", "--decode-activations bf16 needs --prefill-activations bf16"},
		{"fp16", "", "", `--prefill-activations "fp16"`},
		{"", "bf8", "", `--decode-activations "bf8"`},
		{"", "", "fcfs", `--scheduling: engine: scheduling "fcfs"`},
	} {
		_, err := engineConfig(Config{PrefillActivations: c.prefill, DecodeActivations: c.decode, Scheduling: c.scheduling}, nil, nil, nil)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("prefill %q, decode %q, scheduling %q: error %v, want one saying %q", c.prefill, c.decode, c.scheduling, err, c.want)
		}
	}
}
