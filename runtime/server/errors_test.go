package server

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lowbit-ai/lowbit/runtime/engine"
)

func TestRequestErrors(t *testing.T) {
	long := "[" + strings.TrimSuffix(strings.Repeat("1,", 250), ",") + "]"
	tests := []struct {
		name, path, body string
		status           int
		typ              string
		msg              string // the whole message, or a "~substring"
		param            any
	}{
		{"malformed JSON", "/v1/completions", `{"prompt": `, 400, "Bad Request", "~'type': 'json_invalid', 'loc': ('body', ", "body.11"},
		{"not an object", "/v1/completions", `[1,2]`, 400, "Bad Request",
			"~'type': 'model_attributes_type', 'loc': ('body',), 'msg': 'Input should be a valid dictionary or object to extract fields from'", "body"},
		{"empty body", "/v1/completions", ``, 400, "Bad Request", "~'type': 'missing'", "body"},
		{"prompt_logprobs not an integer", "/v1/completions", `{"prompt":"a","prompt_logprobs":"abc"}`, 400, "Bad Request",
			"1 validation error:\n  {'type': 'value_error', 'loc': ('body',), 'msg': 'Value error, `prompt_logprobs` must be an integer. (parameter=prompt_logprobs, value=abc)', 'input': '<dict of 2 items>', 'ctx': {'error': VLLMValidationError('`prompt_logprobs` must be an integer.')}}",
			"prompt_logprobs"},
		{"logprobs not an integer", "/v1/completions", `{"prompt":"a","logprobs":[1]}`, 400, "Bad Request", "~`logprobs` must be an integer.", "logprobs"},
		{"prompt_logprobs below -1", "/v1/completions", `{"prompt":"a","prompt_logprobs":-2}`, 400, "Bad Request", "~`prompt_logprobs` must be a positive value or -1.", "prompt_logprobs"},
		{"prompt_logprobs with stream", "/v1/completions", `{"prompt":"a","prompt_logprobs":1,"stream":true}`, 400, "Bad Request", "~`prompt_logprobs` are not available when `stream=True`.", "prompt_logprobs"},
		{"stream_options without stream", "/v1/completions", `{"prompt":"a","stream_options":{"include_usage":true}}`, 400, "Bad Request", "~Stream options can only be defined when `stream=True`.", "stream_options"},
		{"empty prompt", "/v1/completions", `{"prompt":""}`, 400, "Bad Request", "~Either prompt or prompt_embeds must be provided and non-empty.", "prompt"},
		{"no prompt", "/v1/completions", `{"max_tokens":3}`, 400, "Bad Request", "~Either prompt or prompt_embeds must be provided and non-empty.", "prompt"},
		{"empty token prompt", "/v1/completions", `{"prompt":[]}`, 400, "BadRequestError", "The decoder prompt cannot be empty", nil},
		{"prompt of the wrong type", "/v1/completions", `{"prompt":5}`, 400, "Bad Request", "~'type': 'string_type'", "body.prompt"},
		{"mixed prompt batch", "/v1/completions", `{"prompt":["a",[1]]}`, 400, "Bad Request", "~'loc': ('body', 'prompt', 1)", "body.prompt.1"},
		{"temperature NaN", "/v1/completions", `{"prompt":"a","temperature":"nan"}`, 400, "BadRequestError", "temperature must be a finite number, got nan. (parameter=temperature, value=nan)", "temperature"},
		{"negative token id", "/v1/completions", `{"prompt":[1,-2]}`, 400, "Bad Request", "~'type': 'greater_than_equal', 'loc': ('body', 'prompt', 1)", "body.prompt.1"},
		{"token id out of vocabulary", "/v1/completions", `{"prompt":[1,999999]}`, 400, "BadRequestError", "Token id 999999 is out of vocabulary (parameter=prompt_token_ids, value=999999)", "prompt_token_ids"},
		{"max_tokens not an integer", "/v1/completions", `{"prompt":"a","max_tokens":"abc"}`, 400, "Bad Request",
			"1 validation error:\n  {'type': 'int_parsing', 'loc': ('body', 'max_tokens'), 'msg': 'Input should be a valid integer, unable to parse string as an integer', 'input': 'abc'}", "body.max_tokens"},
		{"max_tokens fractional", "/v1/completions", `{"prompt":"a","max_tokens":2.5}`, 400, "Bad Request", "~'type': 'int_from_float'", "body.max_tokens"},
		{"temperature not a number", "/v1/completions", `{"prompt":"a","temperature":"hot"}`, 400, "Bad Request", "~'type': 'float_parsing'", "body.temperature"},
		{"echo not a boolean", "/v1/completions", `{"prompt":"a","echo":"maybe"}`, 400, "Bad Request", "~'type': 'bool_parsing'", "body.echo"},
		{"unknown model", "/v1/completions", `{"model":"gpt-9","prompt":"a"}`, 404, "NotFoundError", "The model `gpt-9` does not exist.", "model"},
		{"prompt too long", "/v1/completions", `{"prompt":` + long + `}`, 400, "BadRequestError",
			"You passed 250 input tokens and requested 16 output tokens. However, the model's context length is only 256 tokens, resulting in a maximum input length of 240 tokens. Please reduce the length of the input prompt. (parameter=input_tokens, value=250)",
			"input_tokens"},
		{"max_tokens above the model length", "/v1/completions", `{"prompt":"a","max_tokens":1000}`, 400, "BadRequestError",
			"max_tokens=1000 cannot be greater than max_model_len=max_total_tokens=256. Please request fewer output tokens. (parameter=max_tokens, value=1000)", "max_tokens"},
		{"max_tokens 0 without echo", "/v1/completions", `{"prompt":"a","max_tokens":0}`, 400, "BadRequestError", "max_tokens must be at least 1, got 0. (parameter=max_tokens, value=0)", "max_tokens"},
		{"logprobs above the cap", "/v1/completions", `{"prompt":"a","logprobs":21}`, 400, "BadRequestError",
			"Requested sample logprobs of 21, which is greater than max allowed: 20 (parameter=logprobs, value=21)", "logprobs"},
		{"prompt_logprobs above the cap", "/v1/completions", `{"prompt":"a","prompt_logprobs":21}`, 400, "BadRequestError",
			"Requested prompt logprobs of 21, which is greater than max allowed: 20 (parameter=prompt_logprobs, value=21)", "prompt_logprobs"},
		{"prompt_logprobs -1 is the vocabulary", "/v1/completions", `{"prompt":"a","prompt_logprobs":-1}`, 400, "BadRequestError",
			"Requested prompt logprobs of 151936, which is greater than max allowed: 20 (parameter=prompt_logprobs, value=151936)", "prompt_logprobs"},
		{"greedy n>1", "/v1/completions", `{"prompt":"a","n":2,"temperature":0}`, 400, "BadRequestError", "n must be 1 when using greedy sampling, got 2.", nil},
		{"n zero", "/v1/completions", `{"prompt":"a","n":0}`, 400, "BadRequestError", "n must be at least 1, got 0. (parameter=n, value=0)", "n"},
		{"n null", "/v1/completions", `{"prompt":"a","n":null}`, 400, "Bad Request", "~'type': 'int_type'", "body.n"},
		{"top_p zero", "/v1/completions", `{"prompt":"a","top_p":0}`, 400, "BadRequestError", "top_p must be in (0, 1], got 0.0. (parameter=top_p, value=0.0)", "top_p"},
		{"top_k below -1", "/v1/completions", `{"prompt":"a","top_k":-2}`, 400, "BadRequestError", "top_k must be 0 (disable), or at least 1, got -2.", nil},
		{"negative temperature", "/v1/completions", `{"prompt":"a","temperature":-1}`, 400, "BadRequestError", "temperature must be non-negative, got -1.0. (parameter=temperature, value=-1.0)", "temperature"},
		{"empty stop string", "/v1/completions", `{"prompt":"a","stop":["x",""]}`, 400, "BadRequestError", "stop cannot contain an empty string.", nil},
		{"min_tokens above max_tokens", "/v1/completions", `{"prompt":"a","min_tokens":5,"max_tokens":4}`, 400, "BadRequestError", "min_tokens must be less than or equal to max_tokens=4, got 5.", nil},
		{"penalty not implemented", "/v1/completions", `{"prompt":"a","repetition_penalty":1.2}`, 400, "BadRequestError", "~repetition_penalty is not supported", "repetition_penalty"},
		{"suffix", "/v1/completions", `{"prompt":"a","suffix":"b"}`, 400, "BadRequestError", "~suffix is not currently supported", "suffix"},
		{"chat: top_logprobs without logprobs", "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"top_logprobs":2}`, 400, "Bad Request", "~when using `top_logprobs`, `logprobs` must be set to true.", "top_logprobs"},
		{"chat: top_logprobs above the cap", "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"logprobs":true,"top_logprobs":21}`, 400, "BadRequestError",
			"Requested sample logprobs of 21, which is greater than max allowed: 20 (parameter=logprobs, value=21)", "logprobs"},
		{"chat: no messages", "/v1/chat/completions", `{"model":"qwen3-test"}`, 400, "Bad Request", "~'type': 'missing', 'loc': ('body', 'messages')", "body.messages"},
		{"chat: message without role", "/v1/chat/completions", `{"messages":[{"content":"hi"}]}`, 400, "Bad Request", "~'loc': ('body', 'messages', 0, 'role')", "body.messages.0.role"},
		{"chat: max_completion_tokens too large", "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"max_completion_tokens":1000}`, 400, "BadRequestError",
			"max_completion_tokens=1000 cannot be greater than max_model_len=max_total_tokens=256. Please request fewer output tokens. (parameter=max_completion_tokens, value=1000)", "max_completion_tokens"},
		{"chat: auto tool choice", "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function","function":{"name":"f"}}]}`, 400, "BadRequestError",
			`"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set`, nil},
		{"chat: empty tools", "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"tools":[]}`, 400, "Bad Request", "~`tools` must not be an empty array.", "tools"},
		{"chat: both generation prompt and continue", "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"continue_final_message":true,"add_generation_prompt":true}`, 400, "Bad Request",
			"~Cannot set both `continue_final_message` and `add_generation_prompt` to True.", "body"},
		{"chat: untrusted template", "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"chat_template":"x"}`, 400, "BadRequestError", "~--trust-request-chat-template", nil},
		{"chat: image part", "/v1/chat/completions", `{"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"x"}}]}]}`, 400, "BadRequestError", "~image_url", nil},
	}
	for _, tt := range tests {
		fe := &fakeEngine{}
		ts, _ := newTestServer(t, fe, nil)
		status, body := post(t, ts.URL+tt.path, tt.body)
		if status != tt.status {
			t.Errorf("%s: status %d, want %d: %s", tt.name, status, tt.status, body)
			continue
		}
		if got := keysOf(t, body); !slices.Equal(got, []string{"error"}) {
			t.Errorf("%s: keys %v", tt.name, got)
			continue
		}
		if got := keysOf(t, rawField(t, body, "error")); !slices.Equal(got, []string{"message", "type", "param", "code"}) {
			t.Errorf("%s: error keys %v", tt.name, got)
		}
		e := decodeMap(t, body)["error"].(map[string]any)
		msg := e["message"].(string)
		if want, sub := strings.CutPrefix(tt.msg, "~"); sub && !strings.Contains(msg, want) || !sub && msg != tt.msg {
			t.Errorf("%s: message\n%q\nwant\n%q", tt.name, msg, tt.msg)
		}
		if e["type"] != tt.typ || e["code"] != float64(tt.status) || e["param"] != tt.param {
			t.Errorf("%s: type %v code %v param %v, want %v %v %v", tt.name, e["type"], e["code"], e["param"], tt.typ, tt.status, tt.param)
		}
		if n := len(fe.requests()); n != 0 {
			t.Errorf("%s: %d engine requests for a rejected request", tt.name, n)
		}
	}
}

func TestLaxValuesAccepted(t *testing.T) {
	for _, body := range []string{
		`{"prompt":"a","max_tokens":"5"}`,
		`{"prompt":"a","max_tokens":5.0}`,
		`{"prompt":"a","echo":"false","stream":false}`,
		`{"prompt":"a","model":"alias"}`,
		`{"prompt":"a","model":""}`,
		`{"prompt":"a","repetition_penalty":1.0,"presence_penalty":0,"frequency_penalty":0}`,
		`{"prompt":"a","unknown_field":{"x":[1,2]},"user":"me"}`,
		`{"prompt":"a","seed":-1}`,
		`{"prompt":"a","prompt_logprobs":0}`,
		`{"prompt":"a","prompt_logprobs":0,"stream":true}`,
		`{"prompt":"a","stream_options":{},"stream":false}`,
		`{"prompt":"a","response_format":{"type":"text"}}`,
	} {
		ts, _ := newTestServer(t, &fakeEngine{}, nil)
		if status, data := post(t, ts.URL+"/v1/completions", body); status != 200 {
			t.Errorf("%s: %d %s", body, status, data)
		}
	}
}

func TestEngineErrors(t *testing.T) {
	tests := []struct {
		name   string
		fe     *fakeEngine
		status int
		typ    string
	}{
		{"overloaded", &fakeEngine{submitErr: engine.ErrOverloaded}, 503, "Service Unavailable"},
		{"prompt too long for the cache", &fakeEngine{submitErr: fmt.Errorf("%w: needs 90 blocks, the cache has 64", engine.ErrPromptTooLong)}, 400, "BadRequestError"},
		{"invalid", &fakeEngine{submitErr: fmt.Errorf("%w: bad", engine.ErrInvalid)}, 400, "BadRequestError"},
		{"other", &fakeEngine{submitErr: errors.New("boom")}, 500, "InternalServerError"},
		{"failure mid-generation", &fakeEngine{failAfter: 2}, 500, "InternalServerError"},
		{"channel closed without a result", &fakeEngine{noFinish: true}, 500, "InternalServerError"},
	}
	for _, tt := range tests {
		ts, _ := newTestServer(t, tt.fe, nil)
		for _, path := range []string{"/v1/completions", "/v1/chat/completions"} {
			body := `{"prompt":"a","max_tokens":4}`
			if strings.Contains(path, "chat") {
				body = `{"messages":[{"role":"user","content":"a"}],"max_tokens":4}`
			}
			m := postJSON(t, ts.URL+path, body, tt.status)
			e := m["error"].(map[string]any)
			if e["type"] != tt.typ || e["code"] != float64(tt.status) {
				t.Errorf("%s %s: %v", tt.name, path, e)
			}
		}
	}
	// A Submit failing for the second of three choices cancels the first.
	fe := &fakeEngine{delay: 50 * time.Millisecond, failSubmitAt: 2}
	ts, _ := newTestServer(t, fe, nil)
	postJSON(t, ts.URL+"/v1/completions", `{"prompt":"a","n":3,"max_tokens":2}`, 503)
	waitFor(t, "the first choice cancelled", func() bool { return len(fe.cancelledIDs()) == 1 })
}
