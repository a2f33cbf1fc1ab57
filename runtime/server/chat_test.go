package server

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/lowbit-ai/lowbit/runtime/engine"
	"github.com/lowbit-ai/lowbit/tokenizer"
	"github.com/lowbit-ai/lowbit/tokenizer/chat"
)

func chatInputSeen() chat.Input {
	lastChatInput.Lock()
	defer lastChatInput.Unlock()
	return lastChatInput.in
}

func TestChatShape(t *testing.T) {
	tok := qwen3(t)
	fe := &fakeEngine{}
	ts, _ := newTestServer(t, fe, nil)
	status, body := post(t, ts.URL+"/v1/chat/completions", `{"model":"qwen3-test","messages":[{"role":"user","content":"Hi"}]}`)
	if status != 200 {
		t.Fatalf("%d %s", status, body)
	}
	want := []string{"id", "object", "created", "model", "choices", "service_tier", "system_fingerprint", "usage",
		"prompt_logprobs", "prompt_token_ids", "kv_transfer_params"}
	if got := keysOf(t, body); !slices.Equal(got, want) {
		t.Errorf("keys %v", got)
	}
	if got := keysOf(t, rawField(t, body, "choices", 0)); !slices.Equal(got, []string{"index", "message", "logprobs", "finish_reason", "stop_reason", "token_ids"}) {
		t.Errorf("choice keys %v", got)
	}
	if got := keysOf(t, rawField(t, body, "choices", 0, "message")); !slices.Equal(got, []string{"role", "content", "refusal", "annotations", "audio", "function_call", "reasoning"}) {
		t.Errorf("message keys %v", got)
	}
	m := decodeMap(t, body)
	if !strings.HasPrefix(m["id"].(string), "chatcmpl-") || m["object"] != "chat.completion" {
		t.Errorf("header %v", m)
	}
	prompt := tok.EncodeWith("<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n", tokenizerOpts(false))
	r := fe.requests()[0]
	// Without max_tokens a chat request may fill the model length.
	if !slices.Equal(r.Prompt, prompt) || r.MaxTokens != 256-len(prompt) {
		t.Errorf("engine request prompt %v max %d", r.Prompt, r.MaxTokens)
	}
	c := choiceOf(m, 0)
	msg := c["message"].(map[string]any)
	gen := 256 - len(prompt)
	if msg["role"] != "assistant" || msg["content"] != strings.Repeat("abcdefghij", 26)[:gen] || msg["reasoning"] != nil || c["finish_reason"] != "length" {
		t.Errorf("choice %v", c)
	}
	if u := m["usage"].(map[string]any); u["prompt_tokens"] != float64(len(prompt)) || u["completion_tokens"] != float64(gen) {
		t.Errorf("usage %v", u)
	}
}

func TestChatRendering(t *testing.T) {
	tests := []struct {
		name, body string
		check      func(t *testing.T, in chat.Input, prompt string)
	}{
		{"text parts joined with newlines", `{"messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"},"c"]}]}`,
			func(t *testing.T, in chat.Input, prompt string) {
				if in.Messages[0]["content"] != "a\nb\nc" {
					t.Errorf("content %q", in.Messages[0]["content"])
				}
			}},
		{"chat_template_kwargs", `{"messages":[{"role":"user","content":"a"}],"chat_template_kwargs":{"enable_thinking":false,"n":3}}`,
			func(t *testing.T, in chat.Input, prompt string) {
				if rawString(in.Kwargs["enable_thinking"]) != "false" || rawString(in.Kwargs["n"]) != "3" || !in.AddGenerationPrompt {
					t.Errorf("kwargs %v", in.Kwargs)
				}
				if !strings.HasSuffix(prompt, "<think>\n\n</think>\n\n") {
					t.Errorf("prompt %q", prompt)
				}
			}},
		{"special tokens", `{"messages":[{"role":"user","content":"a"}]}`,
			func(t *testing.T, in chat.Input, prompt string) {
				if in.EOSToken != "<|im_end|>" || in.BOSToken != "" {
					t.Errorf("special tokens %q %q", in.BOSToken, in.EOSToken)
				}
			}},
		{"tools with tool_choice none", `{"messages":[{"role":"user","content":"a"}],"tools":[{"function":{"parameters":{"type":"object","x":1,"a":2.0},"name":"f"},"extra":1}],"tool_choice":"none"}`,
			func(t *testing.T, in chat.Input, prompt string) {
				// vLLM's model_dump: type, then name, description (null),
				// parameters, with the schema's key order kept.
				want := `{"type":"function","function":{"name":"f","description":null,"parameters":{"type":"object","x":1,"a":2.0}}}`
				if got := rawString(in.Tools[0]); got != want || !strings.Contains(prompt, "# Tools") {
					t.Errorf("tool %s, want %s", got, want)
				}
			}},
		{"tool call arguments parsed", `{"messages":[{"role":"user","content":"a"},{"role":"assistant","content":null,"tool_calls":[{"id":"1","type":"function","function":{"name":"f","arguments":"{\"city\": \"Paris\", \"n\": 2}"}}]},{"role":"tool","content":"ok","tool_call_id":"1"}]}`,
			func(t *testing.T, in chat.Input, prompt string) {
				call := rawString(in.Messages[1]["tool_calls"].([]any)[0])
				want := `{"id":"1","type":"function","function":{"name":"f","arguments":{"city": "Paris", "n": 2}}}`
				if call != want || in.Messages[1]["content"] != "" || rawString(in.Messages[2]["tool_call_id"]) != `"1"` {
					t.Errorf("tool call %s, want %s; messages %v", call, want, in.Messages)
				}
			}},
		{"continue the final message", `{"messages":[{"role":"user","content":"a"},{"role":"assistant","content":"The answer is"}],"continue_final_message":true,"add_generation_prompt":false}`,
			func(t *testing.T, in chat.Input, prompt string) {
				if in.AddGenerationPrompt || !strings.HasSuffix(prompt, "<|im_start|>assistant\nThe answer is") {
					t.Errorf("prompt %q", prompt)
				}
			}},
		{"reasoning_effort", `{"messages":[{"role":"user","content":"a"}],"reasoning_effort":"none"}`,
			func(t *testing.T, in chat.Input, prompt string) {
				if in.Kwargs["enable_thinking"] != false {
					t.Errorf("kwargs %v", in.Kwargs)
				}
			}},
	}
	tok := qwen3(t)
	for _, tt := range tests {
		fe := &fakeEngine{}
		ts, _ := newTestServer(t, fe, nil)
		postJSON(t, ts.URL+"/v1/chat/completions", tt.body, 200)
		in := chatInputSeen()
		prompt := tok.Decode(fe.requests()[0].Prompt, false)
		t.Run(tt.name, func(t *testing.T) { tt.check(t, in, prompt) })
	}
}

func tokenizerOpts(addSpecial bool) tokenizer.EncodeOptions {
	return tokenizer.EncodeOptions{AddSpecial: addSpecial, ParseSpecial: true}
}

func mustPost(t *testing.T, url, body string) *http.Response {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

func TestChatLogprobs(t *testing.T) {
	tok := qwen3(t)
	fe := &fakeEngine{tokens: func(*engine.Request) []int { return []int{64, 1000} }}
	ts, _ := newTestServer(t, fe, nil)
	status, body := post(t, ts.URL+"/v1/chat/completions", `{"messages":[{"role":"user","content":"Hi"}],"logprobs":true,"top_logprobs":2,"prompt_logprobs":1}`)
	if status != 200 {
		t.Fatalf("%d %s", status, body)
	}
	if got := keysOf(t, rawField(t, body, "choices", 0, "logprobs")); !slices.Equal(got, []string{"content"}) {
		t.Errorf("logprobs keys %v", got)
	}
	entry := rawField(t, body, "choices", 0, "logprobs", "content", 0)
	if got := keysOf(t, entry); !slices.Equal(got, []string{"token", "logprob", "bytes", "top_logprobs"}) {
		t.Errorf("entry keys %v", got)
	}
	m := decodeMap(t, entry)
	top := m["top_logprobs"].([]any)
	// The first top_logprobs entries of the dict: the sampled token, then
	// the top 1.
	if m["token"] != "a" || !slices.Equal(toInts(m["bytes"]), []int{'a'}) || len(top) != 2 ||
		top[0].(map[string]any)["token"] != "a" || top[1].(map[string]any)["token"] != tok.Decode([]int{1000}, false) {
		t.Errorf("entry %v", m)
	}
	if got := keysOf(t, rawField(t, body, "choices", 0, "logprobs", "content", 0, "top_logprobs", 0)); !slices.Equal(got, []string{"token", "logprob", "bytes"}) {
		t.Errorf("top entry keys %v", got)
	}
	pl := decodeMap(t, body)["prompt_logprobs"].([]any)
	if pl[0] != nil || len(pl) != len(fe.requests()[0].Prompt) || pl[1] == nil {
		t.Errorf("prompt_logprobs %v", pl)
	}
	if r := fe.requests()[0]; r.Logprobs != 2 || r.PromptLogprobs != 1 {
		t.Errorf("engine request logprobs %d %d", r.Logprobs, r.PromptLogprobs)
	}
}

func TestChatStream(t *testing.T) {
	fe := &fakeEngine{}
	ts, _ := newTestServer(t, fe, nil)
	chunks := streamChunks(t, ts.URL+"/v1/chat/completions",
		`{"messages":[{"role":"user","content":"Hi"}],"stream":true,"max_completion_tokens":3,"n":2,"stream_options":{"include_usage":true}}`)
	// Two role chunks first, then 3 content chunks per choice, then usage.
	if len(chunks) != 2+6+1 {
		t.Fatalf("%d chunks", len(chunks))
	}
	for i := 0; i < 2; i++ {
		raw := []byte(marshal(chunks[i]))
		c := choiceOf(chunks[i], 0)
		if chunks[i]["object"] != "chat.completion.chunk" || c["index"] != float64(i) ||
			string(rawField(t, raw, "choices", 0, "delta")) != `{"content":"","role":"assistant"}` || c["finish_reason"] != nil {
			t.Errorf("role chunk %d: %s", i, raw)
		}
	}
	text := map[float64]string{}
	for _, ch := range chunks[2:8] {
		c := choiceOf(ch, 0)
		text[c["index"].(float64)] += c["delta"].(map[string]any)["content"].(string)
		if c["delta"].(map[string]any)["role"] != nil {
			t.Errorf("role in a content chunk: %v", c)
		}
	}
	if text[0] != "abc" || text[1] != "abc" {
		t.Errorf("texts %v", text)
	}
	u := chunks[8]["usage"].(map[string]any)
	if len(chunks[8]["choices"].([]any)) != 0 || u["completion_tokens"] != 6.0 {
		t.Errorf("usage chunk %v", chunks[8])
	}
}

func TestChatStreamChunkKeys(t *testing.T) {
	ts, _ := newTestServer(t, &fakeEngine{}, nil)
	resp := mustPost(t, ts.URL+"/v1/chat/completions", `{"messages":[{"role":"user","content":"Hi"}],"stream":true,"max_tokens":2}`)
	evs := sseEvents(t, readAll(t, resp))
	if len(evs) != 4 {
		t.Fatalf("events %q", evs)
	}
	wantChunk := [][]string{
		{"id", "object", "created", "model", "choices", "prompt_token_ids"},
		{"id", "object", "created", "model", "choices"},
		{"id", "object", "created", "model", "choices"},
	}
	wantChoice := [][]string{
		{"index", "delta", "logprobs", "finish_reason"},
		{"index", "delta", "logprobs", "finish_reason", "token_ids"},
		{"index", "delta", "logprobs", "finish_reason", "stop_reason", "token_ids"},
	}
	for i := range wantChunk {
		raw := []byte(evs[i])
		if got := keysOf(t, raw); !slices.Equal(got, wantChunk[i]) {
			t.Errorf("chunk %d keys %v", i, got)
		}
		if got := keysOf(t, rawField(t, raw, "choices", 0)); !slices.Equal(got, wantChoice[i]) {
			t.Errorf("chunk %d choice keys %v", i, got)
		}
	}
	if got := string(rawField(t, []byte(evs[2]), "choices", 0, "finish_reason")); got != `"length"` {
		t.Errorf("finish %s", got)
	}
}

func TestChatEchoAndRole(t *testing.T) {
	ts, _ := newTestServer(t, &fakeEngine{}, nil)
	m := postJSON(t, ts.URL+"/v1/chat/completions", `{"messages":[{"role":"user","content":"Hi"},{"role":"assistant","content":"Sure: "}],"add_generation_prompt":false,"echo":true,"max_tokens":2}`, 200)
	msg := choiceOf(m, 0)["message"].(map[string]any)
	if msg["role"] != "assistant" || msg["content"] != "Sure: ab" {
		t.Errorf("message %v", msg)
	}
	// echo alone asks for prompt logprobs with top_logprobs (0): vLLM's
	// to_sampling_params.
	if pl, ok := m["prompt_logprobs"].([]any); !ok || pl[0] != nil {
		t.Errorf("prompt_logprobs %v", m["prompt_logprobs"])
	}
}

func TestChatNoTemplate(t *testing.T) {
	ts, _ := newTestServer(t, &fakeEngine{}, func(o *Options) { o.ChatTemplate = "" })
	m := postJSON(t, ts.URL+"/v1/chat/completions", `{"messages":[{"role":"user","content":"Hi"}]}`, 400)
	if !strings.Contains(m["error"].(map[string]any)["message"].(string), "you must provide a chat template") {
		t.Errorf("error %v", m)
	}
}

// TestChatRealTemplate renders with the real chat package and Qwen3's
// template, once that package renders.
func TestChatRealTemplate(t *testing.T) {
	tok := qwen3(t)
	in := chat.Input{Messages: []map[string]any{{"role": "user", "content": "Hi"}}, AddGenerationPrompt: true,
		EOSToken: "<|im_end|>"}
	if _, err := chat.Render(tok.Config.ChatTemplate, in); err != nil {
		t.Skipf("tokenizer/chat does not render yet: %v", err)
	}
	fe := &fakeEngine{}
	ts, _ := newTestServer(t, fe, func(o *Options) {
		o.RenderChat = nil
		o.ChatTemplate = tok.Config.ChatTemplate
	})
	postJSON(t, ts.URL+"/v1/chat/completions", `{"messages":[{"role":"user","content":"Hi"}],"chat_template_kwargs":{"enable_thinking":false}}`, 200)
	want := "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
	if got := tok.Decode(fe.requests()[0].Prompt, false); got != want {
		t.Errorf("prompt %q, want %q", got, want)
	}
	// A tool reaches the prompt through tojson as vLLM dumps it: its
	// schema's key order, int and float, and description null.
	postJSON(t, ts.URL+"/v1/chat/completions", `{"messages":[{"role":"user","content":"Hi"}],"tool_choice":"none",
		"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object","x":1,"a":2.0}}}]}`, 200)
	wantTool := `{"type": "function", "function": {"name": "f", "description": null, "parameters": {"type": "object", "x": 1, "a": 2.0}}}`
	if got := tok.Decode(fe.requests()[1].Prompt, false); !strings.Contains(got, "<tools>\n"+wantTool+"\n</tools>") {
		t.Errorf("prompt %q lacks %s", got, wantTool)
	}
}

// rawString shows a template value: raw JSON as its text.
func rawString(v any) string {
	if r, ok := v.(json.RawMessage); ok {
		return string(r)
	}
	return fmt.Sprint(v)
}
