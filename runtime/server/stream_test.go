package server

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/lowbit-ai/lowbit/runtime/engine"
)

func TestStreamCompletion(t *testing.T) {
	fe := &fakeEngine{}
	ts, _ := newTestServer(t, fe, nil)
	resp, err := http.Post(ts.URL+"/v1/completions", "application/json",
		strings.NewReader(`{"prompt":"Hi","max_tokens":3,"stream":true,"stream_options":{"include_usage":true}}`))
	if err != nil {
		t.Fatal(err)
	}
	data := readAll(t, resp)
	evs := sseEvents(t, data)
	if len(evs) != 5 { // 3 tokens, usage, [DONE]
		t.Fatalf("%d events: %q", len(evs), evs)
	}
	for i := 0; i < 3; i++ {
		raw := []byte(evs[i])
		if got := keysOf(t, raw); !slices.Equal(got, []string{"id", "object", "created", "model", "choices"}) {
			t.Errorf("chunk %d keys %v", i, got)
		}
		want := []string{"index", "text", "logprobs", "finish_reason", "stop_reason", "prompt_token_ids", "token_ids"}
		if got := keysOf(t, rawField(t, raw, "choices", 0)); !slices.Equal(got, want) {
			t.Errorf("chunk %d choice keys %v", i, got)
		}
		c := choiceOf(decodeMap(t, raw), 0)
		wantFinish := any(nil)
		if i == 2 {
			wantFinish = "length"
		}
		if c["text"] != string(rune('a'+i)) || c["finish_reason"] != wantFinish {
			t.Errorf("chunk %d: %v", i, c)
		}
	}
	usage := []byte(evs[3])
	if got := keysOf(t, usage); !slices.Equal(got, []string{"id", "object", "created", "model", "choices", "usage"}) {
		t.Errorf("usage chunk keys %v", got)
	}
	if got := string(rawField(t, usage, "choices")); got != "[]" {
		t.Errorf("usage chunk choices %s", got)
	}
	if got := string(rawField(t, usage, "usage")); got != `{"prompt_tokens":1,"total_tokens":4,"completion_tokens":3}` {
		t.Errorf("usage %s", got)
	}
}

func readAll(t *testing.T, resp *http.Response) []byte {
	t.Helper()
	defer resp.Body.Close()
	var b strings.Builder
	sc := bufio.NewReader(resp.Body)
	for {
		line, err := sc.ReadString('\n')
		b.WriteString(line)
		if err != nil {
			break
		}
	}
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, b.String())
	}
	return []byte(b.String())
}

func TestStreamOptions(t *testing.T) {
	tests := []struct {
		name       string
		extra      string
		usageChunk bool
		continuous bool
	}{
		{"no stream_options", ``, false, false},
		{"include_usage false", `,"stream_options":{"include_usage":false}`, false, false},
		{"empty stream_options include usage", `,"stream_options":{}`, true, false},
		{"continuous usage", `,"stream_options":{"include_usage":true,"continuous_usage_stats":true}`, true, true},
	}
	for _, tt := range tests {
		ts, _ := newTestServer(t, &fakeEngine{}, nil)
		chunks := streamChunks(t, ts.URL+"/v1/completions", `{"prompt":"Hi","max_tokens":2,"stream":true`+tt.extra+`}`)
		last := chunks[len(chunks)-1]
		if got := len(last["choices"].([]any)) == 0; got != tt.usageChunk {
			t.Errorf("%s: usage chunk %v", tt.name, got)
		}
		for i, c := range chunks[:2] {
			u, has := c["usage"]
			if has != tt.continuous {
				t.Errorf("%s: chunk %d usage %v", tt.name, i, u)
			} else if has && u.(map[string]any)["completion_tokens"] != float64(i+1) {
				t.Errorf("%s: chunk %d usage %v", tt.name, i, u)
			}
		}
	}
}

// TestStreamUTF8 streams text whose characters span several tokens with
// the real tokenizer: no chunk carries half a character, every output
// still gets its chunk (empty text while a character is incomplete, as
// vLLM sends), and the chunks add up to the text.
func TestStreamUTF8(t *testing.T) {
	const text = "a𓀀b🫠 ᚠ猫𠀀!"
	ids := qwen3(t).Encode(text)
	fe := &fakeEngine{tokens: scripted(t, text)}
	ts, _ := newTestServer(t, fe, nil)
	for _, path := range []string{"/v1/completions", "/v1/chat/completions"} {
		body := `{"prompt":"x","stream":true,"max_tokens":50}`
		if strings.Contains(path, "chat") {
			body = `{"messages":[{"role":"user","content":"x"}],"stream":true,"max_tokens":50}`
		}
		chunks := streamChunks(t, ts.URL+path, body)
		var got strings.Builder
		n := 0
		for _, c := range chunks {
			ch := choiceOf(c, 0)
			var piece string
			if d, ok := ch["delta"].(map[string]any); ok {
				if d["role"] != nil {
					continue
				}
				piece = d["content"].(string)
			} else {
				piece = ch["text"].(string)
			}
			n++
			if !utf8.ValidString(piece) || strings.ContainsRune(piece, utf8.RuneError) {
				t.Errorf("%s: chunk %q splits a character", path, piece)
			}
			got.WriteString(piece)
		}
		if got.String() != text || n != len(ids) {
			t.Errorf("%s: %d chunks for %d tokens, text %q", path, n, len(ids), got.String())
		}
	}
}

// TestStreamStopHoldBack: a stream never sends characters that could
// begin a stop string, and the text sent equals the non-streaming text.
func TestStreamStopHoldBack(t *testing.T) {
	const text = "The quick brown fox jumps over"
	tests := []struct {
		stop, want string
		include    bool
	}{
		{`"ck bro"`, "The qui", false},
		{`["over","ox"]`, "The quick brown f", false},
		{`"ck bro"`, "The quick bro", true},
		{`"zzzz"`, text, false},
	}
	for _, tt := range tests {
		fe := &fakeEngine{tokens: scripted(t, text)}
		ts, _ := newTestServer(t, fe, nil)
		body := fmt.Sprintf(`{"prompt":"x","stream":true,"stop":%s,"include_stop_str_in_output":%v}`, tt.stop, tt.include)
		chunks := streamChunks(t, ts.URL+"/v1/completions", body)
		var got strings.Builder
		for _, c := range chunks {
			got.WriteString(choiceOf(c, 0)["text"].(string))
			if !strings.HasPrefix(tt.want, got.String()) {
				t.Errorf("stop %s: sent %q, beyond %q", tt.stop, got.String(), tt.want)
			}
		}
		if got.String() != tt.want {
			t.Errorf("stop %s: streamed %q, want %q", tt.stop, got.String(), tt.want)
		}
	}
}

func TestStreamNoEmptyChunkBeforeFirstToken(t *testing.T) {
	fe := &fakeEngine{emptyOut: true}
	ts, _ := newTestServer(t, fe, nil)
	chunks := streamChunks(t, ts.URL+"/v1/completions", `{"prompt":"x","stream":true,"max_tokens":2}`)
	if len(chunks) != 2 || choiceOf(chunks[0], 0)["text"] != "a" {
		t.Errorf("chunks %v", chunks)
	}
}

func TestStreamNChoicesAndEcho(t *testing.T) {
	fe := &fakeEngine{}
	ts, _ := newTestServer(t, fe, nil)
	chunks := streamChunks(t, ts.URL+"/v1/completions", `{"prompt":"Hi","stream":true,"max_tokens":2,"n":2,"echo":true,"logprobs":1}`)
	texts := map[float64]string{}
	finished := map[float64]bool{}
	for _, c := range chunks {
		ch := choiceOf(c, 0)
		i := ch["index"].(float64)
		texts[i] += ch["text"].(string)
		if ch["finish_reason"] != nil {
			finished[i] = true
		}
		lp := ch["logprobs"].(map[string]any)
		if len(lp["tokens"].([]any)) == 0 {
			t.Errorf("chunk without logprobs tokens: %v", ch)
		}
	}
	for i := 0.0; i < 2; i++ {
		if texts[i] != "Hiab" || !finished[i] {
			t.Errorf("choice %v: %q finished %v", i, texts[i], finished[i])
		}
	}
}

func TestStreamEngineError(t *testing.T) {
	fe := &fakeEngine{failAfter: 2}
	ts, _ := newTestServer(t, fe, nil)
	for _, path := range []string{"/v1/completions", "/v1/chat/completions"} {
		body := `{"prompt":"x","stream":true,"max_tokens":5}`
		if strings.Contains(path, "chat") {
			body = `{"messages":[{"role":"user","content":"x"}],"stream":true,"max_tokens":5}`
		}
		resp, err := http.Post(ts.URL+path, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		evs := sseEvents(t, readAll(t, resp))
		errEv := evs[len(evs)-2]
		var m map[string]any
		json.Unmarshal([]byte(errEv), &m)
		e, ok := m["error"].(map[string]any)
		if !ok || e["code"] != 500.0 || e["type"] != "InternalServerError" || !strings.Contains(e["message"].(string), "fake failure") {
			t.Errorf("%s: error event %q", path, errEv)
		}
	}
}

// TestStreamCancelReachesEngine: a client that disconnects mid-stream
// cancels the engine request.
func TestStreamCancelReachesEngine(t *testing.T) {
	for _, path := range []string{"/v1/completions", "/v1/chat/completions"} {
		fe := &fakeEngine{delay: 10 * time.Millisecond}
		ts, _ := newTestServer(t, fe, nil)
		ctx, cancel := context.WithCancel(context.Background())
		body := `{"prompt":"x","stream":true,"max_tokens":200}`
		if strings.Contains(path, "chat") {
			body = `{"messages":[{"role":"user","content":"x"}],"stream":true,"max_tokens":200}`
		}
		req, _ := http.NewRequestWithContext(ctx, "POST", ts.URL+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		lr := lineReader{bufio.NewReader(resp.Body)}
		for i := 0; i < 3; i++ {
			if _, err := lr.next(); err != nil {
				t.Fatal(err)
			}
		}
		cancel()
		resp.Body.Close()
		waitFor(t, path+": engine request cancelled", func() bool { return len(fe.cancelledIDs()) == 1 })
	}
}

// TestNonStreamCancelReachesEngine: the same for a client that gives up
// waiting for a non-streaming answer.
func TestNonStreamCancelReachesEngine(t *testing.T) {
	fe := &fakeEngine{delay: 20 * time.Millisecond}
	ts, _ := newTestServer(t, fe, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "POST", ts.URL+"/v1/completions", strings.NewReader(`{"prompt":"x","max_tokens":200,"n":2}`))
	req.Header.Set("Content-Type", "application/json")
	if resp, err := http.DefaultClient.Do(req); err == nil {
		resp.Body.Close()
		t.Fatal("request finished before the client gave up")
	}
	waitFor(t, "both engine requests cancelled", func() bool { return len(fe.cancelledIDs()) == 2 })
}

func TestConcurrentClients(t *testing.T) {
	fe := &fakeEngine{delay: time.Millisecond}
	ts, _ := newTestServer(t, fe, nil)
	var wg sync.WaitGroup
	errs := make(chan string, 64)
	for i := 0; i < 24; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n := 1 + i%5
			stream := i%2 == 0
			body := fmt.Sprintf(`{"prompt":"client %d","max_tokens":%d,"stream":%v}`, i, n, stream)
			resp, err := http.Post(ts.URL+"/v1/completions", "application/json", strings.NewReader(body))
			if err != nil {
				errs <- err.Error()
				return
			}
			data := readAllNoFatal(resp)
			want := "abcdefghij"[:n]
			var got string
			if stream {
				for _, ev := range strings.Split(strings.TrimSpace(data), "\n\n") {
					p := strings.TrimPrefix(ev, "data: ")
					if p == "[DONE]" {
						continue
					}
					var m map[string]any
					json.Unmarshal([]byte(p), &m)
					got += choiceOf(m, 0)["text"].(string)
				}
			} else {
				var m map[string]any
				json.Unmarshal([]byte(data), &m)
				got = choiceOf(m, 0)["text"].(string)
			}
			if got != want {
				errs <- fmt.Sprintf("client %d: %q, want %q", i, got, want)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}

func readAllNoFatal(resp *http.Response) string {
	defer resp.Body.Close()
	var b strings.Builder
	r := bufio.NewReader(resp.Body)
	for {
		line, err := r.ReadString('\n')
		b.WriteString(line)
		if err != nil {
			return b.String()
		}
	}
}

// TestStreamMultiTokenOutputs: an engine step may deliver several tokens
// at once; the stream sends one chunk per step and stop strings still
// apply within it.
func TestStreamMultiTokenOutputs(t *testing.T) {
	fe := &fakeEngine{chunk: 3, tokens: func(*engine.Request) []int { return []int{64, 65, 66, 67, 68, 69, 70} }}
	ts, _ := newTestServer(t, fe, nil)
	chunks := streamChunks(t, ts.URL+"/v1/completions", `{"prompt":"x","stream":true,"stop":"e"}`)
	var text string
	for _, c := range chunks {
		text += choiceOf(c, 0)["text"].(string)
	}
	if text != "abcd" || len(chunks) != 2 {
		t.Errorf("text %q in %d chunks", text, len(chunks))
	}
}
