package server

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"strings"
	"time"
	"unicode"

	"github.com/lowbit-ai/lowbit/runtime/engine"
	"github.com/lowbit-ai/lowbit/tokenizer/chat"
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

// chatInput is what a chat request renders: shared by
// /v1/chat/completions and chat-style /tokenize.
type chatInput struct {
	messages            []map[string]any
	tools               []any
	addGenerationPrompt bool
	continueFinal       bool
	kwargs              map[string]any
}

// parseChatInput reads messages, tools and the template controls.
func (s *Server) parseChatInput(b *reqBody, forTokenize bool) (*chatInput, *apiError) {
	in := &chatInput{}
	if b.truthy("continue_final_message") && b.truthy("add_generation_prompt") {
		return nil, modelValidatorError("Cannot set both `continue_final_message` and `add_generation_prompt` to True.", "", nil, len(b.m))
	}
	if !forTokenize {
		if v, ok := b.m["tools"]; ok {
			if l, isList := v.([]any); isList && len(l) == 0 {
				return nil, modelValidatorError("`tools` must not be an empty array. Either provide at least one tool or omit the field entirely.", "tools", nil, len(b.m))
			}
		}
	}
	raw, present := b.m["messages"]
	if !present {
		return nil, (&validationError{typ: "missing", loc: []any{"body", "messages"}, msg: "Field required", input: nil}).apiError()
	}
	list, ok := raw.([]any)
	if !ok {
		return nil, fieldErr("messages", "list_type", "Input should be a valid list", raw)
	}
	for i, m := range list {
		msg, e := parseMessage(i, m)
		if e != nil {
			return nil, e
		}
		in.messages = append(in.messages, msg)
	}
	var e *apiError
	if in.addGenerationPrompt, e = b.boolField("add_generation_prompt", true, false); e != nil {
		return nil, e
	}
	if in.continueFinal, e = b.boolField("continue_final_message", false, false); e != nil {
		return nil, e
	}
	if v, ok := b.get("tools"); ok {
		tl, isList := v.([]any)
		if !isList {
			return nil, fieldErr("tools", "list_type", "Input should be a valid list", v)
		}
		for _, t := range tl {
			in.tools = append(in.tools, plainJSON(t))
		}
	}
	in.kwargs = map[string]any{}
	if v, ok := b.get("chat_template_kwargs"); ok {
		kw, isObj := v.(map[string]any)
		if !isObj {
			return nil, fieldErr("chat_template_kwargs", "dict_type", "Input should be a valid dictionary", v)
		}
		maps.Copy(in.kwargs, plainJSON(kw).(map[string]any))
	}
	if v, ok := b.get("documents"); ok {
		in.kwargs["documents"] = plainJSON(v)
	}
	if v, ok := b.get("reasoning_effort"); ok {
		in.kwargs["reasoning_effort"] = v
		if _, set := in.kwargs["enable_thinking"]; !set {
			in.kwargs["enable_thinking"] = v != "none"
		}
	}
	if v, ok := b.get("chat_template"); ok && v != "" {
		return nil, plainBadRequest("Chat template is passed with request, but --trust-request-chat-template is not set. Refused request with untrusted chat template.")
	}
	return in, nil
}

// parseMessage turns an OpenAI message into what a template sees: its
// fields as sent, content joined into one string ("\n" between text parts,
// as vLLM's chat_utils does for templates that take string content), and
// tool call arguments parsed from JSON, as vLLM does before rendering.
func parseMessage(i int, m any) (map[string]any, *apiError) {
	loc := func(rest ...any) []any { return append([]any{"body", "messages", i}, rest...) }
	obj, ok := m.(map[string]any)
	if !ok {
		return nil, (&validationError{typ: "model_type", loc: loc(), msg: "Input should be a valid dictionary", input: m}).apiError()
	}
	role, ok := obj["role"].(string)
	if !ok {
		return nil, (&validationError{typ: "missing", loc: loc("role"), msg: "Field required", input: obj}).apiError()
	}
	out := plainJSON(obj).(map[string]any)
	out["role"] = role
	if rc, ok := out["reasoning_content"]; ok && out["reasoning"] == nil {
		out["reasoning"] = rc
	}
	switch c := obj["content"].(type) {
	case nil:
		out["content"] = ""
	case string:
		out["content"] = c
	case []any:
		var texts []string
		for j, part := range c {
			switch p := part.(type) {
			case string:
				texts = append(texts, p)
			case map[string]any:
				typ, _ := p["type"].(string)
				text, hasText := p["text"].(string)
				if (typ == "text" || (typ == "" && hasText)) && hasText {
					texts = append(texts, text)
					continue
				}
				if typ == "text" {
					return nil, (&validationError{typ: "missing", loc: loc("content", j, "text"), msg: "Field required", input: p}).apiError()
				}
				return nil, plainBadRequest(fmt.Sprintf("Content part type %q is not supported: this server serves text-only models.", typ))
			default:
				return nil, (&validationError{typ: "model_type", loc: loc("content", j), msg: "Input should be a valid dictionary", input: part}).apiError()
			}
		}
		out["content"] = strings.Join(texts, "\n")
	default:
		return nil, (&validationError{typ: "string_type", loc: loc("content"), msg: "Input should be a valid string", input: c}).apiError()
	}
	if role == "assistant" {
		if calls, ok := out["tool_calls"].([]any); ok {
			for _, call := range calls {
				fn, _ := call.(map[string]any)
				f, _ := fn["function"].(map[string]any)
				if f == nil {
					continue
				}
				switch a := f["arguments"].(type) {
				case nil:
					f["arguments"] = map[string]any{}
				case string:
					if a == "" {
						f["arguments"] = map[string]any{}
						continue
					}
					var v any
					d := json.NewDecoder(strings.NewReader(a))
					d.UseNumber()
					if err := d.Decode(&v); err != nil {
						return nil, plainBadRequest("Invalid tool call arguments (not JSON): " + err.Error())
					}
					f["arguments"] = plainJSON(v)
				}
			}
		}
	}
	return out, nil
}

// renderChat renders a chat input to prompt text, as vLLM's
// apply_hf_chat_template (transformers' apply_chat_template).
func (s *Server) renderChatInput(in *chatInput) (string, *apiError) {
	if s.opts.ChatTemplate == "" {
		return "", plainBadRequest("As of transformers v4.44, default chat template is no longer allowed, so you must provide a chat template if the tokenizer does not define one.")
	}
	if in.continueFinal && in.addGenerationPrompt {
		return "", plainBadRequest("continue_final_message and add_generation_prompt are not compatible. Use continue_final_message when you want the model to continue the final message, and add_generation_prompt when you want to add a header that will prompt it to start a new assistant message instead.")
	}
	ci := chat.Input{Messages: in.messages, Tools: in.tools, AddGenerationPrompt: in.addGenerationPrompt,
		Kwargs: in.kwargs}
	if c := s.tok.Config; c != nil {
		ci.BOSToken, ci.EOSToken = c.BOSToken, c.EOSToken
	}
	text, err := s.renderChat(s.opts.ChatTemplate, ci)
	if err != nil {
		return "", plainBadRequest(err.Error())
	}
	if in.continueFinal && len(in.messages) > 0 {
		// transformers: cut the text right after the final message, so
		// the model continues it.
		final, _ := in.messages[len(in.messages)-1]["content"].(string)
		trimmed := strings.TrimSpace(final)
		loc := strings.LastIndex(text, trimmed)
		if loc < 0 {
			return "", plainBadRequest("continue_final_message is set but the final message does not appear in the chat after applying the chat template! This can happen if the chat template deletes portions of the final message. Please verify the chat template and final message in your chat to ensure they are compatible.")
		}
		left := strings.TrimLeftFunc(final, unicode.IsSpace)
		if text[loc:min(len(text), loc+len(left))] == final {
			text = text[:loc+len(left)]
		} else {
			text = text[:loc+len(trimmed)]
		}
	}
	return text, nil
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
