package server

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/lowbit-ai/lowbit/runtime/engine"
	"github.com/lowbit-ai/lowbit/tokenizer"
)

// generation is a request's choices in flight.
type generation struct {
	choices []*choice
	events  chan event
	quit    chan struct{}
	stop    func() bool // unregisters the server-close hook
}

// start submits one engine request per choice and starts their readers.
// prompts[i] is choice i's prompt. If any Submit fails, the choices
// already submitted are cancelled and the error is returned.
func (s *Server) start(ctx context.Context, reqs []*engine.Request, prompts []*promptIn, sp *stopSpec, arrival time.Time) (*generation, *apiError) {
	// Every choice ends when the client goes away (the request context) or
	// the server closes.
	ctx, cancel := context.WithCancel(ctx)
	g := &generation{events: make(chan event, 16*len(reqs)), quit: make(chan struct{})}
	g.stop = context.AfterFunc(s.baseCtx, cancel)
	for i, r := range reqs {
		cctx, ccancel := context.WithCancel(ctx)
		ch, err := s.opts.Engine.Submit(cctx, r)
		if err != nil {
			ccancel()
			if errors.Is(err, engine.ErrClosed) {
				s.engineClosed.Store(true)
			}
			g.close()
			cancel()
			return nil, engineError(err)
		}
		g.choices = append(g.choices, &choice{index: i, prompt: prompts[i], req: r, ch: ch,
			ctx: cctx, cancel: ccancel, dec: tokenizer.NewStreamDecoder(s.tok, sp.skipSpecial)})
	}
	for _, c := range g.choices {
		go s.run(c, sp, arrival, g.events, g.quit)
	}
	return g, nil
}

// close stops listening and cancels every choice still running; their
// readers drain the engine channels in the background.
func (g *generation) close() {
	select {
	case <-g.quit:
		return
	default:
	}
	close(g.quit)
	for _, c := range g.choices {
		c.cancel()
	}
	if g.stop != nil {
		g.stop()
	}
}

// wait collects every choice's final event; false if ctx ended first (the
// client went away).
func (g *generation) wait(ctx context.Context) bool {
	left := len(g.choices)
	for left > 0 {
		select {
		case ev := <-g.events:
			if ev.done {
				left--
			}
		case <-ctx.Done():
			return false
		}
	}
	return true
}

// firstError is the first failed choice's error, if any.
func (g *generation) firstError() error {
	for _, c := range g.choices {
		if c.err != nil {
			return c.err
		}
	}
	return nil
}

// sse writes server-sent events: "data: <json>\n\n" each, flushed at
// once, and the terminal "data: [DONE]\n\n".
type sse struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	started bool
	failed  bool
}

func newSSE(w http.ResponseWriter) *sse {
	return &sse{w: w, rc: http.NewResponseController(w)}
}

func (e *sse) header() {
	if e.started {
		return
	}
	e.started = true
	h := e.w.Header()
	h.Set("Content-Type", "text/event-stream; charset=utf-8")
	h.Set("Cache-Control", "no-cache")
	e.w.WriteHeader(http.StatusOK)
}

// data sends one event with v's JSON; a failed write (the client is gone)
// makes the rest no-ops.
func (e *sse) data(v any) {
	e.raw(marshal(v))
}

func (e *sse) raw(b []byte) {
	if e.failed {
		return
	}
	e.header()
	buf := make([]byte, 0, len(b)+8)
	buf = append(buf, "data: "...)
	buf = append(buf, b...)
	buf = append(buf, "\n\n"...)
	if _, err := e.w.Write(buf); err != nil {
		e.failed = true
		return
	}
	if err := e.rc.Flush(); err != nil {
		e.failed = true
	}
}

func (e *sse) done() {
	e.raw([]byte("[DONE]"))
}

// streamError sends an error event, as vLLM does when generation fails
// mid-stream: {"error": {...}}.
func (e *sse) streamError(ae *apiError) {
	e.data(ae.body())
}
