package server

import (
	"bytes"
	"context"
	"errors"
	"time"
	"unicode/utf8"

	"github.com/lowbit-ai/lowbit/runtime/engine"
	"github.com/lowbit-ai/lowbit/tokenizer"
)

// A request with n choices over P prompts becomes P×n engine requests, one
// "choice" each (vLLM flattens choice indices as prompt*n + i). A goroutine
// per choice reads its engine channel, detokenizes incrementally, applies
// stop strings and sends events to the handler, which writes them out as
// SSE chunks or collects them for one JSON response.

// promptIn is one prompt of a request.
type promptIn struct {
	ids  []int
	text string // the prompt text, for echo
}

// stopSpec is how a request stops and streams text, shared by its choices.
type stopSpec struct {
	stop        []string
	includeStop bool
	minTokens   int
	// holdBack is the number of characters a stream holds back so that a
	// stop string being formed is never sent: the longest stop string's
	// length minus one (0 when stop strings are included in the output).
	holdBack    int
	skipSpecial bool
	stream      bool
}

func newStopSpec(p *genParams) *stopSpec {
	sp := &stopSpec{stop: p.stop, includeStop: p.includeStop, minTokens: p.minTokens,
		skipSpecial: p.skipSpecial, stream: p.stream}
	if len(p.stop) > 0 && !p.includeStop {
		for _, s := range p.stop {
			sp.holdBack = max(sp.holdBack, utf8.RuneCountInString(s)-1)
		}
	}
	return sp
}

// choice is one generated sequence.
type choice struct {
	index  int
	prompt *promptIn
	req    *engine.Request
	ch     <-chan engine.Output
	ctx    context.Context // the engine request's; cancel ends it
	cancel context.CancelFunc

	dec          *tokenizer.StreamDecoder
	text         []byte // output text so far, stop strings applied
	runes        int    // characters of text (Python's len, for offsets)
	sentB, sentR int    // bytes and characters of text already streamed

	started              bool
	tokens               []int
	logprobs             []engine.PositionLogprobs
	promptLogprobs       []*engine.PositionLogprobs
	promptTokens, cached int

	done       bool
	finish     string
	stopReason any // nil, the stop string, or the stop token id
	err        error

	lastOut time.Time // for inter-token latency
}

// event is what a choice's goroutine reports after each engine Output.
// After the event with done set, the goroutine no longer touches the
// choice, so the handler may read all of it.
type event struct {
	c       *choice
	tokens  []int
	lps     []engine.PositionLogprobs
	text    string // streamed text delta
	first   bool   // the choice's first event
	done    bool
	promptL []*engine.PositionLogprobs
}

// apply folds one engine Output into c, as vLLM's output processor and
// incremental detokenizer do, and returns the event to report.
func (s *Server) apply(c *choice, out engine.Output, sp *stopSpec) event {
	ev := event{c: c}
	if !c.started {
		c.started = true
		ev.first = true
		c.promptLogprobs = out.PromptLogprobs
		ev.promptL = out.PromptLogprobs
		c.promptTokens = out.PromptTokens
		if c.promptTokens == 0 {
			c.promptTokens = len(c.prompt.ids)
		}
		c.cached = out.CachedTokens
	}
	if out.Err != nil {
		c.err, c.done, ev.done = out.Err, true, true
		return ev
	}
	toks := out.Tokens
	decode := toks
	// A request stopped by a token id does not detokenize that token
	// unless include_stop_str_in_output (it would be special anyway for
	// EOS; a stop_token_ids token would otherwise show).
	if out.Finish == engine.FinishStop && len(toks) > 0 && !sp.includeStop {
		decode = toks[:len(toks)-1]
	}
	checkFrom := c.runes
	n0 := len(c.tokens)
	for i, id := range decode {
		piece := c.dec.Add(id)
		c.text = append(c.text, piece...)
		c.runes += utf8.RuneCountInString(piece)
		// Text of the first min_tokens tokens is never searched for stop
		// strings (vLLM PR 22014).
		if sp.minTokens > 0 && n0+i+1 <= sp.minTokens {
			checkFrom = c.runes
		}
	}
	c.tokens = append(c.tokens, toks...)
	c.logprobs = append(c.logprobs, out.Logprobs...)
	ev.tokens, ev.lps = toks, out.Logprobs
	if len(sp.stop) > 0 && len(c.tokens) > sp.minTokens {
		if str, cutB, cutR, ok := findStop(c.text, c.runes, c.runes-checkFrom, sp.stop, sp.includeStop); ok {
			if cutB >= 0 {
				c.text, c.runes = c.text[:cutB], cutR
			}
			c.done, c.finish, c.stopReason = true, engine.FinishStop, str
		}
	}
	if !c.done && out.Finish != "" {
		c.done, c.finish = true, out.Finish
		// The tokenizer's EOS ends a request with stop_reason null; any
		// other stop id (stop_token_ids, the generation config's extra EOS
		// ids) is reported, as vLLM's scheduler does.
		if out.Finish == engine.FinishStop && !(s.hasPrimaryEOS && out.StopToken == s.primaryEOS) {
			c.stopReason = out.StopToken
		}
	}
	ev.done = c.done
	if sp.stream {
		ev.text = c.nextText(sp.holdBack)
	}
	return ev
}

// nextText returns the text not yet streamed, holding back holdBack
// characters while the choice runs (vLLM's get_next_output_text).
func (c *choice) nextText(holdBack int) string {
	if c.done {
		holdBack = 0
	}
	length := c.runes - holdBack
	if c.sentR >= length {
		return ""
	}
	end := len(c.text)
	for k := 0; k < holdBack; k++ {
		_, size := utf8.DecodeLastRune(c.text[:end])
		end -= size
	}
	if end < c.sentB {
		return ""
	}
	s := string(c.text[c.sentB:end])
	c.sentB, c.sentR = end, length
	return s
}

// findStop is vLLM's check_stop_strings: the first stop string (in list
// order) found in the text that the newest newChars characters could have
// completed. It returns where to cut the text (bytes and characters; -1
// to keep it all, when the stop string is included and ends the text).
func findStop(text []byte, runes, newChars int, stops []string, include bool) (stop string, cutB, cutR int, ok bool) {
	if newChars <= 0 {
		return "", 0, 0, false
	}
	for _, st := range stops {
		sl := utf8.RuneCountInString(st)
		back := min(newChars+sl-1, runes)
		startB := len(text)
		for k := 0; k < back; k++ {
			_, size := utf8.DecodeLastRune(text[:startB])
			startB -= size
		}
		i := bytes.Index(text[startB:], []byte(st))
		if i < 0 {
			continue
		}
		absB := startB + i
		absR := runes - back + utf8.RuneCount(text[startB:absB])
		if include {
			absB += len(st)
			absR += sl
			if absR >= runes {
				return st, -1, -1, true
			}
		}
		return st, absB, absR, true
	}
	return "", 0, 0, false
}

// run reads c's engine channel until the choice ends, reporting events.
// quit closes when the handler stops listening (the client went away):
// then events are dropped, but the channel is still drained so the engine
// is never blocked on it.
func (s *Server) run(c *choice, sp *stopSpec, arrival time.Time, events chan<- event, quit <-chan struct{}) {
	report := func(ev event) {
		select {
		case events <- ev:
		case <-quit:
		}
	}
	for out := range c.ch {
		if c.done {
			continue // after a stop string: drain until the engine closes
		}
		now := time.Now()
		if len(out.Tokens) > 0 {
			if c.lastOut.IsZero() {
				s.metrics.ttft.Observe(now.Sub(arrival).Seconds())
			} else {
				itl := now.Sub(c.lastOut).Seconds()
				s.metrics.itl.Observe(itl)
				s.metrics.tpot.Observe(itl)
			}
			c.lastOut = now
		}
		if errors.Is(out.Err, engine.ErrClosed) {
			s.engineClosed.Store(true)
		}
		ev := s.apply(c, out, sp)
		if c.done {
			if c.err == nil {
				s.metrics.finished(c, now.Sub(arrival))
			}
			if out.Finish == "" && out.Err == nil {
				// Stopped by a stop string: free the engine's slot now.
				c.cancel()
			}
		}
		report(ev)
	}
	if !c.done {
		// The engine may close a cancelled request's channel without a
		// final Output; that is an abort. Otherwise it is a failure.
		c.done = true
		if c.ctx.Err() != nil {
			c.finish = engine.FinishAbort
			s.metrics.finished(c, time.Since(arrival))
		} else {
			c.err = errors.New("the engine ended the request without a result")
		}
		report(event{c: c, done: true, first: !c.started})
	}
}
