package bench

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"testing/iotest"
	"time"
)

func readAll(t testing.TB, r io.Reader) ([]string, error) {
	t.Helper()
	s := newSSEReader(r)
	var out []string
	for {
		d, err := s.next()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		out = append(out, string(d))
	}
}

func TestSSEReader(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     []string
	}{
		{"vLLM framing", "data: {\"a\":1}\n\ndata: [DONE]\n\n", []string{`{"a":1}`, "[DONE]"}},
		{"no space after data:", "data:{\"a\":1}\n\ndata:[DONE]\n\n", []string{`{"a":1}`, "[DONE]"}},
		{"CRLF lines", "data: x\r\n\r\ndata: y\r\n\r\n", []string{"x", "y"}},
		{"comments and fields skipped", ": ping\n\nevent: message\nid: 3\nretry: 10\ndata: x\n\n:\n\n", []string{"x"}},
		{"two data lines are two messages", "data: a\ndata: b\n\n", []string{"a", "b"}},
		{"last line without newline", "data: a\n\ndata: [DONE]", []string{"a", "[DONE]"}},
		{"surrounding space trimmed", "data:   a b  \n\n", []string{"a b"}},
		{"empty data", "data:\n\n", []string{""}},
		{"not data", "Data: a\n dat: b\n\n", nil},
		{"empty stream", "", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Byte at a time too: the reader must not depend on how the
			// network splits the stream.
			for _, r := range []io.Reader{strings.NewReader(tc.in), iotest.OneByteReader(strings.NewReader(tc.in))} {
				got, err := readAll(t, r)
				if err != nil || !slices.Equal(got, tc.want) {
					t.Errorf("got %q, %v; want %q", got, err, tc.want)
				}
			}
		})
	}
}

func TestParseChunk(t *testing.T) {
	c, err := parseChunk([]byte(`{"choices":[{"index":0,"delta":{"content":null,"reasoning_content":"think"}}]}`))
	if err != nil || c.text() != "think" {
		t.Errorf("reasoning chunk: %v, %v; want its reasoning counted as output, as vLLM", c, err)
	}
	c, err = parseChunk([]byte(`{"choices":[{"index":0,"text":"hi"}],"usage":{"prompt_tokens":3,"completion_tokens":1}}`))
	if err != nil || c.text() != "hi" || c.Usage.CompletionTokens != 1 {
		t.Errorf("chunk with continuous usage: %+v, %v", c, err)
	}
	if _, err := parseChunk([]byte(`{"error":{"message":"engine died","type":"InternalServerError","code":500}}`)); err == nil || !strings.Contains(err.Error(), "engine died") {
		t.Errorf("error object: %v; want an error with the server's message", err)
	}
	if _, err := parseChunk([]byte(`{"error":null,"choices":[]}`)); err != nil {
		t.Errorf("null error: %v", err)
	}
	if _, err := parseChunk([]byte(`{not json`)); err == nil {
		t.Error("broken JSON accepted")
	}
}

// TestClientStreams runs single requests against an httptest server that
// sends awkward but legal streams, and broken ones.
func TestClientStreams(t *testing.T) {
	tok := qwenTok(t)
	chunk := func(text string) string { return chunkEvent(false, false, text) }
	scripts := map[string]script{
		"framing": {raw: ": ping\n\n" + "data:" + strings.TrimPrefix(chunk("a"), "data: ") + "event: x\r\n" +
			strings.ReplaceAll(chunk("b"), "\n", "\r\n") + ": keepalive\n\n" +
			`data: {"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":2}}` + "\n\ndata: [DONE]\n\n"},
		"no done":          {raw: chunk("a") + chunk("b") + `data: {"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":2}}`},
		"error mid-stream": {raw: chunk("a") + `data: {"error":{"message":"out of KV blocks","type":"InternalServerError","param":null,"code":500}}` + "\n\ndata: [DONE]\n\n"},
		"no choices":       {raw: `data: {"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":0}}` + "\n\ndata: [DONE]\n\n"},
		"garbage":          {raw: chunk("a") + "data: {oops\n\n"},
		"refused":          {status: 400},
		"overloaded":       {status: 503},
	}
	srv := httptest.NewServer(&fakeServer{t: t, scripts: scripts})
	defer srv.Close()
	c := &client{http: srv.Client(), base: srv.URL, model: "m", tok: tok}
	for _, tc := range []struct {
		prompt  string
		ok      bool
		text    string
		itls    int
		errPart string
	}{
		{"framing", true, "ab", 1, ""},
		{"no done", true, "ab", 1, ""},
		{"error mid-stream", false, "a", 0, "out of KV blocks"},
		{"no choices", false, "", 0, "no first token"},
		{"garbage", false, "a", 0, "not JSON"},
		{"refused", false, "", 0, "HTTP 400 Bad Request: scripted refusal"},
		{"overloaded", false, "", 0, "HTTP 503"},
	} {
		rec := c.send(context.Background(), RequestSpec{Endpoint: Completions, Prompt: tc.prompt, MaxTokens: 2}, nil, false, time.Now())
		if rec.Success != tc.ok || rec.GeneratedText != tc.text || len(rec.ITL) != tc.itls || !strings.Contains(rec.Error, tc.errPart) {
			t.Errorf("%s: success %v, text %q, %d gaps, error %q; want %v, %q, %d, error with %q",
				tc.prompt, rec.Success, rec.GeneratedText, len(rec.ITL), rec.Error, tc.ok, tc.text, tc.itls, tc.errPart)
		}
		if tc.ok && (rec.OutputTokens != 2 || rec.OutputCounted || rec.ServerPrompt != 5) {
			t.Errorf("%s: output %d (counted %v), server prompt %d; want usage's 2 and 5", tc.prompt, rec.OutputTokens, rec.OutputCounted, rec.ServerPrompt)
		}
	}
	// The initial test request stops at a refusal rather than retrying it
	// for the whole ready timeout.
	w := &Workload{Spec: Spec{Name: "x", Scale: 1}, Phases: []Phase{oneUserEach("x", 0, RequestSpec{Endpoint: Completions, Prompt: "refused"})}}
	start := time.Now()
	_, err := Run(context.Background(), w, Options{URL: srv.URL, Model: "m", Tokenizer: tok, ReadyTimeout: time.Minute})
	if err == nil || !strings.Contains(err.Error(), "scripted refusal") || time.Since(start) > 30*time.Second {
		t.Errorf("Run against a refusing server: %v after %v; want the refusal at once", err, time.Since(start))
	}
	if _, err := Run(context.Background(), w, Options{URL: "localhost:8000", Tokenizer: tok}); err == nil || !strings.Contains(err.Error(), "http://127.0.0.1:8000") {
		t.Errorf("URL without a scheme: %v; want advice", err)
	}
}

// FuzzSSE feeds arbitrary streams to the reader and the chunk parser,
// which take outside input: neither may panic, and every payload is one
// trimmed line.
func FuzzSSE(f *testing.F) {
	for _, s := range []string{
		"data: {\"choices\":[{\"text\":\"a\"}]}\n\ndata: [DONE]\n\n",
		": ping\r\n\r\ndata:{\"error\":{\"message\":\"x\"}}\n\n",
		"data: {\"choices\":[{\"delta\":{\"content\":\"x\"}}],\"usage\":{\"completion_tokens\":3}}",
		"data: {\"choices\":[{}]}\n\n", "data: {\"error\":\"s\"}\n", "data: null\n\n", "data: []\n\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		r := newSSEReader(bytes.NewReader(data))
		for {
			d, err := r.next()
			if err != nil {
				if !errors.Is(err, io.EOF) {
					t.Fatalf("reader error %v on in-memory input", err)
				}
				return
			}
			if bytes.ContainsAny(d, "\n") || !bytes.Equal(d, bytes.TrimSpace(d)) {
				t.Fatalf("payload %q spans lines or is untrimmed", d)
			}
			if c, err := parseChunk(d); err == nil && len(c.Choices) > 0 {
				_ = c.text()
			}
		}
	})
}
