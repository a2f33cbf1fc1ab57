package server

import (
	"net/http"
)

// chatMessageJSON is vLLM's ChatMessage without tool calls (its
// serializer drops an empty tool_calls). Without a reasoning parser vLLM
// leaves thinking inside content and reasoning null; so does this server.
type chatMessageJSON struct {
	Role         string  `json:"role"`
	Content      *string `json:"content"`
	Refusal      *string `json:"refusal"`
	Annotations  any     `json:"annotations"`
	Audio        any     `json:"audio"`
	FunctionCall any     `json:"function_call"`
	Reasoning    *string `json:"reasoning"`
}

type chatChoiceJSON struct {
	Index        int               `json:"index"`
	Message      chatMessageJSON   `json:"message"`
	Logprobs     *chatLogprobsJSON `json:"logprobs"`
	FinishReason string            `json:"finish_reason"`
	StopReason   any               `json:"stop_reason"`
	TokenIDs     any               `json:"token_ids"`
}

type chatResponseJSON struct {
	ID                string           `json:"id"`
	Object            string           `json:"object"`
	Created           int64            `json:"created"`
	Model             string           `json:"model"`
	Choices           []chatChoiceJSON `json:"choices"`
	ServiceTier       *string          `json:"service_tier"`
	SystemFingerprint *string          `json:"system_fingerprint"`
	Usage             usageJSON        `json:"usage"`
	PromptLogprobs    any              `json:"prompt_logprobs"`
	PromptTokenIDs    any              `json:"prompt_token_ids"`
	KVTransferParams  any              `json:"kv_transfer_params"`
}

// echoText is what chat echo prepends: the last message's content when
// its role is the response's.
func (req *chatReq) echoText() string {
	if !req.echo || len(req.messages) == 0 {
		return ""
	}
	last := req.messages[len(req.messages)-1]
	if last["role"] != req.role {
		return ""
	}
	s, _ := last["content"].(string)
	return s
}

// chatResponse builds the non-streaming response (vLLM's
// chat_completion_full_generator).
func (s *Server) chatResponse(g *generation, req *chatReq, meta respMeta) *chatResponseJSON {
	resp := &chatResponseJSON{ID: meta.id, Object: "chat.completion", Created: meta.created, Model: meta.model,
		Choices: make([]chatChoiceJSON, 0, len(g.choices))}
	gen := 0
	echo := req.echoText()
	for _, c := range g.choices {
		content := echo + string(c.text)
		finish := c.finish
		if finish == "" {
			finish = "stop"
		}
		ch := chatChoiceJSON{Index: c.index, Message: chatMessageJSON{Role: req.role, Content: &content},
			FinishReason: finish, StopReason: c.stopReason, TokenIDs: intsOrNil(c.tokens, req.returnTokenIDs)}
		if req.logprobs != nil {
			ch.Logprobs = s.chatLogprobs(c.tokens, s.sampleDicts(c.tokens, c.logprobs, 0), req.topLogprobs, req.tokensAsIDs)
		}
		resp.Choices = append(resp.Choices, ch)
		gen += len(c.tokens)
	}
	c0 := g.choices[0]
	pt := len(req.prompt.ids)
	resp.Usage = usageJSON{PromptTokens: pt, TotalTokens: pt + gen, CompletionTokens: gen}
	if s.opts.EnablePromptTokensDetails {
		resp.Usage.PromptTokensDetails = &promptDetailsJSON{CachedTokens: c0.cached}
	}
	if req.promptLogprobs != nil {
		resp.PromptLogprobs = promptLogprobsJSON(s.promptDicts(req.prompt.ids, c0.promptLogprobs))
	}
	resp.PromptTokenIDs = intsOrNil(req.prompt.ids, req.returnTokenIDs)
	return resp
}

// chatDelta is DeltaMessage as vLLM streams it: role only in a choice's
// first chunk.
type chatDelta struct {
	Role    string `json:"role,omitempty"`
	Content string `json:"content"`
}

type chatRoleChoice struct {
	Index        int       `json:"index"`
	Delta        chatDelta `json:"delta"`
	Logprobs     any       `json:"logprobs"`
	FinishReason any       `json:"finish_reason"`
}

type chatRoleChunk struct {
	ID             string           `json:"id"`
	Object         string           `json:"object"`
	Created        int64            `json:"created"`
	Model          string           `json:"model"`
	Choices        []chatRoleChoice `json:"choices"`
	Usage          any              `json:"usage,omitempty"`
	PromptTokenIDs any              `json:"prompt_token_ids"`
}

type chatDeltaChoice struct {
	Index        int               `json:"index"`
	Delta        chatDelta         `json:"delta"`
	Logprobs     *chatLogprobsJSON `json:"logprobs"`
	FinishReason *string           `json:"finish_reason"`
	TokenIDs     any               `json:"token_ids"`
}

type chatFinalChoice struct {
	Index        int               `json:"index"`
	Delta        chatDelta         `json:"delta"`
	Logprobs     *chatLogprobsJSON `json:"logprobs"`
	FinishReason string            `json:"finish_reason"`
	StopReason   any               `json:"stop_reason"`
	TokenIDs     any               `json:"token_ids"`
}

type chatChunk struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	Model   string `json:"model"`
	Choices any    `json:"choices"`
	Usage   any    `json:"usage,omitempty"`
}

// streamChat writes a chat stream, as vLLM's
// chat_completion_stream_generator: at the first engine output, a role
// chunk {"role":"assistant","content":""} for every choice (and the echoed
// last message), then one content chunk per output, finish_reason on each
// choice's last, the usage chunk if asked, and [DONE].
func (s *Server) streamChat(w http.ResponseWriter, r *http.Request, g *generation, req *chatReq, meta respMeta) {
	out := newSSE(w)
	pt := len(req.prompt.ids)
	tokens := make([][]int, len(g.choices))
	first := true
	left := len(g.choices)
	chunk := func(choices any, usage any) chatChunk {
		return chatChunk{ID: meta.id, Object: "chat.completion.chunk", Created: meta.created, Model: meta.model,
			Choices: choices, Usage: usage}
	}
	usageOf := func(n int) any {
		if !req.continuousUse {
			return nil
		}
		return chunkUsage{PromptTokens: pt, TotalTokens: pt + n, CompletionTokens: n}
	}
	for left > 0 {
		var ev event
		select {
		case ev = <-g.events:
		case <-r.Context().Done():
			return
		}
		c := ev.c
		if ev.done {
			left--
			if c.err != nil {
				s.log.Error("chat stream failed", "id", meta.id, "err", c.err)
				out.streamError(engineError(c.err))
				out.done()
				return
			}
		}
		if first {
			first = false
			for i := range g.choices {
				out.data(chatRoleChunk{ID: meta.id, Object: "chat.completion.chunk", Created: meta.created, Model: meta.model,
					Choices:        []chatRoleChoice{{Index: i, Delta: chatDelta{Role: req.role}}},
					Usage:          usageOf(0),
					PromptTokenIDs: intsOrNil(req.prompt.ids, req.returnTokenIDs)})
			}
			if echo := req.echoText(); echo != "" {
				for i := range g.choices {
					out.data(chunk([]chatDeltaChoice{{Index: i, Delta: chatDelta{Content: echo}}}, usageOf(0)))
				}
			}
		}
		prev := len(tokens[c.index])
		if ev.text == "" && len(ev.tokens) == 0 && prev == 0 {
			continue // no empty chunks before the first token
		}
		tokens[c.index] = append(tokens[c.index], ev.tokens...)
		var lp *chatLogprobsJSON
		if req.logprobs != nil {
			lp = s.chatLogprobs(ev.tokens, s.sampleDicts(tokens[c.index], ev.lps, prev), req.topLogprobs, req.tokensAsIDs)
		}
		ids := intsOrNil(ev.tokens, req.returnTokenIDs)
		if !ev.done {
			out.data(chunk([]chatDeltaChoice{{Index: c.index, Delta: chatDelta{Content: ev.text}, Logprobs: lp, TokenIDs: ids}},
				usageOf(len(tokens[c.index]))))
			if out.failed {
				return
			}
			continue
		}
		finish := c.finish
		if finish == "" {
			finish = "stop"
		}
		out.data(chunk([]chatFinalChoice{{Index: c.index, Delta: chatDelta{Content: ev.text}, Logprobs: lp,
			FinishReason: finish, StopReason: c.stopReason, TokenIDs: ids}}, usageOf(len(tokens[c.index]))))
		if out.failed {
			return
		}
	}
	if req.includeUsage {
		gen := 0
		for _, t := range tokens {
			gen += len(t)
		}
		u := streamUsageJSON{PromptTokens: pt, TotalTokens: pt + gen, CompletionTokens: gen}
		if s.opts.EnablePromptTokensDetails {
			u.PromptTokensDetails = &promptDetailsJSON{CachedTokens: g.choices[0].cached}
		}
		out.data(chunk([]chatDeltaChoice{}, u))
	}
	out.done()
}
