package server

import (
	"encoding/json"
	"fmt"
	"net/http"
	"time"
	"unicode/utf8"

	"github.com/lowbit-ai/lowbit/runtime/engine"
)

// completionReq is a parsed /v1/completions request.
type completionReq struct {
	*genParams
	prompts    []*promptIn
	maxTokens  int // as requested (default 16)
	echo       bool
	addSpecial bool
}

// parsePrompt reads prompt: a string, a list of strings, a list of token
// ids (one prompt) or a list of lists of ids.
func (s *Server) parsePrompt(b *reqBody, addSpecial bool) ([]*promptIn, *apiError) {
	v := b.m["prompt"]
	text := func(t string) *promptIn { return &promptIn{ids: s.encode(t, addSpecial), text: t} }
	ids := func(x []int) *promptIn { return &promptIn{ids: x, text: s.tok.Decode(x, false)} }
	switch x := v.(type) {
	case string:
		return []*promptIn{text(x)}, nil
	case []any:
		if len(x) == 0 {
			return []*promptIn{{}}, nil // one empty token prompt, rejected later as vLLM does
		}
		switch x[0].(type) {
		case json.Number, bool:
			t, e := intList("prompt", x, true)
			if e != nil {
				return nil, e
			}
			return []*promptIn{ids(t)}, nil
		}
		if len(x) > s.opts.MaxPrompts {
			return nil, modelValidatorError(fmt.Sprintf("prompt list length %d exceeds the maximum allowed count of %d.",
				len(x), s.opts.MaxPrompts), "prompt", nil, len(b.m))
		}
		// A batch is all strings or all token lists, as pydantic's
		// list[str] | list[list[int]] has it.
		_, strs := x[0].(string)
		out := make([]*promptIn, len(x))
		for i, e := range x {
			switch y := e.(type) {
			case string:
				if !strs {
					return nil, (&validationError{typ: "list_type", loc: []any{"body", "prompt", i},
						msg: "Input should be a valid list", input: e}).apiError()
				}
				out[i] = text(y)
			case []any:
				if strs {
					return nil, (&validationError{typ: "string_type", loc: []any{"body", "prompt", i},
						msg: "Input should be a valid string", input: e}).apiError()
				}
				t, ae := intList("prompt", y, true)
				if ae != nil {
					return nil, ae
				}
				out[i] = ids(t)
			default:
				return nil, (&validationError{typ: "string_type", loc: []any{"body", "prompt", i},
					msg: "Input should be a valid string", input: e}).apiError()
			}
		}
		return out, nil
	}
	return nil, fieldErr("prompt", "string_type", "Input should be a valid string", v)
}

// parseCompletion reads and validates a completions body.
func (s *Server) parseCompletion(b *reqBody) (*completionReq, *apiError) {
	if e := checkLogprobsFields(b, "logprobs"); e != nil {
		return nil, e
	}
	if pv, ok := b.get("prompt"); !ok || pv == "" {
		return nil, modelValidatorError("Either prompt or prompt_embeds must be provided and non-empty.", "prompt", nil, len(b.m))
	}
	p, e := parseGenParams(b, false)
	if e != nil {
		return nil, e
	}
	req := &completionReq{genParams: p}
	// max_tokens: null is the default 16 (normalize_null_max_tokens).
	mt := int64(16)
	if v, ok := b.get("max_tokens"); ok {
		n, typ, msg := toInt(v)
		if typ != "" {
			return nil, fieldErr("max_tokens", typ, msg, v)
		}
		mt = n
	}
	req.maxTokens = int(max(min(mt, 1<<31-1), -1<<31))
	if req.echo, e = b.boolField("echo", false, true); e != nil {
		return nil, e
	}
	if p.logprobs, e = optIntField(b, "logprobs"); e != nil {
		return nil, e
	}
	if p.promptLogprobs, e = optIntField(b, "prompt_logprobs"); e != nil {
		return nil, e
	}
	if p.promptLogprobs == nil && req.echo && p.logprobs != nil {
		k := *p.logprobs
		p.promptLogprobs = &k
	}
	if req.addSpecial, e = b.boolField("add_special_tokens", true, false); e != nil {
		return nil, e
	}
	if b.truthy("suffix") {
		return nil, badRequest("suffix is not currently supported", "suffix", nil)
	}
	if e := s.checkModel(b); e != nil {
		return nil, e
	}
	if req.prompts, e = s.parsePrompt(b, req.addSpecial); e != nil {
		return nil, e
	}
	if len(req.prompts)*max(p.n, 1) > s.opts.MaxChoices {
		return nil, badRequest(fmt.Sprintf("n × prompts = %d choices is more than this server's limit of %d.",
			len(req.prompts)*p.n, s.opts.MaxChoices), "n", p.n)
	}
	return req, nil
}

// optIntField reads an optional int field into an *int.
func optIntField(b *reqBody, k string) (*int, *apiError) {
	v, e := b.optInt(k)
	if e != nil || v == nil {
		return nil, e
	}
	n := int(max(min(*v, 1<<31-1), -1<<31))
	return &n, nil
}

// handleCompletions serves POST /v1/completions.
func (s *Server) handleCompletions(w http.ResponseWriter, r *http.Request) {
	arrival := time.Now()
	b, e := readBody(w, r, s.opts.MaxRequestBytes)
	if e != nil {
		writeError(w, e)
		return
	}
	req, e := s.parseCompletion(b)
	if e != nil {
		writeError(w, e)
		return
	}
	samp, e := s.sampling(req.genParams)
	if e != nil {
		writeError(w, e)
		return
	}
	// Per prompt: the length checks, then the engine's max_tokens: what is
	// left of the model length when max_tokens asks for more, and 1 for
	// echo with max_tokens 0 (score the prompt only, as vLLM does).
	echoOnly := req.echo && req.maxTokens == 0
	var reqs []*engine.Request
	var prompts []*promptIn
	id := "cmpl-" + requestID(r, req.requestID)
	for pi, pr := range req.prompts {
		if e := s.checkLength(len(pr.ids), max(req.maxTokens, 0), "max_tokens"); e != nil {
			writeError(w, e)
			return
		}
		if e := s.checkPromptIDs(pr.ids); e != nil {
			writeError(w, e)
			return
		}
		maxTok := min(req.maxTokens, s.opts.MaxModelLen-len(pr.ids))
		if echoOnly {
			maxTok = 1
		}
		if e := checkCounts(req.genParams, maxTok, "max_tokens", samp.Temperature == 0); e != nil {
			writeError(w, e)
			return
		}
		for i := 0; i < req.n; i++ {
			// Prompt logprobs are the same for every choice of a prompt:
			// ask the engine once, except when streaming, where each
			// choice echoes its own as soon as it starts.
			reqs = append(reqs, s.engineRequest(fmt.Sprintf("%s-%d", id, pi), pr.ids, maxTok, req.genParams, samp, i, i == 0 || req.stream))
			prompts = append(prompts, pr)
		}
	}
	if e := s.checkLogprobCaps(req.genParams); e != nil {
		writeError(w, e)
		return
	}
	sp := newStopSpec(req.genParams)
	g, e := s.start(r.Context(), reqs, prompts, sp, arrival)
	if e != nil {
		writeError(w, e)
		return
	}
	defer g.close()
	meta := respMeta{id: id, created: time.Now().Unix(), model: s.modelName()}
	if req.stream {
		s.streamCompletion(w, r, g, req, meta)
		return
	}
	if !g.wait(r.Context()) {
		return // the client went away; g.close cancels the engine requests
	}
	if err := g.firstError(); err != nil {
		s.log.Error("completion failed", "id", id, "err", err)
		writeError(w, engineError(err))
		return
	}
	writeJSON(w, http.StatusOK, s.completionResponse(g, req, meta))
}

type respMeta struct {
	id      string
	created int64
	model   string
}

type completionChoiceJSON struct {
	Index          int                     `json:"index"`
	Text           string                  `json:"text"`
	Logprobs       *completionLogprobsJSON `json:"logprobs"`
	FinishReason   *string                 `json:"finish_reason"`
	StopReason     any                     `json:"stop_reason"`
	TokenIDs       any                     `json:"token_ids"`
	PromptLogprobs any                     `json:"prompt_logprobs"`
	PromptTokenIDs any                     `json:"prompt_token_ids"`
}

type completionResponseJSON struct {
	ID                string                 `json:"id"`
	Object            string                 `json:"object"`
	Created           int64                  `json:"created"`
	Model             string                 `json:"model"`
	Choices           []completionChoiceJSON `json:"choices"`
	ServiceTier       *string                `json:"service_tier"`
	SystemFingerprint *string                `json:"system_fingerprint"`
	Usage             usageJSON              `json:"usage"`
	KVTransferParams  any                    `json:"kv_transfer_params"`
}

type usageJSON struct {
	PromptTokens        int                `json:"prompt_tokens"`
	TotalTokens         int                `json:"total_tokens"`
	CompletionTokens    int                `json:"completion_tokens"`
	PromptTokensDetails *promptDetailsJSON `json:"prompt_tokens_details"`
}

// streamUsageJSON is the usage of the final stream chunk (vLLM serializes
// it with exclude_none: no null details).
type streamUsageJSON struct {
	PromptTokens        int                `json:"prompt_tokens"`
	TotalTokens         int                `json:"total_tokens"`
	CompletionTokens    int                `json:"completion_tokens"`
	PromptTokensDetails *promptDetailsJSON `json:"prompt_tokens_details,omitempty"`
}

type promptDetailsJSON struct {
	CachedTokens int `json:"cached_tokens"`
}

func strOrNil(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// intsOrNil is a token id list when asked for (never null then), else nil.
func intsOrNil(ids []int, want bool) any {
	if !want {
		return nil
	}
	if ids == nil {
		return []int{}
	}
	return ids
}

// promptDicts of choice c, shared across the choices of its prompt (only
// the first asked the engine for them).
func (s *Server) sharedPromptLogprobs(g *generation, c *choice) []*engine.PositionLogprobs {
	if c.promptLogprobs != nil {
		return c.promptLogprobs
	}
	for _, o := range g.choices {
		if o.prompt == c.prompt && o.promptLogprobs != nil {
			return o.promptLogprobs
		}
	}
	return nil
}

// completionResponse builds the non-streaming response, as vLLM's
// request_output_to_completion_response.
func (s *Server) completionResponse(g *generation, req *completionReq, meta respMeta) *completionResponseJSON {
	resp := &completionResponseJSON{ID: meta.id, Object: "text_completion", Created: meta.created, Model: meta.model,
		Choices: make([]completionChoiceJSON, 0, len(g.choices))}
	var promptTokens, genTokens, cached int
	for i, c := range g.choices {
		var pdicts [][]lpEntry
		if req.promptLogprobs != nil {
			pdicts = s.promptDicts(c.prompt.ids, s.sharedPromptLogprobs(g, c))
		}
		echoDicts := pdicts
		if echoDicts == nil {
			echoDicts = make([][]lpEntry, len(c.prompt.ids)) // keeps the echoed positions aligned
		}
		ids, text := c.tokens, string(c.text)
		var dicts [][]lpEntry
		if req.logprobs != nil {
			dicts = s.sampleDicts(c.tokens, c.logprobs, 0)
		}
		if req.echo {
			if req.maxTokens == 0 {
				ids, text, dicts = c.prompt.ids, c.prompt.text, echoDicts
			} else {
				ids = append(append([]int{}, c.prompt.ids...), c.tokens...)
				text = c.prompt.text + text
				if req.logprobs != nil {
					dicts = append(append([][]lpEntry{}, echoDicts...), dicts...)
				}
			}
		}
		ch := completionChoiceJSON{Index: i, Text: text, FinishReason: strOrNil(c.finish), StopReason: c.stopReason,
			TokenIDs: intsOrNil(c.tokens, req.returnTokenIDs), PromptTokenIDs: intsOrNil(c.prompt.ids, req.returnTokenIDs)}
		if req.logprobs != nil {
			ch.Logprobs = s.completionLogprobs(ids, dicts, *req.logprobs, 0, req.tokensAsIDs)
		}
		if pdicts != nil {
			ch.PromptLogprobs = promptLogprobsJSON(pdicts)
		}
		resp.Choices = append(resp.Choices, ch)
		genTokens += len(c.tokens)
		if i%req.n == 0 {
			promptTokens += len(c.prompt.ids)
			cached = c.cached
		}
	}
	resp.Usage = usageJSON{PromptTokens: promptTokens, TotalTokens: promptTokens + genTokens, CompletionTokens: genTokens}
	if s.opts.EnablePromptTokensDetails {
		resp.Usage.PromptTokensDetails = &promptDetailsJSON{CachedTokens: cached}
	}
	return resp
}

type completionChunkChoice struct {
	Index          int                     `json:"index"`
	Text           string                  `json:"text"`
	Logprobs       *completionLogprobsJSON `json:"logprobs"`
	FinishReason   *string                 `json:"finish_reason"`
	StopReason     any                     `json:"stop_reason"`
	PromptTokenIDs any                     `json:"prompt_token_ids"`
	TokenIDs       any                     `json:"token_ids"`
}

type completionChunk struct {
	ID      string                  `json:"id"`
	Object  string                  `json:"object"`
	Created int64                   `json:"created"`
	Model   string                  `json:"model"`
	Choices []completionChunkChoice `json:"choices"`
	Usage   any                     `json:"usage,omitempty"`
}

type chunkUsage struct {
	PromptTokens     int `json:"prompt_tokens"`
	TotalTokens      int `json:"total_tokens"`
	CompletionTokens int `json:"completion_tokens"`
}

// streamCompletion writes a completions stream, as vLLM's
// completion_stream_generator: one chunk per engine output of each
// choice (none before the first token), the prompt echoed in a choice's
// first chunk, finish_reason on its last, then the usage chunk if asked
// and [DONE].
func (s *Server) streamCompletion(w http.ResponseWriter, r *http.Request, g *generation, req *completionReq, meta respMeta) {
	out := newSSE(w)
	type chState struct {
		tokens  []int // generated so far, for logprob decoding context
		textLen int   // characters sent, for text_offset
		echoed  bool
	}
	states := make([]chState, len(g.choices))
	left := len(g.choices)
	for left > 0 {
		var ev event
		select {
		case ev = <-g.events:
		case <-r.Context().Done():
			return
		}
		c := ev.c
		st := &states[c.index]
		if ev.done {
			left--
			if c.err != nil {
				// vLLM's generator raises: an error event, then [DONE];
				// returning cancels the other choices.
				s.log.Error("completion stream failed", "id", meta.id, "err", c.err)
				out.streamError(engineError(c.err))
				out.done()
				return
			}
		}
		lpStart := len(st.tokens)
		st.tokens = append(st.tokens, ev.tokens...)
		text, ids := ev.text, ev.tokens
		var dicts [][]lpEntry
		if req.logprobs != nil {
			dicts = s.sampleDicts(st.tokens, ev.lps, lpStart)
		}
		var promptIDs any
		if req.echo && !st.echoed {
			st.echoed = true
			var pdicts [][]lpEntry
			if req.logprobs != nil {
				pdicts = s.promptDicts(c.prompt.ids, ev.promptL)
				if pdicts == nil {
					pdicts = make([][]lpEntry, len(c.prompt.ids))
				}
			}
			if req.maxTokens == 0 {
				text, ids, dicts = c.prompt.text, c.prompt.ids, pdicts
			} else {
				text = c.prompt.text + text
				ids = append(append([]int{}, c.prompt.ids...), ids...)
				dicts = append(pdicts, dicts...)
			}
			promptIDs = intsOrNil(c.prompt.ids, req.returnTokenIDs)
		} else {
			if !st.echoed && req.returnTokenIDs {
				st.echoed = true
				promptIDs = c.prompt.ids
			}
			if text == "" && len(ids) == 0 && lpStart == 0 {
				continue // no empty chunks before the first token
			}
		}
		chc := completionChunkChoice{Index: c.index, Text: text, PromptTokenIDs: promptIDs,
			TokenIDs: intsOrNil(ev.tokens, req.returnTokenIDs)}
		if req.logprobs != nil {
			chc.Logprobs = s.completionLogprobs(ids, dicts, *req.logprobs, st.textLen, req.tokensAsIDs)
		}
		st.textLen += runeLen(text)
		if ev.done {
			chc.FinishReason, chc.StopReason = strOrNil(c.finish), c.stopReason
		}
		chunk := completionChunk{ID: meta.id, Object: "text_completion", Created: meta.created, Model: meta.model,
			Choices: []completionChunkChoice{chc}}
		if req.continuousUse {
			n := len(st.tokens)
			chunk.Usage = chunkUsage{PromptTokens: len(c.prompt.ids), TotalTokens: len(c.prompt.ids) + n, CompletionTokens: n}
		}
		out.data(chunk)
		if out.failed {
			return // the client is gone; g.close cancels the engine requests
		}
	}
	if req.includeUsage {
		var promptTokens, genTokens, cached int
		for i, c := range g.choices {
			genTokens += len(c.tokens)
			if i%req.n == 0 {
				promptTokens += len(c.prompt.ids)
				cached = c.cached
			}
		}
		u := streamUsageJSON{PromptTokens: promptTokens, TotalTokens: promptTokens + genTokens, CompletionTokens: genTokens}
		if s.opts.EnablePromptTokensDetails {
			u.PromptTokensDetails = &promptDetailsJSON{CachedTokens: cached}
		}
		out.data(completionChunk{ID: meta.id, Object: "text_completion", Created: meta.created, Model: meta.model,
			Choices: []completionChunkChoice{}, Usage: u})
	}
	out.done()
}

func runeLen(s string) int { return utf8.RuneCountInString(s) }
