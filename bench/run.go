package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/schollz/progressbar/v3"

	"github.com/lowbit-ai/lowbit/tokenizer"
)

// Options control Run.
type Options struct {
	// URL is the server's base URL (vLLM's --base-url), e.g.
	// http://127.0.0.1:8000; the OpenAI paths are appended.
	URL string
	// Model is the model name requests carry; "" takes the first of GET
	// /v1/models.
	Model string
	// Tokenizer counts output tokens when a server sends no usage (the
	// workload was built with it too); TokenizerName is recorded.
	Tokenizer     *tokenizer.Tokenizer
	TokenizerName string
	// HTTPClient sends the requests; nil is a client that keeps
	// connections and allows a request six hours, as vLLM's.
	HTTPClient *http.Client
	// ReadyTimeout is how long the first request (vLLM's initial test run)
	// is retried while the server is unreachable or answers 5xx; 0 tries
	// once.
	ReadyTimeout time.Duration
	// Warmups are requests (copies of the first) sent before measuring.
	Warmups int
	// Progress receives a progress bar (nil: none).
	Progress io.Writer
}

// Run replays w against the server: the initial test request, the
// warmups, then each phase in turn.
func Run(ctx context.Context, w *Workload, o Options) (*Result, error) {
	if o.Tokenizer == nil {
		return nil, errors.New("bench: Options.Tokenizer is nil")
	}
	u, err := url.Parse(o.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("bench: URL %q: want the server's base URL, e.g. http://127.0.0.1:8000", o.URL)
	}
	hc := o.HTTPClient
	if hc == nil {
		// vLLM's client allows a request six hours.
		hc = &http.Client{Timeout: 6 * time.Hour, Transport: &http.Transport{Proxy: http.ProxyFromEnvironment,
			MaxIdleConnsPerHost: 4096, DisableCompression: true}}
	}
	c := &client{http: hc, base: strings.TrimRight(o.URL, "/"), model: o.Model, tok: o.Tokenizer}
	if len(w.Phases) == 0 || w.Requests() == 0 {
		return nil, errors.New("bench: the workload has no requests")
	}
	if err := c.ready(ctx, w, o.ReadyTimeout); err != nil {
		return nil, err
	}
	first := firstRequest(w)
	for range o.Warmups {
		if rec := c.send(ctx, first, nil, w.Phases[0].IgnoreEOS, time.Now()); !rec.Success {
			return nil, fmt.Errorf("bench: warmup request failed: %s", rec.Error)
		}
	}
	res := &Result{Format: ResultFormat, Spec: w.Spec, URL: o.URL, Model: c.model,
		Tokenizer: o.TokenizerName, Date: time.Now().UTC().Format(time.RFC3339)}
	var bar *progressbar.ProgressBar
	if o.Progress != nil {
		bar = progressbar.NewOptions(w.Requests(), progressbar.OptionSetWriter(o.Progress),
			progressbar.OptionSetDescription("bench "+w.Spec.Name), progressbar.OptionShowCount(),
			progressbar.OptionSetItsString("req"), progressbar.OptionShowIts(), progressbar.OptionSetPredictTime(true),
			progressbar.OptionOnCompletion(func() { fmt.Fprintln(o.Progress) }))
	}
	for _, ph := range w.Phases {
		if bar != nil {
			bar.Describe(fmt.Sprintf("bench %s", ph.Name))
		}
		pr := c.runPhase(ctx, ph, bar)
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		res.Phases = append(res.Phases, pr)
	}
	return res, nil
}

func firstRequest(w *Workload) RequestSpec {
	for _, p := range w.Phases {
		for _, u := range p.Users {
			for _, s := range u.Sessions {
				for _, st := range s.Steps {
					if len(st.Requests) > 0 {
						return st.Requests[0]
					}
				}
			}
		}
	}
	return RequestSpec{}
}

// ready resolves the model name and sends the first request until it
// succeeds, as vLLM's initial single-prompt test run. Refusals (4xx) end it
// at once: retrying a bad request does not help.
func (c *client) ready(ctx context.Context, w *Workload, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	var last error
	for {
		last = c.tryReady(ctx, w)
		if last == nil {
			return nil
		}
		var refused refusedError
		if errors.As(last, &refused) || time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("bench: initial test request to %s failed: %w", c.base, last)
		}
		select {
		case <-time.After(time.Second):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

type refusedError struct{ error }

func (c *client) tryReady(ctx context.Context, w *Workload) error {
	if c.model == "" {
		m, err := c.firstModel(ctx)
		if err != nil {
			return err
		}
		c.model = m
	}
	rec := c.send(ctx, firstRequest(w), nil, w.Phases[0].IgnoreEOS, time.Now())
	if rec.Success {
		return nil
	}
	err := errors.New(rec.Error)
	if strings.HasPrefix(rec.Error, "HTTP 4") {
		return refusedError{err}
	}
	return err
}

// runPhase runs the users of ph and returns the records. Users start at
// their arrival times, in order; under a concurrency cap, requests take
// slots first come, first served, and each user's first request queues
// at its arrival (vLLM creates a task per arrival, and asyncio's semaphore
// wakes waiters in order).
func (c *client) runPhase(ctx context.Context, ph Phase, bar *progressbar.ProgressBar) PhaseResult {
	var sem *fifoSem
	if ph.MaxConcurrency > 0 {
		sem = &fifoSem{free: ph.MaxConcurrency}
	}
	var (
		mu   sync.Mutex
		recs = make([]Record, 0, ph.Requests)
		wg   sync.WaitGroup
	)
	t0 := time.Now()
	for ui, u := range ph.Users {
		if d := time.Until(t0.Add(time.Duration(u.Arrival * float64(time.Second)))); d > 0 {
			t := time.NewTimer(d)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
			}
		}
		if ctx.Err() != nil {
			break
		}
		var first chan struct{}
		if sem != nil {
			first = sem.enqueue()
		}
		wg.Go(func() {
			for si, se := range u.Sessions {
				var history []message
				histLen := 0
				for sti, st := range se.Steps {
					out := make([]Record, len(st.Requests))
					var swg sync.WaitGroup
					for ri, r := range st.Requests {
						slot := first
						first = nil
						if sem != nil && slot == nil {
							slot = sem.enqueue()
						}
						swg.Go(func() {
							if slot != nil {
								select {
								case <-slot:
								case <-ctx.Done():
									return
								}
							}
							rec := c.send(ctx, r, history, ph.IgnoreEOS, t0)
							if sem != nil {
								sem.release()
							}
							rec.User, rec.Session, rec.Step, rec.Index = ui, si, sti, ri
							rec.HistoryLen = histLen
							out[ri] = rec
							if bar != nil {
								bar.Add(1)
							}
						})
					}
					swg.Wait()
					if ctx.Err() != nil {
						return
					}
					mu.Lock()
					recs = append(recs, out...)
					mu.Unlock()
					if se.MultiTurn {
						// The next turn resends this one and the actual reply
						// (empty if the request failed, so every run sends
						// as many turns).
						history = append(history, userMessage(st.Requests[0].Prompt),
							message{Role: "assistant", Content: out[0].GeneratedText})
						histLen += st.Requests[0].PromptLen + out[0].OutputTokens
					}
				}
			}
		})
	}
	wg.Wait()
	pr := PhaseResult{PhaseInfo: ph.PhaseInfo, Duration: time.Since(t0).Seconds(), Records: recs}
	sort.Slice(pr.Records, func(i, j int) bool {
		a, b := pr.Records[i], pr.Records[j]
		if a.User != b.User {
			return a.User < b.User
		}
		if a.Session != b.Session {
			return a.Session < b.Session
		}
		if a.Step != b.Step {
			return a.Step < b.Step
		}
		return a.Index < b.Index
	})
	pr.Recompute()
	return pr
}

// fifoSem is a counting semaphore that grants slots in the order they
// were asked for.
type fifoSem struct {
	mu    sync.Mutex
	free  int
	queue []chan struct{}
}

// enqueue asks for a slot; the channel is closed when it is granted.
func (s *fifoSem) enqueue() chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	ch := make(chan struct{})
	if s.free > 0 && len(s.queue) == 0 {
		s.free--
		close(ch)
	} else {
		s.queue = append(s.queue, ch)
	}
	return ch
}

// release gives a slot back, to the longest waiter if any.
func (s *fifoSem) release() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.queue) > 0 {
		close(s.queue[0])
		s.queue = s.queue[1:]
		return
	}
	s.free++
}
