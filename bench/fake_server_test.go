package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lowbit-ai/lowbit/internal/qwen3tok"
	"github.com/lowbit-ai/lowbit/tokenizer"
)

var qwen struct {
	once sync.Once
	tok  *tokenizer.Tokenizer
	err  error
}

// qwenTok is the embedded Qwen3 tokenizer, loaded once.
func qwenTok(t testing.TB) *tokenizer.Tokenizer {
	t.Helper()
	qwen.once.Do(func() {
		files, err := qwen3tok.Files()
		if err != nil {
			qwen.err = err
			return
		}
		qwen.tok, qwen.err = tokenizer.Load(files["tokenizer.json"])
		if qwen.err == nil {
			qwen.err = qwen.tok.SetConfig(files["tokenizer_config.json"])
		}
	})
	if qwen.err != nil {
		t.Fatal(qwen.err)
	}
	return qwen.tok
}

// script is what the fake server answers to one prompt: the first chunk
// after ttft, then one chunk per gap, then (after usageDelay) a usage
// chunk when usage > 0, then [DONE]. raw, when set, replaces all of it
// with verbatim bytes; status, when set, refuses the request.
type script struct {
	ttft       time.Duration
	gaps       []time.Duration
	texts      []string // len(gaps)+1 chunk texts
	usage      int
	usageDelay time.Duration
	raw        string
	status     int
}

// fakeServer is an OpenAI server that streams scripted chunks with
// scripted delays, keyed by the prompt (or a chat's last user text).
type fakeServer struct {
	t       testing.TB
	scripts map[string]script
	mu      sync.Mutex
	bodies  []map[string]any
}

func (f *fakeServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/v1/models" {
		fmt.Fprint(w, `{"object":"list","data":[{"id":"fake-model","object":"model"}]}`)
		return
	}
	var body map[string]any
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
		http.Error(w, err.Error(), 400)
		return
	}
	f.mu.Lock()
	f.bodies = append(f.bodies, body)
	f.mu.Unlock()
	chat := r.URL.Path == "/v1/chat/completions"
	key, _ := body["prompt"].(string)
	if chat {
		msgs, _ := body["messages"].([]any)
		last, _ := msgs[len(msgs)-1].(map[string]any)
		parts, _ := last["content"].([]any)
		part, _ := parts[0].(map[string]any)
		key, _ = part["text"].(string)
	}
	s, ok := f.scripts[key]
	if !ok {
		f.t.Errorf("fake server: no script for %q", key)
		http.Error(w, "no script", 500)
		return
	}
	if s.status != 0 {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(s.status)
		fmt.Fprintf(w, `{"error":{"message":"scripted refusal","type":"BadRequestError","param":null,"code":%d}}`, s.status)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(200)
	fl := w.(http.Flusher)
	send := func(d time.Duration, raw string) {
		time.Sleep(d)
		fmt.Fprint(w, raw)
		fl.Flush()
	}
	if s.raw != "" {
		send(s.ttft, s.raw)
		return
	}
	for i, text := range s.texts {
		d := s.ttft
		if i > 0 {
			d = s.gaps[i-1]
		}
		send(d, chunkEvent(chat, i == 0, text))
	}
	if s.usage > 0 {
		send(s.usageDelay, fmt.Sprintf(`data: {"id":"x","choices":[],"usage":{"prompt_tokens":7,"completion_tokens":%d,"total_tokens":%d}}`+"\n\n", s.usage, s.usage+7))
	}
	send(0, "data: [DONE]\n\n")
}

func chunkEvent(chat, first bool, text string) string {
	t, _ := json.Marshal(text)
	if !chat {
		return fmt.Sprintf(`data: {"id":"cmpl-1","object":"text_completion","choices":[{"index":0,"text":%s,"finish_reason":null}],"usage":null}`+"\n\n", t)
	}
	if first {
		// vLLM's first chat chunk: the role, empty content.
		return `data: {"id":"chatcmpl-1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}` + "\n\n"
	}
	return fmt.Sprintf(`data: {"id":"chatcmpl-1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":%s}}]}`+"\n\n", t)
}

// pipeNet is an in-memory network (net.Pipe) for an http.Server and a
// client inside a synctest bubble, where time is virtual and advances
// only while every goroutine sleeps or waits on the bubble's channels.
type pipeNet struct {
	conns  chan net.Conn
	closed chan struct{}
	once   sync.Once
}

func newPipeNet() *pipeNet {
	return &pipeNet{conns: make(chan net.Conn), closed: make(chan struct{})}
}

func (p *pipeNet) Accept() (net.Conn, error) {
	select {
	case c := <-p.conns:
		return c, nil
	case <-p.closed:
		return nil, net.ErrClosed
	}
}

func (p *pipeNet) Close() error   { p.once.Do(func() { close(p.closed) }); return nil }
func (p *pipeNet) Addr() net.Addr { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 80} }

func (p *pipeNet) dial(ctx context.Context, _, _ string) (net.Conn, error) {
	server, client := net.Pipe()
	select {
	case p.conns <- server:
		return client, nil
	case <-p.closed:
		return nil, net.ErrClosed
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// serveInPipe starts h on an in-memory network and returns a client for
// it (URL http://fake) and a function that shuts both down.
func serveInPipe(h http.Handler) (*http.Client, func()) {
	pn := newPipeNet()
	srv := &http.Server{Handler: h}
	done := make(chan struct{})
	go func() { srv.Serve(pn); close(done) }()
	tr := &http.Transport{DialContext: pn.dial, DisableCompression: true, MaxIdleConnsPerHost: 64}
	return &http.Client{Transport: tr}, func() {
		srv.Close()
		tr.CloseIdleConnections()
		<-done
	}
}

// oneUser is a phase of single requests, one user each, all at time 0.
func oneUserEach(name string, max int, reqs ...RequestSpec) Phase {
	ph := Phase{PhaseInfo: PhaseInfo{Name: name, Group: name, MaxConcurrency: max, NumUsers: len(reqs), Requests: len(reqs)}}
	for _, r := range reqs {
		ph.Users = append(ph.Users, User{Sessions: []Session{{Steps: []Step{{Requests: []RequestSpec{r}}}}}})
	}
	return ph
}

// textOf joins a script's chunk texts.
func textOf(s script) string { return strings.Join(s.texts, "") }
