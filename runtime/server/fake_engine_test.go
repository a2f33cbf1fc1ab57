package server

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lowbit-ai/lowbit/internal/qwen3tok"
	"github.com/lowbit-ai/lowbit/runtime"
	"github.com/lowbit-ai/lowbit/runtime/engine"
	"github.com/lowbit-ai/lowbit/tokenizer"
	"github.com/lowbit-ai/lowbit/tokenizer/chat"
)

// fakeEngine is a deterministic Engine: each request generates a scripted
// token sequence, one token per Output (or chunk tokens per Output), with
// scripted log-probabilities, honouring MaxTokens, MinTokens and
// StopTokenIDs as the engine contract says, and ctx cancellation (it then
// ends the request with FinishAbort and records it).
type fakeEngine struct {
	mu           sync.Mutex
	tokens       func(r *engine.Request) []int // the tokens to generate; default: repeat a..j
	delay        time.Duration                 // before each Output
	chunk        int                           // tokens per Output (default 1)
	submitErr    error                         // Submit fails with it
	failSubmitAt int                           // > 0: that Submit (1-based) fails with ErrOverloaded
	failAfter    int                           // > 0: the Output after this many tokens carries an error
	noFinish     bool                          // close the channel without a final Output
	emptyOut     bool                          // the first Output carries no token (prefill only)
	submitted    []*engine.Request
	cancelled    []string // IDs of requests whose ctx was cancelled before they finished
	finished     []string
	stats        engine.Stats
	health       error
}

func (f *fakeEngine) Stats() engine.Stats {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.stats
}

func (f *fakeEngine) Health() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.health
}

func (f *fakeEngine) requests() []*engine.Request {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.submitted)
}

func (f *fakeEngine) cancelledIDs() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.cancelled)
}

// fakeLogprob is the scripted log-probability of token id at a position.
func fakeLogprob(id int) float32 { return -float32(id%7+1) / 4 }

// fakePosition scripts a position's logprobs: the actual token with rank
// 3, and top k ids 1000, 1001, ... with ranks 1..k; the actual token is
// among them when it is 1000 or 1001.
func fakePosition(id, k int) engine.PositionLogprobs {
	p := engine.PositionLogprobs{Token: engine.TokenLogprob{ID: id, Logprob: fakeLogprob(id), Rank: 3}}
	if id == 1000 || id == 1001 {
		p.Token.Rank = id - 999
	}
	for i := 0; i < k; i++ {
		lp := float32(-0.1 * float64(i+1))
		if i == 1 {
			lp = float32(math.Inf(-1)) // exercises the -9999.0 clamp
		}
		p.Top = append(p.Top, engine.TokenLogprob{ID: 1000 + i, Logprob: lp, Rank: i + 1})
	}
	return p
}

func (f *fakeEngine) Submit(ctx context.Context, r *engine.Request) (<-chan engine.Output, error) {
	f.mu.Lock()
	if f.submitErr != nil {
		err := f.submitErr
		f.mu.Unlock()
		return nil, err
	}
	if f.failSubmitAt > 0 && len(f.submitted)+1 == f.failSubmitAt {
		f.mu.Unlock()
		return nil, engine.ErrOverloaded
	}
	f.submitted = append(f.submitted, r)
	f.mu.Unlock()
	// The default script repeats "abcdefghij" (ids 64..73 are the
	// letters); a scripted list ends the request (length) at its end.
	toks := []int{64, 65, 66, 67, 68, 69, 70, 71, 72, 73}
	if f.tokens != nil {
		toks = f.tokens(r)
	}
	chunk := max(f.chunk, 1)
	ch := make(chan engine.Output) // unbuffered: the server must keep reading
	go func() {
		defer close(ch)
		abort := func() {
			f.mu.Lock()
			f.cancelled = append(f.cancelled, r.ID)
			f.mu.Unlock()
			select {
			case ch <- engine.Output{Finish: engine.FinishAbort}:
			case <-time.After(time.Second):
			}
		}
		first := true
		n := 0
		for {
			out := engine.Output{}
			if first {
				out.PromptTokens, out.CachedTokens = len(r.Prompt), len(r.Prompt)/2
				if r.PromptLogprobs >= 0 {
					out.PromptLogprobs = make([]*engine.PositionLogprobs, len(r.Prompt))
					for t := 1; t < len(r.Prompt); t++ {
						p := fakePosition(r.Prompt[t], r.PromptLogprobs)
						out.PromptLogprobs[t] = &p
					}
				}
			}
			for len(out.Tokens) < chunk && out.Finish == "" && !(first && f.emptyOut) {
				id := toks[n%len(toks)]
				n++
				out.Tokens = append(out.Tokens, id)
				if r.Logprobs >= 0 {
					out.Logprobs = append(out.Logprobs, fakePosition(id, r.Logprobs))
				}
				switch {
				case n >= r.MinTokens && slices.Contains(r.StopTokenIDs, id):
					out.Finish, out.StopToken = engine.FinishStop, id
				case n >= r.MaxTokens || f.tokens != nil && n >= len(toks):
					out.Finish = engine.FinishLength
				}
			}
			if f.failAfter > 0 && n > f.failAfter {
				out = engine.Output{Err: fmt.Errorf("engine: fake failure after %d tokens", f.failAfter)}
			}
			if f.noFinish && out.Finish != "" {
				return
			}
			if f.delay > 0 {
				select {
				case <-time.After(f.delay):
				case <-ctx.Done():
					abort()
					return
				}
			}
			// A cancelled request stops before its next output, as the
			// engine frees it at the next step.
			if ctx.Err() != nil {
				abort()
				return
			}
			select {
			case ch <- out:
			case <-ctx.Done():
				abort()
				return
			}
			first = false
			if out.Finish != "" || out.Err != nil {
				f.mu.Lock()
				f.finished = append(f.finished, r.ID)
				f.mu.Unlock()
				return
			}
		}
	}()
	return ch, nil
}

var (
	qwenOnce sync.Once
	qwenTok  *tokenizer.Tokenizer
	qwenErr  error
)

// qwen3 is the real Qwen3 tokenizer, loaded once.
func qwen3(tb testing.TB) *tokenizer.Tokenizer {
	tb.Helper()
	qwenOnce.Do(func() {
		files, err := qwen3tok.Files()
		if err != nil {
			qwenErr = err
			return
		}
		t, err := tokenizer.Load(files["tokenizer.json"])
		if err != nil {
			qwenErr = err
			return
		}
		if err := t.SetConfig(files["tokenizer_config.json"]); err != nil {
			qwenErr = err
			return
		}
		qwenTok = t
	})
	if qwenErr != nil {
		tb.Fatal(qwenErr)
	}
	return qwenTok
}

// testChatTemplate stands in for a Jinja template: fakeRender ignores it
// and formats as Qwen3's template does for plain messages.
const testChatTemplate = "{{ qwen3-like }}"

// fakeRender renders messages as Qwen3's template does for plain
// messages, and records the last input.
var lastChatInput struct {
	sync.Mutex
	in chat.Input
}

func fakeRender(tmpl string, in chat.Input) (string, error) {
	lastChatInput.Lock()
	lastChatInput.in = in
	lastChatInput.Unlock()
	var b strings.Builder
	if len(in.Tools) > 0 {
		b.WriteString("<|im_start|>system\n# Tools\n")
		for _, t := range in.Tools {
			j, _ := json.Marshal(t)
			b.Write(j)
			b.WriteString("\n")
		}
		b.WriteString("<|im_end|>\n")
	}
	for _, m := range in.Messages {
		fmt.Fprintf(&b, "<|im_start|>%s\n%s<|im_end|>\n", m["role"], m["content"])
	}
	if in.AddGenerationPrompt {
		b.WriteString("<|im_start|>assistant\n")
		if v, ok := in.Kwargs["enable_thinking"]; ok && (v == false || fmt.Sprintf("%s", v) == "false") {
			b.WriteString("<think>\n\n</think>\n\n")
		}
	}
	return b.String(), nil
}

// qwenDefaults are Qwen3-8B's generation_config sampling.
var qwenDefaults = runtime.SamplingOptions{Temperature: 0.6, TopK: 20, TopP: 0.95}

// newTestServer starts a server over fe on loopback.
func newTestServer(t *testing.T, fe *fakeEngine, mod func(*Options)) (*httptest.Server, *Server) {
	t.Helper()
	d := qwenDefaults
	opts := Options{
		Engine:           fe,
		Tokenizer:        qwen3(t),
		ChatTemplate:     testChatTemplate,
		RenderChat:       fakeRender,
		ServedModelNames: []string{"qwen3-test", "alias"},
		ModelRoot:        "/models/qwen3",
		MaxModelLen:      256,
		VocabSize:        qwen3tok.VocabSize,
		DefaultSampling:  &d,
		EOSIDs:           []int{qwen3tok.EOSChat, qwen3tok.EOSText},
		Version:          "0.0.0-test",
	}
	if mod != nil {
		mod(&opts)
	}
	s, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s)
	t.Cleanup(func() {
		ts.Close()
		s.Close()
	})
	return ts, s
}

// post sends body as JSON and returns the status and raw body.
func post(t *testing.T, url, body string) (int, []byte) {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, data
}

// postJSON posts and decodes the answer into a generic map.
func postJSON(t *testing.T, url, body string, wantStatus int) map[string]any {
	t.Helper()
	status, data := post(t, url, body)
	if status != wantStatus {
		t.Fatalf("POST %s %s: status %d, want %d; body %s", url, body, status, wantStatus, data)
	}
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatalf("POST %s: %v in %s", url, err, data)
	}
	return m
}

// sseEvents reads an SSE body into its data payloads, checking the framing
// ("data: <payload>\n\n", nothing else).
func sseEvents(t *testing.T, body []byte) []string {
	t.Helper()
	if !bytes.HasSuffix(body, []byte("data: [DONE]\n\n")) {
		t.Fatalf("stream does not end with data: [DONE]: %q", body)
	}
	var out []string
	for _, ev := range strings.Split(strings.TrimSuffix(string(body), "\n\n"), "\n\n") {
		if !strings.HasPrefix(ev, "data: ") || strings.Contains(ev, "\n") {
			t.Fatalf("malformed event %q", ev)
		}
		out = append(out, strings.TrimPrefix(ev, "data: "))
	}
	return out
}

// streamChunks posts a streaming request and returns its decoded chunks
// (without [DONE]).
func streamChunks(t *testing.T, url, body string) []map[string]any {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, data)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream; charset=utf-8" {
		t.Errorf("Content-Type %q", ct)
	}
	var chunks []map[string]any
	evs := sseEvents(t, data)
	for _, ev := range evs[:len(evs)-1] {
		var m map[string]any
		if err := json.Unmarshal([]byte(ev), &m); err != nil {
			t.Fatalf("chunk %q: %v", ev, err)
		}
		chunks = append(chunks, m)
	}
	return chunks
}

// keysOf returns the keys of the JSON object raw, in order.
func keysOf(t *testing.T, raw []byte) []string {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(raw))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		t.Fatalf("not an object: %s", raw)
	}
	var keys []string
	for dec.More() {
		k, err := dec.Token()
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, k.(string))
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			t.Fatal(err)
		}
	}
	return keys
}

// rawField extracts a nested field's raw JSON by path of keys and indices.
func rawField(t *testing.T, raw []byte, path ...any) []byte {
	t.Helper()
	cur := json.RawMessage(raw)
	for _, p := range path {
		switch k := p.(type) {
		case string:
			var m map[string]json.RawMessage
			if err := json.Unmarshal(cur, &m); err != nil {
				t.Fatalf("path %v: %v", path, err)
			}
			cur = m[k]
		case int:
			var l []json.RawMessage
			if err := json.Unmarshal(cur, &l); err != nil {
				t.Fatalf("path %v: %v", path, err)
			}
			cur = l[k]
		}
	}
	return cur
}

// lineReader reads SSE events one at a time from a live stream.
type lineReader struct{ r *bufio.Reader }

func (l lineReader) next() (string, error) {
	var ev strings.Builder
	for {
		line, err := l.r.ReadString('\n')
		if err != nil {
			return "", err
		}
		if line == "\n" {
			return ev.String(), nil
		}
		ev.WriteString(strings.TrimSuffix(line, "\n"))
	}
}

// waitFor polls cond for up to two seconds.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
