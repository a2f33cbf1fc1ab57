package server

import (
	"fmt"
	"net/http"
)

type tokenizeResponse struct {
	Count       int      `json:"count"`
	MaxModelLen int      `json:"max_model_len"`
	Tokens      []int    `json:"tokens"`
	TokenStrs   []string `json:"token_strs"`
}

// handleTokenize serves POST /tokenize: vLLM's TokenizeCompletionRequest
// (prompt, add_special_tokens default true) or, when messages is given,
// TokenizeChatRequest (the chat template applied, add_special_tokens
// default false). token_strs are the vocabulary's own strings ("Ġthe"),
// convert_ids_to_tokens.
func (s *Server) handleTokenize(w http.ResponseWriter, r *http.Request) {
	b, e := readBody(w, r, s.opts.MaxRequestBytes)
	if e != nil {
		writeError(w, e)
		return
	}
	ids, e := s.tokenizeBody(b)
	if e != nil {
		writeError(w, e)
		return
	}
	strs, e := b.boolField("return_token_strs", false, true)
	if e != nil {
		writeError(w, e)
		return
	}
	resp := tokenizeResponse{Count: len(ids), MaxModelLen: s.opts.MaxModelLen, Tokens: ids}
	if resp.Tokens == nil {
		resp.Tokens = []int{}
	}
	if strs {
		resp.TokenStrs = make([]string, len(ids))
		for i, id := range ids {
			resp.TokenStrs[i] = s.tok.IDToken(id)
		}
	}
	writeJSON(w, http.StatusOK, resp)
}

func (s *Server) tokenizeBody(b *reqBody) ([]int, *apiError) {
	if _, chatStyle := b.m["messages"]; chatStyle {
		in, e := s.parseChatInput(b, true)
		if e != nil {
			return nil, e
		}
		addSpecial, e := b.boolField("add_special_tokens", false, false)
		if e != nil {
			return nil, e
		}
		if e := s.checkModel(b); e != nil {
			return nil, e
		}
		text, e := s.renderChatInput(in)
		if e != nil {
			return nil, e
		}
		return s.encode(text, addSpecial), nil
	}
	v, present := b.m["prompt"]
	if !present {
		return nil, (&validationError{typ: "missing", loc: []any{"body", "prompt"}, msg: "Field required", input: nil}).apiError()
	}
	text, ok := v.(string)
	if !ok {
		return nil, fieldErr("prompt", "string_type", "Input should be a valid string", v)
	}
	addSpecial, e := b.boolField("add_special_tokens", true, false)
	if e != nil {
		return nil, e
	}
	if e := s.checkModel(b); e != nil {
		return nil, e
	}
	return s.encode(text, addSpecial), nil
}

// handleDetokenize serves POST /detokenize: {"tokens": [...]} →
// {"prompt": text}, special tokens shown (tokenizer.decode's default).
func (s *Server) handleDetokenize(w http.ResponseWriter, r *http.Request) {
	b, e := readBody(w, r, s.opts.MaxRequestBytes)
	if e != nil {
		writeError(w, e)
		return
	}
	v, present := b.m["tokens"]
	if !present {
		writeError(w, (&validationError{typ: "missing", loc: []any{"body", "tokens"}, msg: "Field required", input: nil}).apiError())
		return
	}
	ids, e := intList("tokens", v, false)
	if e != nil {
		writeError(w, e)
		return
	}
	if e := s.checkModel(b); e != nil {
		writeError(w, e)
		return
	}
	for _, id := range ids {
		if id < 0 || id >= s.vocab {
			writeError(w, badRequest(fmt.Sprintf("Token id %d is out of vocabulary", id), "tokens", id))
			return
		}
	}
	writeJSON(w, http.StatusOK, map[string]string{"prompt": s.tok.Decode(ids, false)})
}
