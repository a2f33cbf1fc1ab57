package server

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

var (
	fuzzOnce sync.Once
	fuzzSrv  *Server
)

// fuzzServer is one server over a fast fake engine, small limits so that
// any request is cheap.
func fuzzServer(t testing.TB) *Server {
	fuzzOnce.Do(func() {
		d := qwenDefaults
		// The real renderer and Qwen3's template: chat bodies reach it.
		tok := qwen3(t)
		s, err := New(Options{Engine: &fakeEngine{}, Tokenizer: tok, ChatTemplate: tok.Config.ChatTemplate,
			ServedModelNames: []string{"m"}, MaxModelLen: 384, DefaultSampling: &d,
			EOSIDs: []int{151645, 151643}, MaxPrompts: 4, MaxChoices: 8})
		if err != nil {
			t.Fatal(err)
		}
		fuzzSrv = s
	})
	return fuzzSrv
}

// checkAnswer fails unless rec holds a well-formed answer: a JSON error
// whose code is the status, a JSON response, or an SSE stream ending in
// [DONE]. A 500 means a panic or an engine failure, neither possible here.
func checkAnswer(t *testing.T, body []byte, rec *httptest.ResponseRecorder) {
	t.Helper()
	out := rec.Body.Bytes()
	if rec.Code == http.StatusInternalServerError {
		t.Fatalf("500 for %q: %s", body, out)
	}
	if strings.HasPrefix(rec.Header().Get("Content-Type"), "text/event-stream") {
		if rec.Code != 200 || !bytes.HasSuffix(out, []byte("data: [DONE]\n\n")) {
			t.Fatalf("stream for %q: %d %q", body, rec.Code, out)
		}
		for _, ev := range strings.Split(strings.TrimSuffix(string(out), "\n\n"), "\n\n") {
			p, ok := strings.CutPrefix(ev, "data: ")
			if !ok || (p != "[DONE]" && !json.Valid([]byte(p))) {
				t.Fatalf("bad event %q for %q", ev, body)
			}
		}
		return
	}
	var m map[string]any
	if err := json.Unmarshal(out, &m); err != nil {
		t.Fatalf("%q: answer is not a JSON object: %v: %q", body, err, out)
	}
	if rec.Code == 200 {
		if _, ok := m["choices"].([]any); !ok {
			t.Fatalf("%q: 200 without choices: %s", body, out)
		}
		return
	}
	e, ok := m["error"].(map[string]any)
	if !ok || e["code"] != float64(rec.Code) {
		t.Fatalf("%q: status %d with %s", body, rec.Code, out)
	}
}

func fuzzRequest(t *testing.T, path string, body []byte) {
	s := fuzzServer(t)
	req := httptest.NewRequest("POST", path, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	rec := httptest.NewRecorder()
	s.ServeHTTP(rec, req)
	checkAnswer(t, body, rec)
}

// FuzzCompletionRequest: any body gives a JSON error or a success, never a
// panic or a malformed answer.
func FuzzCompletionRequest(f *testing.F) {
	for _, seed := range []string{
		`{"prompt":"Hello","max_tokens":3}`,
		`{"prompt":["a","b"],"n":2,"seed":1,"stream":true,"stream_options":{"include_usage":true,"continuous_usage_stats":true}}`,
		`{"prompt":[[1,2],[3]],"echo":true,"logprobs":2,"max_tokens":0}`,
		`{"prompt":[1,2,3],"prompt_logprobs":5,"max_tokens":1,"temperature":0}`,
		`{"prompt":"x","stop":["b","cd"],"include_stop_str_in_output":true,"min_tokens":2}`,
		`{"prompt":"x","stop_token_ids":[66],"ignore_eos":true,"skip_special_tokens":false}`,
		`{"prompt":"x","logprobs":"abc"}`,
		`{"prompt":"x","max_tokens":1e400}`,
		`{"prompt":"x","temperature":"NaN"}`,
		`{"prompt":"x","top_k":-1,"top_p":0.5,"min_p":1}`,
		`{"prompt":"🫠𓀀","echo":true,"stream":true,"logprobs":0}`,
		`{"prompt":"x","return_token_ids":true,"return_tokens_as_token_ids":true,"logprobs":1}`,
		`{"prompt":"","model":"m"}`,
		`[]`, `null`, `{`, `{"prompt":{"a":1}}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		fuzzRequest(t, "/v1/completions", body)
	})
}

// FuzzChatRequest does the same for chat requests.
func FuzzChatRequest(f *testing.F) {
	for _, seed := range []string{
		`{"messages":[{"role":"user","content":"Hi"}],"max_tokens":3}`,
		`{"messages":[{"role":"user","content":[{"type":"text","text":"a"},"b"]}],"stream":true,"n":2,"logprobs":true,"top_logprobs":2}`,
		`{"messages":[{"role":"assistant","content":null,"tool_calls":[{"function":{"name":"f","arguments":"{\"a\":1}"}}]}],"prompt_logprobs":1,"echo":true,"add_generation_prompt":false}`,
		`{"messages":[{"role":"user","content":"a"},{"role":"assistant","content":" b "}],"continue_final_message":true,"add_generation_prompt":false}`,
		`{"messages":[],"tools":[{"type":"function"}],"tool_choice":"none","chat_template_kwargs":{"enable_thinking":false}}`,
		`{"messages":"x"}`, `{"messages":[1]}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		fuzzRequest(t, "/v1/chat/completions", body)
	})
}
