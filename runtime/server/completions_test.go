package server

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/lowbit-ai/lowbit/internal/qwen3tok"
	"github.com/lowbit-ai/lowbit/runtime"
	"github.com/lowbit-ai/lowbit/runtime/engine"
)

func decodeMap(t *testing.T, data []byte) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatalf("%v in %s", err, data)
	}
	return m
}

func toInts(v any) []int {
	l, _ := v.([]any)
	out := make([]int, len(l))
	for i, e := range l {
		out[i] = int(e.(float64))
	}
	return out
}

func choiceOf(m map[string]any, i int) map[string]any {
	return m["choices"].([]any)[i].(map[string]any)
}

// scripted makes the fake engine generate exactly the tokens of text.
func scripted(t *testing.T, text string) func(*engine.Request) []int {
	ids := qwen3(t).Encode(text)
	return func(*engine.Request) []int { return ids }
}

func TestCompletionShape(t *testing.T) {
	fe := &fakeEngine{}
	ts, _ := newTestServer(t, fe, nil)
	status, body := post(t, ts.URL+"/v1/completions", `{"model":"qwen3-test","prompt":"Hello","max_tokens":3}`)
	if status != 200 {
		t.Fatalf("status %d: %s", status, body)
	}
	wantKeys := []string{"id", "object", "created", "model", "choices", "service_tier", "system_fingerprint", "usage", "kv_transfer_params"}
	if got := keysOf(t, body); !slices.Equal(got, wantKeys) {
		t.Errorf("keys %v, want %v", got, wantKeys)
	}
	wantChoice := []string{"index", "text", "logprobs", "finish_reason", "stop_reason", "token_ids", "prompt_logprobs", "prompt_token_ids"}
	if got := keysOf(t, rawField(t, body, "choices", 0)); !slices.Equal(got, wantChoice) {
		t.Errorf("choice keys %v, want %v", got, wantChoice)
	}
	if got := keysOf(t, rawField(t, body, "usage")); !slices.Equal(got, []string{"prompt_tokens", "total_tokens", "completion_tokens", "prompt_tokens_details"}) {
		t.Errorf("usage keys %v", got)
	}
	m := decodeMap(t, body)
	id := m["id"].(string)
	if !strings.HasPrefix(id, "cmpl-") || len(id) != 5+32 || m["object"] != "text_completion" || m["model"] != "qwen3-test" {
		t.Errorf("header fields %v", m)
	}
	c := choiceOf(m, 0)
	tok := qwen3(t)
	if c["text"] != "abc" || c["finish_reason"] != "length" || c["stop_reason"] != nil ||
		c["logprobs"] != nil || c["index"] != 0.0 {
		t.Errorf("choice %v", c)
	}
	promptIDs := tok.Encode("Hello")
	u := m["usage"].(map[string]any)
	if u["prompt_tokens"] != float64(len(promptIDs)) || u["completion_tokens"] != 3.0 || u["total_tokens"] != float64(len(promptIDs)+3) || u["prompt_tokens_details"] != nil {
		t.Errorf("usage %v", u)
	}
	r := fe.requests()[0]
	if !slices.Equal(r.Prompt, promptIDs) || r.MaxTokens != 3 || r.Logprobs != -1 || r.PromptLogprobs != -1 ||
		!slices.Contains(r.StopTokenIDs, qwen3tok.EOSChat) || !slices.Contains(r.StopTokenIDs, qwen3tok.EOSText) {
		t.Errorf("engine request %+v", r)
	}
	if s := r.Sampling; s.Temperature != 0.6 || s.TopK != 20 || s.TopP != 0.95 || s.MinP != 0 {
		t.Errorf("sampling %+v: want Qwen3's generation config", s)
	}
}

func TestCompletionPromptForms(t *testing.T) {
	tok := qwen3(t)
	a, b := tok.Encode("Hello"), tok.Encode(" world")
	tests := []struct {
		name, prompt string
		n            int
		want         [][]int
	}{
		{"string", `"Hello"`, 1, [][]int{a}},
		{"strings", `["Hello"," world"]`, 1, [][]int{a, b}},
		{"ids", `[9707, 1879]`, 1, [][]int{{9707, 1879}}},
		{"id lists", `[[9707],[1879, 3]]`, 1, [][]int{{9707}, {1879, 3}}},
		{"strings n=2", `["Hello"," world"]`, 2, [][]int{a, a, b, b}},
		{"lax ids", `[[1, "2"], [3.0, true]]`, 1, [][]int{{1, 2}, {3, 1}}},
	}
	for _, tt := range tests {
		fe := &fakeEngine{}
		ts, _ := newTestServer(t, fe, nil)
		body := fmt.Sprintf(`{"prompt":%s,"max_tokens":2,"n":%d,"seed":7}`, tt.prompt, tt.n)
		m := postJSON(t, ts.URL+"/v1/completions", body, 200)
		choices := m["choices"].([]any)
		if len(choices) != len(tt.want) {
			t.Fatalf("%s: %d choices, want %d", tt.name, len(choices), len(tt.want))
		}
		reqs := fe.requests()
		for i, want := range tt.want {
			if choiceOf(m, i)["index"] != float64(i) {
				t.Errorf("%s: choice %d index %v", tt.name, i, choiceOf(m, i)["index"])
			}
			if !slices.Equal(reqs[i].Prompt, want) {
				t.Errorf("%s: request %d prompt %v, want %v", tt.name, i, reqs[i].Prompt, want)
			}
			// Choice i of a prompt samples with seed+i (vLLM's ParentRequest).
			if got := reqs[i].Sampling.Seed; got != uint64(7+i%tt.n) {
				t.Errorf("%s: request %d seed %d, want %d", tt.name, i, got, 7+i%tt.n)
			}
		}
		promptTokens := 0
		for i := 0; i < len(tt.want); i += tt.n {
			promptTokens += len(tt.want[i])
		}
		if u := m["usage"].(map[string]any); u["prompt_tokens"] != float64(promptTokens) || u["completion_tokens"] != float64(2*len(tt.want)) {
			t.Errorf("%s: usage %v", tt.name, u)
		}
	}
}

func TestCompletionDefaults(t *testing.T) {
	tests := []struct {
		name     string
		body     string
		vllmMode bool
		maxTok   int
		want     runtime.SamplingOptions
	}{
		{"generation config", `{"prompt":"a"}`, false, 16, runtime.SamplingOptions{Temperature: 0.6, TopK: 20, TopP: 0.95}},
		{"null max_tokens is 16", `{"prompt":"a","max_tokens":null}`, false, 16, runtime.SamplingOptions{Temperature: 0.6, TopK: 20, TopP: 0.95}},
		{"request overrides", `{"prompt":"a","temperature":0.9,"top_k":-1,"top_p":1,"min_p":0.1}`, false, 16, runtime.SamplingOptions{Temperature: 0.9, MinP: 0.1}},
		{"greedy resets the filters", `{"prompt":"a","temperature":0}`, false, 16, runtime.SamplingOptions{}},
		{"tiny temperature raised to 0.01", `{"prompt":"a","temperature":0.000001}`, false, 16, runtime.SamplingOptions{Temperature: 0.01, TopK: 20, TopP: 0.95}},
		{"vllm defaults", `{"prompt":"a"}`, true, 16, runtime.SamplingOptions{Temperature: 1}},
		{"lax strings", `{"prompt":"a","temperature":"0.5","max_tokens":"4","top_k":"3"}`, false, 4, runtime.SamplingOptions{Temperature: 0.5, TopK: 3, TopP: 0.95}},
		{"max_tokens clipped to the model length", `{"prompt":[1,2,3,4],"max_tokens":250}`, false, 250, runtime.SamplingOptions{Temperature: 0.6, TopK: 20, TopP: 0.95}},
	}
	for _, tt := range tests {
		fe := &fakeEngine{}
		ts, _ := newTestServer(t, fe, func(o *Options) {
			if tt.vllmMode {
				o.DefaultSampling = nil
			}
		})
		postJSON(t, ts.URL+"/v1/completions", tt.body, 200)
		r := fe.requests()[0]
		got := r.Sampling
		got.Seed = 0
		if got != tt.want || r.MaxTokens != tt.maxTok {
			t.Errorf("%s: sampling %+v max %d, want %+v max %d", tt.name, got, r.MaxTokens, tt.want, tt.maxTok)
		}
	}
}

func TestCompletionStops(t *testing.T) {
	tok := qwen3(t)
	text := "The quick brown fox jumps"
	tests := []struct {
		name      string
		tokens    []int
		body      string
		text      string
		finish    string
		stop      any
		completed int // completion tokens, -1: don't check
		cancelled bool
	}{
		{"stop string across tokens", tok.Encode(text), `{"prompt":"a","stop":"ck bro"}`, "The qui", "stop", "ck bro", -1, true},
		{"stop string included", tok.Encode(text), `{"prompt":"a","stop":["zz","ck bro"],"include_stop_str_in_output":true}`, "The quick bro", "stop", "ck bro", -1, true},
		{"first stop in list order wins", tok.Encode(text), `{"prompt":"a","stop":["fox","quick"]}`, "The ", "stop", "quick", -1, true},
		{"no stop", tok.Encode(text), `{"prompt":"a","stop":"zebra"}`, text, "length", nil, len(tok.Encode(text)), false},
		{"stop token id", []int{64, 65, 555, 66}, `{"prompt":"a","stop_token_ids":[555]}`, "ab", "stop", 555.0, 3, false},
		{"stop token id included", []int{64, 65, 555, 66}, `{"prompt":"a","stop_token_ids":[555],"include_stop_str_in_output":true}`, "ab" + tok.Decode([]int{555}, true), "stop", 555.0, 3, false},
		{"EOS: stop_reason null", []int{64, qwen3tok.EOSChat, 66}, `{"prompt":"a"}`, "a", "stop", nil, 2, false},
		{"generation config EOS: stop_reason id", []int{64, qwen3tok.EOSText, 66}, `{"prompt":"a"}`, "a", "stop", float64(qwen3tok.EOSText), 2, false},
		{"ignore_eos", []int{64, qwen3tok.EOSChat, 66}, `{"prompt":"a","ignore_eos":true,"max_tokens":3}`, "ac", "length", nil, 3, false},
		{"special tokens kept", []int{64, qwen3tok.EOSChat, 66}, `{"prompt":"a","ignore_eos":true,"max_tokens":3,"skip_special_tokens":false}`, tok.Decode([]int{64, qwen3tok.EOSChat, 66}, false), "length", nil, 3, false},
		{"min_tokens delays stop strings", tok.Encode("Hello Hello Hello"), `{"prompt":"a","stop":"Hello","min_tokens":1}`, "Hello ", "stop", "Hello", -1, true},
		{"stop string at the first token", tok.Encode("Hello Hello Hello"), `{"prompt":"a","stop":"Hello"}`, "", "stop", "Hello", -1, true},
	}
	for _, tt := range tests {
		fe := &fakeEngine{tokens: func(*engine.Request) []int { return tt.tokens }}
		ts, _ := newTestServer(t, fe, nil)
		m := postJSON(t, ts.URL+"/v1/completions", tt.body, 200)
		c := choiceOf(m, 0)
		if c["text"] != tt.text || c["finish_reason"] != tt.finish || c["stop_reason"] != tt.stop {
			t.Errorf("%s: text %q finish %v stop_reason %v; want %q %v %v", tt.name, c["text"], c["finish_reason"], c["stop_reason"], tt.text, tt.finish, tt.stop)
		}
		if tt.completed >= 0 && m["usage"].(map[string]any)["completion_tokens"] != float64(tt.completed) {
			t.Errorf("%s: usage %v", tt.name, m["usage"])
		}
		if tt.cancelled {
			waitFor(t, tt.name+": engine request cancelled", func() bool { return len(fe.cancelledIDs()) == 1 })
		}
		r := fe.requests()[0]
		if strings.Contains(tt.body, "ignore_eos") == slices.Contains(r.StopTokenIDs, qwen3tok.EOSChat) {
			t.Errorf("%s: stop ids %v", tt.name, r.StopTokenIDs)
		}
	}
}

// TestCompletionEchoLogprobs is lm-evaluation-harness's loglikelihood
// request: token-id prompts, echo, max_tokens 1, logprobs 1.
func TestCompletionEchoLogprobs(t *testing.T) {
	tok := qwen3(t)
	fe := &fakeEngine{tokens: func(*engine.Request) []int { return []int{1001} }}
	ts, _ := newTestServer(t, fe, nil)
	prompt := []int{9707, 1000, 1879}
	status, body := post(t, ts.URL+"/v1/completions", `{"prompt":[[9707,1000,1879]],"max_tokens":1,"logprobs":1,"echo":true,"temperature":0,"seed":1234}`)
	if status != 200 {
		t.Fatalf("status %d %s", status, body)
	}
	r := fe.requests()[0]
	if r.Logprobs != 1 || r.PromptLogprobs != 1 {
		t.Errorf("engine logprobs %d prompt %d, want 1 1 (echo: prompt_logprobs := logprobs)", r.Logprobs, r.PromptLogprobs)
	}
	m := decodeMap(t, body)
	c := choiceOf(m, 0)
	all := append(slices.Clone(prompt), 1001)
	if c["text"] != tok.Decode(prompt, false)+tok.Decode([]int{1001}, true) {
		t.Errorf("text %q", c["text"])
	}
	lp := c["logprobs"].(map[string]any)
	if got := keysOf(t, rawField(t, body, "choices", 0, "logprobs")); !slices.Equal(got, []string{"text_offset", "token_logprobs", "tokens", "top_logprobs"}) {
		t.Errorf("logprobs keys %v", got)
	}
	tokens := lp["tokens"].([]any)
	offsets := toInts(lp["text_offset"])
	tlp := lp["token_logprobs"].([]any)
	top := lp["top_logprobs"].([]any)
	if len(tokens) != 4 || len(offsets) != 4 || len(tlp) != 4 || len(top) != 4 {
		t.Fatalf("lengths: %v", lp)
	}
	off := 0
	for i, id := range all {
		if tokens[i] != tok.Decode([]int{id}, false) {
			t.Errorf("token %d %q", i, tokens[i])
		}
		if offsets[i] != off {
			t.Errorf("text_offset[%d] = %d, want %d", i, offsets[i], off)
		}
		off += utf8.RuneCountInString(tokens[i].(string))
	}
	if tlp[0] != nil || top[0] != nil {
		t.Errorf("first prompt token: %v %v, want null null", tlp[0], top[0])
	}
	// Position 1 is id 1000, also the top-1: the dict's one entry takes the
	// top-k value; positions 2 and 3 keep their own logprob.
	for i, want := range []float32{0, -0.1, fakeLogprob(1879), fakeLogprob(1001)} {
		if i > 0 && tlp[i] != float64(want) {
			t.Errorf("token_logprobs[%d] = %v, want %v", i, tlp[i], float64(want))
		}
	}
	// top_logprobs keeps the first logprobs+1 entries: the actual token,
	// then the top 1.
	if got := keysOf(t, rawField(t, body, "choices", 0, "logprobs", "top_logprobs", 1)); !slices.Equal(got, []string{tok.Decode([]int{1000}, false)}) {
		// position 1 is id 1000 itself: actual token and top-1 coincide
		t.Errorf("top_logprobs[1] keys %q", got)
	}
	if got := keysOf(t, rawField(t, body, "choices", 0, "logprobs", "top_logprobs", 2)); !slices.Equal(got, []string{tok.Decode([]int{1879}, false), tok.Decode([]int{1000}, false)}) {
		t.Errorf("top_logprobs[2] keys %q", got)
	}
	// lm-eval reads choices[].logprobs.token_logprobs[ctxlen:-1]: the prompt
	// continuation tokens.
	if c["prompt_logprobs"] == nil {
		t.Error("echo with logprobs: prompt_logprobs missing")
	}
}

func TestCompletionEchoOnly(t *testing.T) {
	tok := qwen3(t)
	fe := &fakeEngine{}
	ts, _ := newTestServer(t, fe, nil)
	m := postJSON(t, ts.URL+"/v1/completions", `{"prompt":"Hello world","max_tokens":0,"echo":true,"logprobs":0}`, 200)
	c := choiceOf(m, 0)
	if c["text"] != "Hello world" || c["finish_reason"] != "length" {
		t.Errorf("choice %v", c)
	}
	if r := fe.requests()[0]; r.MaxTokens != 1 {
		t.Errorf("engine max_tokens %d, want 1", r.MaxTokens)
	}
	if len(c["logprobs"].(map[string]any)["tokens"].([]any)) != len(tok.Encode("Hello world")) {
		t.Errorf("logprobs cover %v", c["logprobs"])
	}
	if u := m["usage"].(map[string]any); u["completion_tokens"] != 1.0 {
		t.Errorf("usage %v: vLLM counts the one token it ran", u)
	}
}

func TestPromptLogprobsShape(t *testing.T) {
	tok := qwen3(t)
	fe := &fakeEngine{}
	ts, _ := newTestServer(t, fe, nil)
	status, body := post(t, ts.URL+"/v1/completions", `{"prompt":[9707,11,1000,1879],"max_tokens":1,"prompt_logprobs":2,"n":2,"temperature":0.5}`)
	if status != 200 {
		t.Fatalf("%d %s", status, body)
	}
	// The engine computes prompt logprobs once per prompt.
	if reqs := fe.requests(); reqs[0].PromptLogprobs != 2 || reqs[1].PromptLogprobs != -1 {
		t.Errorf("engine prompt logprobs %d %d", reqs[0].PromptLogprobs, reqs[1].PromptLogprobs)
	}
	for ci := 0; ci < 2; ci++ {
		pl := rawField(t, body, "choices", ci, "prompt_logprobs")
		var entries []json.RawMessage
		json.Unmarshal(pl, &entries)
		if len(entries) != 4 || string(entries[0]) != "null" {
			t.Fatalf("choice %d prompt_logprobs %s", ci, pl)
		}
		// Actual token first (true rank 3), then the top 2; -inf is -9999.0.
		if got := keysOf(t, entries[1]); !slices.Equal(got, []string{"11", "1000", "1001"}) {
			t.Errorf("entry 1 keys %v", got)
		}
		if got := string(rawField(t, entries[1], "11")); got != fmt.Sprintf(`{"logprob":%s,"rank":3,"decoded_token":%q}`,
			appendPyFloat(nil, float64(fakeLogprob(11))), tok.Decode([]int{11}, false)) {
			t.Errorf("entry 1 actual %s", got)
		}
		if got := string(rawField(t, entries[1], "1001")); !strings.HasPrefix(got, `{"logprob":-9999.0,"rank":2,`) {
			t.Errorf("entry 1 -inf %s", got)
		}
		// An actual token inside the top k keeps its place, ranked as in
		// the top k.
		if got := keysOf(t, entries[2]); !slices.Equal(got, []string{"1000", "1001"}) {
			t.Errorf("entry 2 keys %v", got)
		}
		if got := string(rawField(t, entries[2], "1000", "rank")); got != "1" {
			t.Errorf("entry 2 rank %s", got)
		}
	}
}

func TestCompletionLogprobsTopK(t *testing.T) {
	tok := qwen3(t)
	fe := &fakeEngine{tokens: func(*engine.Request) []int { return []int{64, 1000} }}
	ts, _ := newTestServer(t, fe, nil)
	status, body := post(t, ts.URL+"/v1/completions", `{"prompt":"a","logprobs":2,"return_tokens_as_token_ids":false}`)
	if status != 200 {
		t.Fatalf("%d %s", status, body)
	}
	want := []string{"a", tok.Decode([]int{1000}, false), tok.Decode([]int{1001}, false)}
	if got := keysOf(t, rawField(t, body, "choices", 0, "logprobs", "top_logprobs", 0)); !slices.Equal(got, want) {
		t.Errorf("top_logprobs[0] keys %q, want %q (k+1 entries)", got, want)
	}
	if got := string(rawField(t, body, "choices", 0, "logprobs", "top_logprobs", 0, want[2])); got != "-9999.0" {
		t.Errorf("-inf written %s", got)
	}
	if got := keysOf(t, rawField(t, body, "choices", 0, "logprobs", "top_logprobs", 1)); len(got) != 2 {
		t.Errorf("sampled token inside the top k: %q, want 2 entries", got)
	}
	status, body = post(t, ts.URL+"/v1/completions", `{"prompt":"a","logprobs":1,"return_tokens_as_token_ids":true}`)
	if status != 200 || string(rawField(t, body, "choices", 0, "logprobs", "tokens")) != `["token_id:64","token_id:1000"]` {
		t.Errorf("tokens as ids: %s", body)
	}
}

func TestReturnTokenIDs(t *testing.T) {
	fe := &fakeEngine{}
	ts, _ := newTestServer(t, fe, nil)
	m := postJSON(t, ts.URL+"/v1/completions", `{"prompt":[5,6],"max_tokens":2,"return_token_ids":true}`, 200)
	c := choiceOf(m, 0)
	if !slices.Equal(toInts(c["token_ids"]), []int{64, 65}) || !slices.Equal(toInts(c["prompt_token_ids"]), []int{5, 6}) {
		t.Errorf("choice %v", c)
	}
}

// TestDecodedTokenCorrection: a byte fragment of a multi-byte character
// decodes alone to U+FFFD; vLLM reports "" until the token that
// completes the character, which gets the whole character.
func TestDecodedTokenCorrection(t *testing.T) {
	tok := qwen3(t)
	_, s := newTestServer(t, &fakeEngine{}, nil)
	const text = "𓀀🫠ᚠ"
	ids := tok.Encode(text)
	var got []string
	for i, id := range ids {
		if !strings.HasSuffix(tok.Decode([]int{id}, false), "\uFFFD") {
			t.Fatalf("token %d of %q decodes whole; the test needs fragments", id, text)
		}
		got = append(got, s.decodedToken(id, contextBefore(ids, i, 0)))
	}
	if strings.Join(got, "") != text || got[0] != "" || strings.ContainsRune(strings.Join(got, ""), '\uFFFD') {
		t.Errorf("decoded tokens %q", got)
	}
}
