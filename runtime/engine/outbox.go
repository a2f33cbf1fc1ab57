package engine

import (
	"context"
	"sync"
)

// outbox delivers a request's Outputs without ever blocking the engine:
// the engine merges news into one pending Output, and a goroutine per
// request hands it to the consumer's channel when the consumer is ready. A
// slow consumer therefore gets fewer, larger Outputs (tokens coalesced), and
// one that has gone (its context cancelled) stops the goroutine.
type outbox struct {
	mu      sync.Mutex
	pending Output
	has     bool
	final   bool
	notify  chan struct{}
	ch      chan Output
}

func newOutbox(ctx context.Context) *outbox {
	o := &outbox{notify: make(chan struct{}, 1), ch: make(chan Output)}
	go o.forward(ctx)
	return o
}

// push merges out into the pending Output.
func (o *outbox) push(out Output) {
	o.mu.Lock()
	p := &o.pending
	p.Tokens = append(p.Tokens, out.Tokens...)
	p.Logprobs = append(p.Logprobs, out.Logprobs...)
	if out.PromptLogprobs != nil {
		p.PromptLogprobs = out.PromptLogprobs
	}
	if out.PromptTokens != 0 {
		p.PromptTokens, p.CachedTokens = out.PromptTokens, out.CachedTokens
	}
	if out.Finish != "" || out.Err != nil {
		p.Finish, p.StopToken, p.Err = out.Finish, out.StopToken, out.Err
		o.final = true
	}
	o.has = true
	o.mu.Unlock()
	select {
	case o.notify <- struct{}{}:
	default:
	}
}

func (o *outbox) forward(ctx context.Context) {
	defer close(o.ch)
	for {
		select {
		case <-o.notify:
		case <-ctx.Done():
			return
		}
		o.mu.Lock()
		out, has, final := o.pending, o.has, o.final
		o.pending, o.has = Output{}, false
		o.mu.Unlock()
		if !has {
			continue
		}
		select {
		case o.ch <- out:
		case <-ctx.Done():
			return
		}
		if final {
			return
		}
	}
}
