package server

import (
	"fmt"
	"net/http"
	"time"

	"github.com/lowbit-ai/lowbit/runtime/engine"
)

// chatReq is a parsed /v1/chat/completions request.
type chatReq struct {
	*genParams
	messages       []map[string]any
	prompt         *promptIn
	maxTokens      *int // max_completion_tokens, else max_tokens; nil: up to the model length
	maxTokensParam string
	topLogprobs    int
	echo           bool
	role           string // the response's role
}

// parseChat reads and validates a chat body and renders its prompt.
func (s *Server) parseChat(b *reqBody) (*chatReq, *apiError) {
	if e := checkLogprobsFields(b, "top_logprobs"); e != nil {
		return nil, e
	}
	if v, ok := b.get("top_logprobs"); ok {
		f, _, _ := toFloat(v)
		if (f == -1 || f > 0) && !b.truthy("logprobs") {
			return nil, modelValidatorError("when using `top_logprobs`, `logprobs` must be set to true.", "top_logprobs", nil, len(b.m))
		}
	}
	in, e := s.parseChatInput(b, false)
	if e != nil {
		return nil, e
	}
	p, e := parseGenParams(b, true)
	if e != nil {
		return nil, e
	}
	req := &chatReq{genParams: p, messages: in.messages, maxTokensParam: "max_tokens"}
	for _, k := range []string{"max_tokens", "max_completion_tokens"} {
		v, e := optIntField(b, k)
		if e != nil {
			return nil, e
		}
		if v != nil {
			req.maxTokens, req.maxTokensParam = v, k
		}
	}
	logprobs, e := b.boolField("logprobs", false, true)
	if e != nil {
		return nil, e
	}
	top, e := optIntField(b, "top_logprobs")
	if e != nil {
		return nil, e
	}
	if top != nil {
		req.topLogprobs = *top
	}
	if logprobs {
		k := req.topLogprobs
		p.logprobs = &k
	}
	if p.promptLogprobs, e = optIntField(b, "prompt_logprobs"); e != nil {
		return nil, e
	}
	if req.echo, e = b.boolField("echo", false, false); e != nil {
		return nil, e
	}
	if p.promptLogprobs == nil && req.echo {
		k := req.topLogprobs
		p.promptLogprobs = &k
	}
	addSpecial, e := b.boolField("add_special_tokens", false, false)
	if e != nil {
		return nil, e
	}
	if e := s.checkModel(b); e != nil {
		return nil, e
	}
	if e := checkToolChoice(b, in.tools != nil); e != nil {
		return nil, e
	}
	if p.n > s.opts.MaxChoices {
		return nil, badRequest(fmt.Sprintf("n = %d choices is more than this server's limit of %d.", p.n, s.opts.MaxChoices), "n", p.n)
	}
	text, e := s.renderChatInput(in)
	if e != nil {
		return nil, e
	}
	req.prompt = &promptIn{ids: s.encode(text, addSpecial), text: text}
	req.role = "assistant"
	if !in.addGenerationPrompt && len(in.messages) > 0 {
		req.role, _ = in.messages[len(in.messages)-1]["role"].(string)
	}
	return req, nil
}

// checkToolChoice mirrors vLLM without --enable-auto-tool-choice: tools
// are rendered into the prompt only with tool_choice "none"; "auto" (the
// default once tools are given) is refused with vLLM's message, and
// "required" or a named tool (which need guided decoding) are not
// supported.
func checkToolChoice(b *reqBody, hasTools bool) *apiError {
	tc, present := b.m["tool_choice"]
	if !present && hasTools {
		tc = "auto"
	}
	switch tc {
	case nil, "none":
		return nil
	case "auto":
		return plainBadRequest(`"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set`)
	}
	if !hasTools {
		return modelValidatorError("When using `tool_choice`, `tools` must be set.", "tool_choice", nil, len(b.m))
	}
	return badRequest("tool_choice \"required\" or a named tool is not supported by this server.", "tool_choice", nil)
}

// handleChat serves POST /v1/chat/completions.
func (s *Server) handleChat(w http.ResponseWriter, r *http.Request) {
	arrival := time.Now()
	b, e := readBody(w, r, s.opts.MaxRequestBytes)
	if e != nil {
		writeError(w, e)
		return
	}
	req, e := s.parseChat(b)
	if e != nil {
		writeError(w, e)
		return
	}
	samp, e := s.sampling(req.genParams)
	if e != nil {
		writeError(w, e)
		return
	}
	asked := 0
	if req.maxTokens != nil {
		asked = *req.maxTokens
	}
	plen := len(req.prompt.ids)
	if e := s.checkLength(plen, max(asked, 0), req.maxTokensParam); e != nil {
		writeError(w, e)
		return
	}
	if e := s.checkPromptIDs(req.prompt.ids); e != nil {
		writeError(w, e)
		return
	}
	maxTok := s.opts.MaxModelLen - plen
	if req.maxTokens != nil {
		maxTok = min(maxTok, *req.maxTokens)
	}
	// SamplingParams names max_tokens whichever field set it.
	if e := checkCounts(req.genParams, maxTok, "max_tokens", samp.Temperature == 0); e != nil {
		writeError(w, e)
		return
	}
	if e := s.checkLogprobCaps(req.genParams); e != nil {
		writeError(w, e)
		return
	}
	id := "chatcmpl-" + requestID(r, req.requestID)
	reqs := make([]*engine.Request, req.n)
	prompts := make([]*promptIn, req.n)
	for i := range reqs {
		reqs[i] = s.engineRequest(id, req.prompt.ids, maxTok, req.genParams, samp, i, i == 0)
		prompts[i] = req.prompt
	}
	g, e := s.start(r.Context(), reqs, prompts, newStopSpec(req.genParams), arrival)
	if e != nil {
		writeError(w, e)
		return
	}
	defer g.close()
	meta := respMeta{id: id, created: time.Now().Unix(), model: s.modelName()}
	if req.stream {
		s.streamChat(w, r, g, req, meta)
		return
	}
	if !g.wait(r.Context()) {
		return
	}
	if err := g.firstError(); err != nil {
		s.log.Error("chat completion failed", "id", id, "err", err)
		writeError(w, engineError(err))
		return
	}
	writeJSON(w, http.StatusOK, s.chatResponse(g, req, meta))
}
