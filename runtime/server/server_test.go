package server

import (
	"errors"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/lowbit-ai/lowbit/runtime/engine"
)

func get(t *testing.T, url string) (int, http.Header, []byte) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, data
}

func TestNewRejectsIncompleteOptions(t *testing.T) {
	tok := qwen3(t)
	fe := &fakeEngine{}
	tests := []struct {
		name string
		opts Options
	}{
		{"no engine", Options{Tokenizer: tok, MaxModelLen: 8, ServedModelNames: []string{"m"}}},
		{"no tokenizer", Options{Engine: fe, MaxModelLen: 8, ServedModelNames: []string{"m"}}},
		{"no length", Options{Engine: fe, Tokenizer: tok, ServedModelNames: []string{"m"}}},
		{"no name", Options{Engine: fe, Tokenizer: tok, MaxModelLen: 8}},
		{"empty name", Options{Engine: fe, Tokenizer: tok, MaxModelLen: 8, ServedModelNames: []string{""}}},
	}
	for _, tt := range tests {
		if _, err := New(tt.opts); err == nil {
			t.Errorf("%s: New succeeded", tt.name)
		}
	}
}

func TestHealth(t *testing.T) {
	fe := &fakeEngine{}
	ts, s := newTestServer(t, fe, nil)
	status, h, body := get(t, ts.URL+"/health")
	if status != 200 || len(body) != 0 || h.Get("Content-Length") != "0" {
		t.Fatalf("healthy: status %d body %q", status, body)
	}
	fe.mu.Lock()
	fe.health = errors.New("dead")
	fe.mu.Unlock()
	if status, _, _ := get(t, ts.URL+"/health"); status != 503 {
		t.Errorf("engine unhealthy: status %d, want 503", status)
	}
	fe.mu.Lock()
	fe.health = nil
	fe.mu.Unlock()
	s.Close()
	if status, _, _ := get(t, ts.URL+"/health"); status != 503 {
		t.Errorf("closed: status %d, want 503", status)
	}
}

func TestHealthAfterEngineClosed(t *testing.T) {
	fe := &fakeEngine{submitErr: engine.ErrClosed}
	ts, _ := newTestServer(t, fe, nil)
	m := postJSON(t, ts.URL+"/v1/completions", `{"prompt":"hi"}`, 503)
	if m["error"].(map[string]any)["code"] != 503.0 {
		t.Errorf("error %v", m)
	}
	if status, _, _ := get(t, ts.URL+"/health"); status != 503 {
		t.Errorf("after ErrClosed: /health %d, want 503", status)
	}
}

func TestModels(t *testing.T) {
	ts, _ := newTestServer(t, &fakeEngine{}, nil)
	status, h, body := get(t, ts.URL+"/v1/models")
	if status != 200 || h.Get("Content-Type") != "application/json" {
		t.Fatalf("status %d, content type %q", status, h.Get("Content-Type"))
	}
	if got := keysOf(t, body); !slices.Equal(got, []string{"object", "data"}) {
		t.Errorf("keys %v", got)
	}
	card := rawField(t, body, "data", 0)
	want := []string{"id", "object", "created", "owned_by", "root", "parent", "max_model_len", "permission"}
	if got := keysOf(t, card); !slices.Equal(got, want) {
		t.Errorf("card keys %v, want %v", got, want)
	}
	perm := rawField(t, card, "permission", 0)
	wantPerm := []string{"id", "object", "created", "allow_create_engine", "allow_sampling", "allow_logprobs",
		"allow_search_indices", "allow_view", "allow_fine_tuning", "organization", "group", "is_blocking"}
	if got := keysOf(t, perm); !slices.Equal(got, wantPerm) {
		t.Errorf("permission keys %v", got)
	}
	for _, c := range []struct {
		path []any
		want string
	}{
		{[]any{"object"}, `"list"`},
		{[]any{"data", 0, "id"}, `"qwen3-test"`},
		{[]any{"data", 1, "id"}, `"alias"`},
		{[]any{"data", 0, "object"}, `"model"`},
		{[]any{"data", 0, "owned_by"}, `"vllm"`},
		{[]any{"data", 0, "root"}, `"/models/qwen3"`},
		{[]any{"data", 0, "parent"}, `null`},
		{[]any{"data", 0, "max_model_len"}, `256`},
		{[]any{"data", 0, "permission", 0, "object"}, `"model_permission"`},
	} {
		if got := string(rawField(t, body, c.path...)); got != c.want {
			t.Errorf("%v = %s, want %s", c.path, got, c.want)
		}
	}
}

func TestVersionAndRouting(t *testing.T) {
	ts, _ := newTestServer(t, &fakeEngine{}, nil)
	if status, _, body := get(t, ts.URL+"/version"); status != 200 || string(body) != `{"version":"0.0.0-test"}` {
		t.Errorf("/version: %d %s", status, body)
	}
	if status, _, body := get(t, ts.URL+"/nope"); status != 404 || string(body) != `{"detail":"Not Found"}` {
		t.Errorf("unknown path: %d %s", status, body)
	}
	if status, _, body := get(t, ts.URL+"/v1/completions"); status != 405 || string(body) != `{"detail":"Method Not Allowed"}` {
		t.Errorf("GET completions: %d %s", status, body)
	}
}

func TestTokenize(t *testing.T) {
	ts, _ := newTestServer(t, &fakeEngine{}, nil)
	tok := qwen3(t)
	ids := tok.Encode("Hello world")
	tests := []struct {
		name, body string
		want       []int
		strs       bool
	}{
		{"prompt", `{"prompt":"Hello world"}`, ids, false},
		{"prompt with strs", `{"model":"qwen3-test","prompt":"Hello world","return_token_strs":true}`, ids, true},
		{"special tokens parsed", `{"prompt":"<|im_start|>x"}`, tok.Encode("<|im_start|>x"), false},
		{"chat", `{"messages":[{"role":"user","content":"Hi"}]}`,
			tok.Encode("<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"), false},
		{"chat no generation prompt", `{"messages":[{"role":"user","content":"Hi"}],"add_generation_prompt":false}`,
			tok.Encode("<|im_start|>user\nHi<|im_end|>\n"), false},
	}
	for _, tt := range tests {
		status, body := post(t, ts.URL+"/tokenize", tt.body)
		if status != 200 {
			t.Fatalf("%s: status %d %s", tt.name, status, body)
		}
		if got := keysOf(t, body); !slices.Equal(got, []string{"count", "max_model_len", "tokens", "token_strs"}) {
			t.Errorf("%s: keys %v", tt.name, got)
		}
		m := decodeMap(t, body)
		if got := toInts(m["tokens"]); !slices.Equal(got, tt.want) || m["count"] != float64(len(tt.want)) || m["max_model_len"] != 256.0 {
			t.Errorf("%s: got %v", tt.name, m)
		}
		if tt.strs {
			strs := m["token_strs"].([]any)
			if len(strs) != len(tt.want) || strs[1] != "Ġworld" {
				t.Errorf("%s: token_strs %v", tt.name, strs)
			}
		} else if m["token_strs"] != nil {
			t.Errorf("%s: token_strs %v, want null", tt.name, m["token_strs"])
		}
	}
	m := postJSON(t, ts.URL+"/detokenize", `{"tokens":[9707,1879,151645]}`, 200)
	if want := tok.Decode([]int{9707, 1879, 151645}, false); m["prompt"] != want {
		t.Errorf("detokenize: %q, want %q", m["prompt"], want)
	}
	for _, bad := range []string{`{"tokens":[999999999]}`, `{"tokens":"x"}`, `{}`, `{"prompt":"x","model":"other"}`} {
		path := "/detokenize"
		if strings.Contains(bad, "prompt") {
			path = "/tokenize"
		}
		if status, body := post(t, ts.URL+path, bad); status < 400 || !strings.Contains(string(body), `"error"`) {
			t.Errorf("%s %s: %d %s", path, bad, status, body)
		}
	}
}

func TestMetrics(t *testing.T) {
	fe := &fakeEngine{stats: engine.Stats{Running: 3, Waiting: 2, KVBlocksTotal: 100, KVBlocksUsed: 25,
		PrefixQueries: 40, PrefixHits: 10, Preemptions: 1, PromptTokens: 500, GenerationTokens: 70}}
	ts, _ := newTestServer(t, fe, nil)
	postJSON(t, ts.URL+"/v1/completions", `{"prompt":"Hello","max_tokens":3}`, 200)
	streamChunks(t, ts.URL+"/v1/completions", `{"prompt":"Hello","max_tokens":2,"stream":true}`)
	status, _, body := get(t, ts.URL+"/metrics")
	if status != 200 {
		t.Fatalf("status %d", status)
	}
	// vLLM's names contain colons, valid in the legacy scheme too.
	parser := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := parser.TextToMetricFamilies(strings.NewReader(string(body)))
	if err != nil {
		t.Fatalf("parse: %v\n%s", err, body)
	}
	gauge := func(name string) float64 {
		f := fams[name]
		if f == nil || len(f.Metric) != 1 {
			t.Fatalf("%s missing", name)
		}
		m := f.Metric[0]
		labels := map[string]string{}
		for _, l := range m.Label {
			labels[l.GetName()] = l.GetValue()
		}
		if labels["model_name"] != "qwen3-test" || labels["engine"] != "0" {
			t.Errorf("%s labels %v", name, labels)
		}
		if m.Gauge != nil {
			return m.Gauge.GetValue()
		}
		return m.Counter.GetValue()
	}
	for name, want := range map[string]float64{
		"vllm:num_requests_running": 3, "vllm:num_requests_waiting": 2, "vllm:kv_cache_usage_perc": 0.25,
		"vllm:prefix_cache_queries_total": 40, "vllm:prefix_cache_hits_total": 10, "vllm:num_preemptions_total": 1,
		"vllm:prompt_tokens_total": 500, "vllm:generation_tokens_total": 70,
	} {
		if got := gauge(name); got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	for _, name := range []string{"vllm:time_to_first_token_seconds", "vllm:inter_token_latency_seconds",
		"vllm:time_per_output_token_seconds", "vllm:e2e_request_latency_seconds", "vllm:request_prompt_tokens",
		"vllm:request_generation_tokens"} {
		f := fams[name]
		if f == nil || f.Metric[0].Histogram == nil {
			t.Fatalf("histogram %s missing", name)
		}
		if name != "vllm:inter_token_latency_seconds" && name != "vllm:time_per_output_token_seconds" && f.Metric[0].Histogram.GetSampleCount() != 2 {
			t.Errorf("%s count %d, want 2", name, f.Metric[0].Histogram.GetSampleCount())
		}
	}
	if got := fams["vllm:request_generation_tokens"].Metric[0].Histogram.GetSampleSum(); got != 5 {
		t.Errorf("generation tokens sum %v, want 5", got)
	}
	succ := fams["vllm:request_success_total"]
	if succ == nil {
		t.Fatal("vllm:request_success_total missing")
	}
	byReason := map[string]float64{}
	for _, m := range succ.Metric {
		for _, l := range m.Label {
			if l.GetName() == "finished_reason" {
				byReason[l.GetValue()] = m.Counter.GetValue()
			}
		}
	}
	if byReason["length"] != 2 || byReason["stop"] != 0 || len(byReason) != 3 {
		t.Errorf("request_success_total %v", byReason)
	}
}

func TestBodyLimitAndContentType(t *testing.T) {
	ts, _ := newTestServer(t, &fakeEngine{}, func(o *Options) { o.MaxRequestBytes = 64 })
	status, body := post(t, ts.URL+"/v1/completions", `{"prompt":"`+strings.Repeat("a", 200)+`"}`)
	if status != 413 || !strings.Contains(string(body), `"code":413`) {
		t.Errorf("oversized body: %d %s", status, body)
	}
	resp, err := http.Post(ts.URL+"/v1/completions", "text/plain", strings.NewReader(`{"prompt":"a"}`))
	if err != nil {
		t.Fatal(err)
	}
	data, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 400 || !strings.Contains(string(data), "Only 'application/json' is allowed") {
		t.Errorf("text/plain: %d %s", resp.StatusCode, data)
	}
}

func TestCORS(t *testing.T) {
	ts, _ := newTestServer(t, &fakeEngine{}, nil)
	req, _ := http.NewRequest("OPTIONS", ts.URL+"/v1/completions", nil)
	req.Header.Set("Origin", "http://example.test")
	req.Header.Set("Access-Control-Request-Method", "POST")
	req.Header.Set("Access-Control-Request-Headers", "content-type")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Access-Control-Allow-Origin") != "*" || resp.Header.Get("Access-Control-Allow-Headers") != "content-type" {
		t.Errorf("preflight: %d %v", resp.StatusCode, resp.Header)
	}
	req, _ = http.NewRequest("GET", ts.URL+"/v1/models", nil)
	req.Header.Set("Origin", "http://example.test")
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.Header.Get("Access-Control-Allow-Origin") != "*" {
		t.Errorf("GET with Origin: %v", resp.Header)
	}
}
