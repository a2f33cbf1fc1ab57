package arena

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
)

// probeAll runs every probe against a healthy start.
func (s *start) probeAll(ctx context.Context, unprivileged bool) {
	s.probeProcesses(unprivileged)
	s.probeModels(ctx)
	s.probePromptLogprobs(ctx)
	s.probeStream(ctx)
	s.probeChat(ctx)
	s.probeMaxModelLen(ctx)
}

// probeProcesses checks the sockets the group listens on (127.0.0.1:PORT
// only), whether launch.sh exec'd the server, and the user it runs as.
func (s *start) probeProcesses(unprivileged bool) {
	pid := s.cmd.Process.Pid
	pids := groupProcesses(pid)
	if len(pids) == 0 {
		s.add("sockets", Warn, "no /proc here: the listening sockets, exec and user were not checked")
		return
	}
	ls, err := listeners(pids)
	if err != nil {
		s.add("sockets", Warn, "could not read the sockets: %v", err)
		return
	}
	var wrong []string
	serving, execd := false, false
	for _, l := range ls {
		if !l.ip.IsLoopback() {
			wrong = append(wrong, l.String())
		}
		if l.port == s.port && l.ip.Equal([]byte{127, 0, 0, 1}) {
			serving = true
			execd = execd || l.pid == pid
		}
	}
	switch {
	case len(wrong) > 0:
		s.add("loopback only", Violation, "listens on %s, beyond loopback: the arena gives loopback networking only and the "+
			"contract is 127.0.0.1:$PORT (pass --host 127.0.0.1)", strings.Join(wrong, ", "))
	case !serving:
		s.add("loopback only", Violation, "nothing in the process group listens on 127.0.0.1:%d (the PORT given), though /health answered there", s.port)
	default:
		s.add("loopback only", Pass, "listens on 127.0.0.1:$PORT and nowhere beyond loopback")
	}
	if serving {
		if execd {
			s.add("exec", Pass, "launch.sh exec'd the server: pid %d, started as bash, is %s", pid, procName(pid))
		} else {
			s.add("exec", Warn, "launch.sh did not exec the server (pid %d is %s); the arena then relies on stopping the process group", pid, procName(pid))
		}
	}
	if unprivileged {
		bad := []string{}
		for _, p := range pids {
			if uid := procUID(p); uid != nobody {
				bad = append(bad, fmt.Sprintf("pid %d uid %d", p, uid))
			}
		}
		if len(bad) > 0 {
			s.add("unprivileged user", Violation, "processes run as another user than nobody: %s", strings.Join(bad, ", "))
		} else {
			s.add("unprivileged user", Pass, "every process of the group runs as nobody (uid %d)", nobody)
		}
	}
}

// post sends a JSON request and returns the status and body.
func (s *start) post(ctx context.Context, path string, body any) (int, http.Header, []byte, error) {
	b, err := json.Marshal(body)
	if err != nil {
		return 0, nil, nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.base+path, bytes.NewReader(b))
	if err != nil {
		return 0, nil, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := s.client.Do(req)
	if err != nil {
		return 0, nil, nil, err
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	return resp.StatusCode, resp.Header, out, err
}

func (s *start) probeModels(ctx context.Context) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.base+"/v1/models", nil)
	resp, err := s.client.Do(req)
	if err != nil {
		s.add("/v1/models", Violation, "GET failed: %v", err)
		return
	}
	defer resp.Body.Close()
	var ml struct {
		Data []struct {
			ID          string `json:"id"`
			MaxModelLen *int   `json:"max_model_len"`
		} `json:"data"`
	}
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode != http.StatusOK || json.Unmarshal(b, &ml) != nil || len(ml.Data) == 0 {
		s.add("/v1/models", Violation, "HTTP %d, want vLLM's model list: %s", resp.StatusCode, tail(b, 300))
		return
	}
	m := ml.Data[0]
	switch {
	case m.ID != s.name:
		s.add("SERVED_NAME", Violation, "/v1/models lists %q first, not SERVED_NAME=%q: harnesses read data[0].id", m.ID, s.name)
	case m.MaxModelLen != nil && *m.MaxModelLen != s.maxLen:
		s.add("MAX_MODEL_LEN", Violation, "/v1/models reports max_model_len %d, not MAX_MODEL_LEN=%d", *m.MaxModelLen, s.maxLen)
	default:
		s.add("/v1/models", Pass, "lists %q with max_model_len %d", m.ID, s.maxLen)
	}
}

// promptIDs returns n token ids valid for a vocabulary of vocab, below the
// special tokens of the Qwen tokenizers.
func promptIDs(n, vocab int) []int {
	limit := 151_000
	if vocab > 0 && vocab < limit {
		limit = vocab
	}
	ids := make([]int, n)
	for i := range ids {
		ids[i] = (i*7919 + 13) % limit
	}
	return ids
}

func (s *start) probePromptLogprobs(ctx context.Context) {
	ids := promptIDs(12, s.vocab)
	const k = 1
	status, _, b, err := s.post(ctx, "/v1/completions", map[string]any{"model": s.name, "prompt": ids,
		"max_tokens": 1, "temperature": 0, "prompt_logprobs": k})
	if err == nil && status != http.StatusOK {
		err = fmt.Errorf("HTTP %d: %s", status, tail(b, 400))
	}
	if err == nil {
		err = validateCompletion(b, ids, k, s.name)
	}
	if err != nil {
		s.add("prompt_logprobs", Violation, "POST /v1/completions with prompt_logprobs (the KL probe's input): %v", err)
		return
	}
	s.add("prompt_logprobs", Pass, "/v1/completions returns prompt_logprobs for every prompt token, the actual token included")
}

// validateCompletion checks a /v1/completions answer to a prompt of ids
// with prompt_logprobs k as the KL probe reads it: vLLM's shape, a null
// first entry, then for each later prompt token a dict from token id to
// {logprob, rank, decoded_token} that holds the actual token and at most
// k others.
func validateCompletion(body []byte, ids []int, k int, name string) error {
	var r struct {
		Object  string `json:"object"`
		Model   string `json:"model"`
		Choices []struct {
			Text           *string                      `json:"text"`
			PromptLogprobs []map[string]json.RawMessage `json:"prompt_logprobs"`
		} `json:"choices"`
		Usage struct {
			PromptTokens int `json:"prompt_tokens"`
		} `json:"usage"`
	}
	if err := json.Unmarshal(body, &r); err != nil {
		return fmt.Errorf("the answer is not vLLM's completion JSON: %v", err)
	}
	switch {
	case r.Object != "text_completion":
		return fmt.Errorf("object %q, want text_completion", r.Object)
	case r.Model != name:
		return fmt.Errorf("model %q, want SERVED_NAME %q", r.Model, name)
	case len(r.Choices) == 0 || r.Choices[0].Text == nil:
		return fmt.Errorf("no choice with text")
	case r.Usage.PromptTokens != len(ids):
		return fmt.Errorf("usage.prompt_tokens %d for a prompt of %d token ids", r.Usage.PromptTokens, len(ids))
	}
	pl := r.Choices[0].PromptLogprobs
	if len(pl) != len(ids) {
		return fmt.Errorf("%d prompt_logprobs entries for %d prompt tokens", len(pl), len(ids))
	}
	if pl[0] != nil {
		return fmt.Errorf("the first prompt_logprobs entry is %v, want null (no token precedes it)", pl[0])
	}
	for i := 1; i < len(ids); i++ {
		if len(pl[i]) == 0 || len(pl[i]) > k+1 {
			return fmt.Errorf("prompt token %d: %d entries, want the actual token and at most %d more", i, len(pl[i]), k)
		}
		if _, ok := pl[i][strconv.Itoa(ids[i])]; !ok {
			return fmt.Errorf("prompt token %d (id %d) is missing from its own entry %v", i, ids[i], keys(pl[i]))
		}
		for id, raw := range pl[i] {
			var e struct {
				Logprob      *float64 `json:"logprob"`
				Rank         *int     `json:"rank"`
				DecodedToken *string  `json:"decoded_token"`
			}
			if err := json.Unmarshal(raw, &e); err != nil || e.Logprob == nil || e.Rank == nil || e.DecodedToken == nil {
				return fmt.Errorf("prompt token %d, id %s: %s, want {logprob, rank, decoded_token}", i, id, raw)
			}
			if math.IsNaN(*e.Logprob) || *e.Logprob > 1e-6 || *e.Rank < 1 {
				return fmt.Errorf("prompt token %d, id %s: logprob %v, rank %d: want a log-probability <= 0 and a rank >= 1", i, id, *e.Logprob, *e.Rank)
			}
		}
	}
	return nil
}

func keys(m map[string]json.RawMessage) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

func (s *start) probeStream(ctx context.Context) {
	status, h, b, err := s.post(ctx, "/v1/completions", map[string]any{"model": s.name, "prompt": promptIDs(6, s.vocab),
		"max_tokens": 4, "temperature": 0, "stream": true})
	if err == nil && status != http.StatusOK {
		err = fmt.Errorf("HTTP %d: %s", status, tail(b, 400))
	}
	if err == nil && !strings.HasPrefix(h.Get("Content-Type"), "text/event-stream") {
		err = fmt.Errorf("Content-Type %q, want text/event-stream", h.Get("Content-Type"))
	}
	if err == nil {
		err = validateSSE(b)
	}
	if err != nil {
		s.add("streaming", Violation, "POST /v1/completions with stream: %v", err)
		return
	}
	s.add("streaming", Pass, "/v1/completions streams server-sent events ending in data: [DONE]")
}

// validateSSE checks an event stream of completion chunks.
func validateSSE(b []byte) error {
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, 16<<20)
	chunks, done := 0, false
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			continue
		}
		data, ok := strings.CutPrefix(line, "data: ")
		switch {
		case !ok:
			return fmt.Errorf("line %q is not a data: event", tail([]byte(line), 100))
		case done:
			return fmt.Errorf("events after data: [DONE]")
		case data == "[DONE]":
			done = true
			continue
		}
		var c struct {
			Choices []json.RawMessage `json:"choices"`
		}
		if err := json.Unmarshal([]byte(data), &c); err != nil || c.Choices == nil {
			return fmt.Errorf("event %q is not a completion chunk", tail([]byte(data), 200))
		}
		chunks++
	}
	if chunks == 0 || !done {
		return fmt.Errorf("%d chunks, [DONE] seen: %v; want chunks ending in data: [DONE]", chunks, done)
	}
	return nil
}

func (s *start) probeChat(ctx context.Context) {
	status, _, b, err := s.post(ctx, "/v1/chat/completions", map[string]any{"model": s.name,
		"messages": []map[string]string{{"role": "user", "content": "Reply with one word."}}, "max_tokens": 8, "temperature": 0})
	if err == nil && status != http.StatusOK {
		err = fmt.Errorf("HTTP %d: %s", status, tail(b, 400))
	}
	var r struct {
		Object  string `json:"object"`
		Model   string `json:"model"`
		Choices []struct {
			Message struct {
				Role    string  `json:"role"`
				Content *string `json:"content"`
			} `json:"message"`
			FinishReason string `json:"finish_reason"`
		} `json:"choices"`
		Usage struct {
			PromptTokens int `json:"prompt_tokens"`
		} `json:"usage"`
	}
	if err == nil {
		if jerr := json.Unmarshal(b, &r); jerr != nil {
			err = fmt.Errorf("not vLLM's chat completion JSON: %v", jerr)
		} else if r.Object != "chat.completion" || r.Model != s.name || len(r.Choices) == 0 ||
			r.Choices[0].Message.Role != "assistant" || r.Choices[0].Message.Content == nil || r.Usage.PromptTokens <= 0 ||
			(r.Choices[0].FinishReason != "stop" && r.Choices[0].FinishReason != "length") {
			err = fmt.Errorf("want object chat.completion, model %q, an assistant message with content, finish_reason stop or length "+
				"and usage.prompt_tokens; got %s", s.name, tail(b, 400))
		}
	}
	if err != nil {
		s.add("/v1/chat/completions", Violation, "%v", err)
		return
	}
	s.add("/v1/chat/completions", Pass, "answers a chat with an assistant message (%d prompt tokens)", r.Usage.PromptTokens)
}

// probeMaxModelLen sends a prompt one token longer than MAX_MODEL_LEN,
// which vLLM refuses with a 400.
func (s *start) probeMaxModelLen(ctx context.Context) {
	ids := promptIDs(s.maxLen+1, s.vocab)
	status, _, b, err := s.post(ctx, "/v1/completions", map[string]any{"model": s.name, "prompt": ids, "max_tokens": 1})
	switch {
	case err != nil:
		s.add("MAX_MODEL_LEN", Violation, "a prompt of MAX_MODEL_LEN+1 = %d tokens: %v", len(ids), err)
	case status != http.StatusBadRequest:
		s.add("MAX_MODEL_LEN", Violation, "a prompt of MAX_MODEL_LEN+1 = %d tokens got HTTP %d, want vLLM's 400: "+
			"the server does not hold to MAX_MODEL_LEN=%d: %s", len(ids), status, s.maxLen, tail(b, 200))
	default:
		s.add("MAX_MODEL_LEN", Pass, "a prompt of MAX_MODEL_LEN+1 tokens is refused with 400")
	}
}
