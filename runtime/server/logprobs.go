package server

import (
	"math"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/lowbit-ai/lowbit/runtime/engine"
)

// Log-probabilities leave the engine as, per position, the actual (or
// sampled) token with its true rank and the top k. vLLM turns each position
// into a Python dict keyed by token id: the actual token first, then the top
// k with ranks 1..k, an id already present keeping its place but taking the
// later value. Everything the API returns is a view of that dict.

// lpEntry is one entry of a position's dict.
type lpEntry struct {
	id      int
	logprob float32
	rank    int
	decoded string
}

// posDict builds the dict of one position. ctx are the actual tokens of
// the preceding positions (oldest first), used to decode byte fragments.
func (s *Server) posDict(p *engine.PositionLogprobs, ctx []int) []lpEntry {
	if p == nil {
		return nil
	}
	d := make([]lpEntry, 0, len(p.Top)+1)
	d = append(d, lpEntry{p.Token.ID, p.Token.Logprob, p.Token.Rank, s.decodedToken(p.Token.ID, ctx)})
	for i, t := range p.Top {
		e := lpEntry{t.ID, t.Logprob, i + 1, s.decodedToken(t.ID, ctx)}
		if t.ID == d[0].id {
			d[0] = e
			continue
		}
		d = append(d, e)
	}
	return d
}

// decodeOne is tokenizer.decode([id]) as vLLM calls it: special tokens
// shown.
func (s *Server) decodeOne(id int) string {
	return s.tok.Decode([]int{id}, false)
}

// decodedToken is a logprob entry's decoded_token: the token decoded alone,
// or, when that ends in U+FFFD (a fragment of a multi-byte character),
// vLLM's correction from up to four preceding actual tokens: the text the
// token completes, or "" while the character is still incomplete.
func (s *Server) decodedToken(id int, ctx []int) string {
	t := s.decodeOne(id)
	if !strings.HasSuffix(t, "\uFFFD") {
		return t
	}
	n := min(len(ctx), 4)
	for k := 1; k <= n; k++ {
		c := ctx[len(ctx)-k:]
		ids := make([]int, 0, k+1)
		ids = append(append(ids, c...), id)
		full := s.tok.Decode(ids, false)
		if strings.HasSuffix(full, "\uFFFD") {
			continue
		}
		clean := len(c)
		for j := len(c) - 1; j >= 0; j-- {
			if !strings.HasSuffix(s.decodeOne(c[j]), "\uFFFD") {
				break
			}
			clean = j
		}
		prefix := ""
		if clean > 0 {
			prefix = s.tok.Decode(c[:clean], false)
		}
		if strings.HasPrefix(full, prefix) {
			return full[len(prefix):]
		}
		// Longest common prefix, character by character.
		i := 0
		for i < len(prefix) && i < len(full) {
			r1, n1 := utf8.DecodeRuneInString(prefix[i:])
			r2, n2 := utf8.DecodeRuneInString(full[i:])
			if r1 != r2 || n1 != n2 {
				break
			}
			i += n1
		}
		return full[i:]
	}
	return ""
}

// contextBefore returns up to four tokens before position i of ids,
// starting no earlier than from.
func contextBefore(ids []int, i, from int) []int {
	lo := max(from, i-4)
	if lo >= i {
		return nil
	}
	return ids[lo:i]
}

// promptDicts builds the dicts of the prompt positions: nil for position
// 0, then one per position. The decoding context is the preceding prompt
// tokens, not counting position 0 (whose entry is None in vLLM).
func (s *Server) promptDicts(ids []int, plp []*engine.PositionLogprobs) [][]lpEntry {
	if plp == nil {
		return nil
	}
	out := make([][]lpEntry, len(ids))
	for t := 1; t < len(ids) && t < len(plp); t++ {
		out[t] = s.posDict(plp[t], contextBefore(ids, t, 1))
	}
	return out
}

// sampleDicts builds the dicts of generated positions start, start+1, ...
// (lps[i] is position start+i of tokens); the context is the preceding
// generated tokens.
func (s *Server) sampleDicts(tokens []int, lps []engine.PositionLogprobs, start int) [][]lpEntry {
	out := make([][]lpEntry, len(lps))
	for i := range lps {
		out[i] = s.posDict(&lps[i], contextBefore(tokens, start+i, 0))
	}
	return out
}

// logprobJSON is vLLM's Logprob dataclass.
type logprobJSON struct {
	Logprob      pyFloat `json:"logprob"`
	Rank         int     `json:"rank"`
	DecodedToken string  `json:"decoded_token"`
}

// promptLogprobsJSON renders prompt_logprobs: null for position 0, then
// objects keyed by token id as a string, actual token first; -inf is
// written -9999.0 (clamp_prompt_logprobs).
func promptLogprobsJSON(dicts [][]lpEntry) []any {
	out := make([]any, len(dicts))
	for i, d := range dicts {
		if d == nil {
			out[i] = nil
			continue
		}
		o := &orderedObject{}
		for _, e := range d {
			lp := pyFloat(e.logprob)
			if math.IsInf(float64(e.logprob), -1) {
				lp = -9999.0
			}
			o.set(strconv.Itoa(e.id), logprobJSON{Logprob: lp, Rank: e.rank, DecodedToken: e.decoded})
		}
		out[i] = o
	}
	return out
}

// completionLogprobsJSON is the completions API's logprobs object.
type completionLogprobsJSON struct {
	TextOffset    []int            `json:"text_offset"`
	TokenLogprobs []*pyFloat       `json:"token_logprobs"`
	Tokens        []string         `json:"tokens"`
	TopLogprobs   []*orderedObject `json:"top_logprobs"`
}

// tokenLabel is how a token is named in logprobs: its decoded text, or
// "token_id:N" with return_tokens_as_token_ids.
func tokenLabel(e lpEntry, asIDs bool) string {
	if asIDs {
		return "token_id:" + strconv.Itoa(e.id)
	}
	return e.decoded
}

// completionLogprobs is vLLM's _create_completion_logprobs over ids with
// their dicts (nil for a position without logprobs, the first echoed
// prompt token). Each top_logprobs object keeps the first numTop+1 entries
// of the dict, keyed by decoded token (a later equal key replaces the
// value); text_offset counts characters from offset0.
func (s *Server) completionLogprobs(ids []int, dicts [][]lpEntry, numTop, offset0 int, asIDs bool) *completionLogprobsJSON {
	out := &completionLogprobsJSON{TextOffset: []int{}, TokenLogprobs: []*pyFloat{}, Tokens: []string{}, TopLogprobs: []*orderedObject{}}
	lastLen := 0
	for i, id := range ids {
		var d []lpEntry
		if i < len(dicts) {
			d = dicts[i]
		}
		var tok string
		if d == nil {
			if asIDs {
				tok = "token_id:" + strconv.Itoa(id)
			} else {
				tok = s.decodeOne(id)
			}
			out.TokenLogprobs = append(out.TokenLogprobs, nil)
			out.TopLogprobs = append(out.TopLogprobs, nil)
		} else {
			step := d[0]
			for _, e := range d {
				if e.id == id {
					step = e
					break
				}
			}
			tok = tokenLabel(step, asIDs)
			lp := clampLogprob(step.logprob)
			out.TokenLogprobs = append(out.TokenLogprobs, &lp)
			top := &orderedObject{}
			for j, e := range d {
				if numTop >= j {
					top.set(tokenLabel(e, asIDs), clampLogprob(e.logprob))
				}
			}
			out.TopLogprobs = append(out.TopLogprobs, top)
		}
		out.Tokens = append(out.Tokens, tok)
		if i == 0 {
			out.TextOffset = append(out.TextOffset, offset0)
		} else {
			out.TextOffset = append(out.TextOffset, out.TextOffset[i-1]+lastLen)
		}
		lastLen = utf8.RuneCountInString(tok)
	}
	return out
}

// chatLogprob is ChatCompletionLogProb; chatLogprobContent adds the
// alternatives.
type chatLogprob struct {
	Token   string  `json:"token"`
	Logprob pyFloat `json:"logprob"`
	Bytes   []int   `json:"bytes"`
}

type chatLogprobContent struct {
	Token       string        `json:"token"`
	Logprob     pyFloat       `json:"logprob"`
	Bytes       []int         `json:"bytes"`
	TopLogprobs []chatLogprob `json:"top_logprobs"`
}

type chatLogprobsJSON struct {
	Content []chatLogprobContent `json:"content"`
}

func utf8Bytes(s string) []int {
	out := make([]int, len(s))
	for i := 0; i < len(s); i++ {
		out[i] = int(s[i])
	}
	return out
}

// chatLogprobs is vLLM's _create_chat_logprobs: per token its decoded text,
// logprob and UTF-8 bytes, and the first topN entries of its dict (all
// for -1) as alternatives.
func (s *Server) chatLogprobs(ids []int, dicts [][]lpEntry, topN int, asIDs bool) *chatLogprobsJSON {
	out := &chatLogprobsJSON{Content: []chatLogprobContent{}}
	for i, id := range ids {
		var d []lpEntry
		if i < len(dicts) {
			d = dicts[i]
		}
		var step *lpEntry
		for j := range d {
			if d[j].id == id {
				step = &d[j]
				break
			}
		}
		if step == nil {
			tok := s.decodeOne(id)
			if asIDs {
				tok = "token_id:" + strconv.Itoa(id)
			}
			out.Content = append(out.Content, chatLogprobContent{Token: tok, Logprob: -9999.0,
				Bytes: utf8Bytes(tok), TopLogprobs: []chatLogprob{}})
			continue
		}
		c := chatLogprobContent{Token: tokenLabel(*step, asIDs), Logprob: clampLogprob(step.logprob),
			Bytes: utf8Bytes(step.decoded), TopLogprobs: []chatLogprob{}}
		for j, e := range d {
			if topN == -1 || j < topN {
				tok := tokenLabel(e, asIDs)
				c.TopLogprobs = append(c.TopLogprobs, chatLogprob{Token: tok, Logprob: clampLogprob(e.logprob), Bytes: utf8Bytes(tok)})
			}
		}
		out.Content = append(out.Content, c)
	}
	return out
}
