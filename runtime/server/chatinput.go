package server

import (
	"encoding/json"
	"fmt"
	"strings"
	"unicode"

	"github.com/lowbit-ai/lowbit/tokenizer/chat"
)

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
	in := &chatInput{kwargs: map[string]any{}}
	if b.truthy("continue_final_message") && b.truthy("add_generation_prompt") {
		return nil, modelValidatorError("Cannot set both `continue_final_message` and `add_generation_prompt` to True.", "", nil, len(b.m))
	}
	if !forTokenize {
		if l, isList := b.m["tools"].([]any); isList && len(l) == 0 {
			return nil, modelValidatorError("`tools` must not be an empty array. Either provide at least one tool or omit the field entirely.", "tools", nil, len(b.m))
		}
	}
	if _, has := b.m["messages"]; !has {
		return nil, (&validationError{typ: "missing", loc: []any{"body", "messages"}, msg: "Field required", input: nil}).apiError()
	}
	raw, _ := b.rawField("messages")
	list, ok := rawList(raw)
	if !ok {
		return nil, fieldErr("messages", "list_type", "Input should be a valid list", b.m["messages"])
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
	if raw, ok := b.rawField("tools"); ok {
		tools, ok := rawList(raw)
		if !ok {
			return nil, fieldErr("tools", "list_type", "Input should be a valid list", b.m["tools"])
		}
		for i, t := range tools {
			tool, e := normalizeTool(i, t)
			if e != nil {
				return nil, e
			}
			in.tools = append(in.tools, tool)
		}
	}
	if raw, ok := b.rawField("chat_template_kwargs"); ok {
		pairs, isObj := objectPairs(raw)
		if !isObj {
			return nil, fieldErr("chat_template_kwargs", "dict_type", "Input should be a valid dictionary", b.m["chat_template_kwargs"])
		}
		for _, p := range pairs {
			in.kwargs[p.k] = p.v
		}
	}
	// documents: vLLM passes them to the template, where tokenizer/chat
	// always has None; the templates served here (Qwen3, Llama) do not
	// read them, so they are dropped.
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

// parseMessage turns an OpenAI message into the conversation message vLLM
// hands a template: role; content as one string ("\n" between text parts,
// vLLM's rule for templates that take string content); name; an
// assistant's tool_calls with each function's arguments parsed from their
// JSON string, and its reasoning; a tool message's tool_call_id. Nested
// values stay raw JSON, keeping their key order.
func parseMessage(i int, raw json.RawMessage) (map[string]any, *apiError) {
	loc := func(rest ...any) []any { return append([]any{"body", "messages", i}, rest...) }
	pairs, ok := objectPairs(raw)
	if !ok {
		return nil, (&validationError{typ: "model_type", loc: loc(), msg: "Input should be a valid dictionary", input: decodeAny(raw)}).apiError()
	}
	str := func(k string) (string, bool) {
		v, ok := lookup(pairs, k)
		var s string
		return s, ok && json.Unmarshal(v, &s) == nil
	}
	role, ok := str("role")
	if !ok {
		return nil, (&validationError{typ: "missing", loc: loc("role"), msg: "Field required", input: decodeAny(raw)}).apiError()
	}
	out := map[string]any{"role": role}
	content, e := messageContent(loc, pairs)
	if e != nil {
		return nil, e
	}
	out["content"] = content
	if name, ok := str("name"); ok {
		out["name"] = name
	}
	switch role {
	case "assistant":
		if v, ok := lookup(pairs, "tool_calls"); ok && !isNull(v) {
			calls, e := toolCalls(v)
			if e != nil {
				return nil, e
			}
			out["tool_calls"] = calls
		}
		// vLLM reads reasoning, or the older reasoning_content; Qwen3's
		// template reads reasoning_content.
		for _, k := range []string{"reasoning_content", "reasoning"} {
			if r, ok := str(k); ok {
				out["reasoning"], out["reasoning_content"] = r, r
			}
		}
	case "tool":
		if v, ok := lookup(pairs, "tool_call_id"); ok {
			out["tool_call_id"] = v
		}
	}
	return out, nil
}

// messageContent joins a message's content into one string.
func messageContent(loc func(...any) []any, pairs []kv) (string, *apiError) {
	raw, ok := lookup(pairs, "content")
	if !ok || isNull(raw) {
		return "", nil
	}
	switch c := decodeAny(raw).(type) {
	case string:
		return c, nil
	case []any:
		var texts []string
		for j, part := range c {
			switch p := part.(type) {
			case string:
				texts = append(texts, p)
			case map[string]any:
				typ, _ := p["type"].(string)
				text, hasText := p["text"].(string)
				if hasText && (typ == "text" || typ == "") {
					texts = append(texts, text)
					continue
				}
				if typ == "text" {
					return "", (&validationError{typ: "missing", loc: loc("content", j, "text"), msg: "Field required", input: p}).apiError()
				}
				return "", plainBadRequest(fmt.Sprintf("Content part type %q is not supported: this server serves text-only models.", typ))
			default:
				return "", (&validationError{typ: "model_type", loc: loc("content", j), msg: "Input should be a valid dictionary", input: part}).apiError()
			}
		}
		return strings.Join(texts, "\n"), nil
	default:
		return "", (&validationError{typ: "string_type", loc: loc("content"), msg: "Input should be a valid string", input: c}).apiError()
	}
}

// toolCalls rewrites an assistant's tool_calls as vLLM does before
// rendering: each function's arguments, a JSON string on the wire, become
// the JSON value ({} when empty or missing).
func toolCalls(raw json.RawMessage) (any, *apiError) {
	calls, ok := rawList(raw)
	if !ok {
		return raw, nil
	}
	out := make([]any, len(calls))
	for i, call := range calls {
		out[i] = call
		cp, ok := objectPairs(call)
		if !ok {
			continue
		}
		fn, ok := lookup(cp, "function")
		fp, isObj := objectPairs(fn)
		if !ok || !isObj {
			continue
		}
		args := json.RawMessage("{}")
		if a, ok := lookup(fp, "arguments"); ok && !isNull(a) {
			var s string
			switch {
			case json.Unmarshal(a, &s) == nil && s == "":
			case json.Unmarshal(a, &s) == nil:
				if !json.Valid([]byte(s)) {
					return nil, plainBadRequest(fmt.Sprintf("Invalid tool call arguments (not JSON): %q", s))
				}
				args = json.RawMessage(s)
			default:
				args = a // already an object
			}
		}
		fp = append(fp, kv{"arguments", args})
		cp = append(cp, kv{"function", buildObject(fp)})
		out[i] = buildObject(cp)
	}
	return out, nil
}

// normalizeTool is vLLM's ChatCompletionToolsParam.model_dump(): type,
// then function with name, description and parameters (null when absent)
// first and any other fields after.
func normalizeTool(i int, raw json.RawMessage) (any, *apiError) {
	loc := []any{"body", "tools", i, "function"}
	pairs, ok := objectPairs(raw)
	if !ok {
		return nil, (&validationError{typ: "model_type", loc: loc[:3], msg: "Input should be a valid dictionary", input: decodeAny(raw)}).apiError()
	}
	fn, ok := lookup(pairs, "function")
	fp, isObj := objectPairs(fn)
	if !ok || !isObj {
		return nil, (&validationError{typ: "missing", loc: loc, msg: "Field required", input: decodeAny(raw)}).apiError()
	}
	name, hasName := lookup(fp, "name")
	var n string
	if !hasName || json.Unmarshal(name, &n) != nil {
		return nil, (&validationError{typ: "missing", loc: append(loc, "name"), msg: "Field required", input: decodeAny(fn)}).apiError()
	}
	nf := []kv{{"name", name}}
	for _, k := range []string{"description", "parameters"} {
		v, ok := lookup(fp, k)
		if !ok {
			v = json.RawMessage("null")
		}
		nf = append(nf, kv{k, v})
	}
	for _, p := range fp {
		if p.k != "name" && p.k != "description" && p.k != "parameters" {
			nf = append(nf, p)
		}
	}
	typ := json.RawMessage(`"function"`)
	if t, ok := lookup(pairs, "type"); ok && !isNull(t) {
		typ = t
	}
	return buildObject([]kv{{"type", typ}, {"function", buildObject(nf)}}), nil
}

// renderChatInput renders a chat input to prompt text, as vLLM's
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
