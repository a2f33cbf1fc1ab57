package kl

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/lowbit-ai/lowbit/runtime"
)

// Client talks to one vLLM-compatible OpenAI server.
type Client struct {
	// URL is the server's base URL, e.g. http://127.0.0.1:8000 (a trailing
	// /v1 is accepted).
	URL string
	// Model is the served model name; "" takes the first of /v1/models.
	Model string
	// HTTP is the client to use; nil is http.DefaultClient.
	HTTP *http.Client
}

func (c *Client) base() string {
	u := strings.TrimRight(c.URL, "/")
	return strings.TrimSuffix(u, "/v1")
}

// do POSTs (or GETs, when body is nil) path and decodes the JSON answer
// into out, turning an error answer into an error that quotes the server.
func (c *Client) do(ctx context.Context, path string, body, out any) error {
	method, rd := http.MethodGet, io.Reader(nil)
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		method, rd = http.MethodPost, bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base()+path, rd)
	if err != nil {
		return fmt.Errorf("kl: %s: %w", c.URL, err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	hc := c.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("kl: %w (is the server at %s running?)", err, c.URL)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("kl: %s%s: reading the answer: %w", c.base(), path, err)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("kl: %s%s: %s: %s", c.base(), path, resp.Status, errorMessage(data))
	}
	if err := decode(data, out); err != nil {
		return fmt.Errorf("kl: %s%s: %w", c.base(), path, err)
	}
	return nil
}

// decode is json.Unmarshal, or a copy of the raw answer when out is a
// *[]byte.
func decode(data []byte, out any) error {
	if p, ok := out.(*[]byte); ok {
		*p = data
		return nil
	}
	return json.Unmarshal(data, out)
}

// errorMessage extracts the message of a vLLM error object, with advice
// where the cause is known.
func errorMessage(data []byte) string {
	var e struct {
		Error *struct {
			Message string `json:"message"`
		} `json:"error"`
		Message string `json:"message"`
	}
	msg := strings.TrimSpace(string(data))
	if json.Unmarshal(data, &e) == nil {
		if e.Error != nil && e.Error.Message != "" {
			msg = e.Error.Message
		} else if e.Message != "" {
			msg = e.Message
		}
	}
	if len(msg) > 500 {
		msg = msg[:500] + "…"
	}
	if strings.Contains(msg, "greater than max allowed") {
		msg += " (start the server with --max-logprobs at least k, or lower -k)"
	}
	return msg
}

// model returns the served model name, asking /v1/models when unset.
func (c *Client) model(ctx context.Context) (string, error) {
	if c.Model != "" {
		return c.Model, nil
	}
	var list struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if err := c.do(ctx, "/v1/models", nil, &list); err != nil {
		return "", err
	}
	if len(list.Data) == 0 || list.Data[0].ID == "" {
		return "", fmt.Errorf("kl: %s/v1/models lists no model: name it", c.base())
	}
	c.Model = list.Data[0].ID
	return c.Model, nil
}

// Tokenize returns the server's token ids for a completions prompt (with
// its special tokens, as /v1/completions adds them).
func (c *Client) Tokenize(ctx context.Context, text string) ([]int, error) {
	m, err := c.model(ctx)
	if err != nil {
		return nil, err
	}
	var out struct {
		Tokens []int `json:"tokens"`
	}
	if err := c.do(ctx, "/tokenize", map[string]any{"model": m, "prompt": text, "add_special_tokens": true}, &out); err != nil {
		return nil, err
	}
	if len(out.Tokens) == 0 {
		return nil, fmt.Errorf("kl: %s/tokenize returned no tokens for a non-empty prompt", c.base())
	}
	return out.Tokens, nil
}

// PromptLogprobs asks /v1/completions for the prompt_logprobs (top k; -1 is
// the whole vocabulary) of the token ids and returns one Entry per token,
// nil for the first.
func (c *Client) PromptLogprobs(ctx context.Context, ids []int, k int) ([]*Entry, error) {
	m, err := c.model(ctx)
	if err != nil {
		return nil, err
	}
	var data []byte
	body := map[string]any{"model": m, "prompt": ids, "max_tokens": 1, "temperature": 0, "prompt_logprobs": k}
	if err := c.do(ctx, "/v1/completions", body, &data); err != nil {
		return nil, err
	}
	es, err := ParsePromptLogprobs(data, ids)
	if err != nil {
		return nil, fmt.Errorf("kl: %s: %w", c.base(), err)
	}
	return es, nil
}

// Sample generates up to n tokens after the ids with s (its Seed seeds
// the request) and returns their ids.
func (c *Client) Sample(ctx context.Context, ids []int, n int, s runtime.SamplingOptions) ([]int, error) {
	m, err := c.model(ctx)
	if err != nil {
		return nil, err
	}
	topK, topP := s.TopK, s.TopP
	if topK == 0 {
		topK = -1 // disabled in every vLLM version (newer ones also take 0)
	}
	if topP == 0 {
		topP = 1
	}
	body := map[string]any{"model": m, "prompt": ids, "max_tokens": n, "temperature": s.Temperature,
		"top_p": topP, "top_k": topK, "min_p": s.MinP, "seed": s.Seed,
		"return_token_ids": true, "logprobs": 0, "return_tokens_as_token_ids": true, "skip_special_tokens": false}
	var out struct {
		Choices []struct {
			TokenIDs []int `json:"token_ids"`
			Logprobs *struct {
				Tokens []string `json:"tokens"`
			} `json:"logprobs"`
		} `json:"choices"`
	}
	if err := c.do(ctx, "/v1/completions", body, &out); err != nil {
		return nil, err
	}
	if len(out.Choices) == 0 {
		return nil, fmt.Errorf("kl: %s: a completion without choices", c.base())
	}
	ch := out.Choices[0]
	if ch.TokenIDs != nil {
		return ch.TokenIDs, nil
	}
	// Servers without return_token_ids still name tokens by id in logprobs.
	if ch.Logprobs == nil {
		return nil, fmt.Errorf("kl: %s returned neither token_ids nor logprobs for a sampled continuation", c.base())
	}
	gen := make([]int, len(ch.Logprobs.Tokens))
	for i, t := range ch.Logprobs.Tokens {
		id, err := strconv.Atoi(strings.TrimPrefix(t, "token_id:"))
		if err != nil || !strings.HasPrefix(t, "token_id:") {
			return nil, fmt.Errorf("kl: %s: sampled token %q is not \"token_id:N\" (return_tokens_as_token_ids ignored?)", c.base(), t)
		}
		gen[i] = id
	}
	return gen, nil
}

// ParsePromptLogprobs reads the prompt_logprobs of the first choice of a
// /v1/completions answer for the prompt ids: a list with one entry per
// token, null first, then objects keyed by token id strings with logprob,
// rank and decoded_token. Every entry must hold its actual token.
func ParsePromptLogprobs(data []byte, ids []int) ([]*Entry, error) {
	var resp struct {
		Choices []struct {
			PromptLogprobs []map[string]struct {
				Logprob      *float64 `json:"logprob"`
				Rank         *int     `json:"rank"`
				DecodedToken *string  `json:"decoded_token"`
			} `json:"prompt_logprobs"`
		} `json:"choices"`
	}
	if err := json.Unmarshal(data, &resp); err != nil {
		return nil, fmt.Errorf("prompt_logprobs: %w", err)
	}
	if len(resp.Choices) == 0 {
		return nil, fmt.Errorf("prompt_logprobs: the answer has no choices")
	}
	pl := resp.Choices[0].PromptLogprobs
	switch {
	case pl == nil:
		return nil, fmt.Errorf("prompt_logprobs: the answer has none (does the server support prompt_logprobs?)")
	case len(pl) != len(ids):
		return nil, fmt.Errorf("prompt_logprobs: %d entries for %d prompt tokens", len(pl), len(ids))
	case len(pl) > 0 && pl[0] != nil:
		return nil, fmt.Errorf("prompt_logprobs: the first entry is not null")
	}
	out := make([]*Entry, len(pl))
	for t := 1; t < len(pl); t++ {
		if pl[t] == nil {
			return nil, fmt.Errorf("prompt_logprobs: entry %d is null", t)
		}
		e := &Entry{Tokens: make([]Logprob, 0, len(pl[t]))}
		for key, v := range pl[t] {
			id, err := strconv.Atoi(key)
			if err != nil || id < 0 || strconv.Itoa(id) != key {
				return nil, fmt.Errorf("prompt_logprobs: entry %d: key %q is not a token id", t, key)
			}
			if v.Logprob == nil || v.Rank == nil {
				return nil, fmt.Errorf("prompt_logprobs: entry %d: token %d lacks logprob or rank", t, id)
			}
			// A float32 log-softmax can round the argmax a hair above 0.
			if lp := *v.Logprob; lp > 1e-3 {
				return nil, fmt.Errorf("prompt_logprobs: entry %d: token %d has log-probability %g > 0", t, id, lp)
			}
			lp := Logprob{ID: id, Logprob: *v.Logprob, Rank: *v.Rank}
			if v.DecodedToken != nil {
				lp.Decoded = *v.DecodedToken
			}
			e.Tokens = append(e.Tokens, lp)
		}
		slices.SortFunc(e.Tokens, func(a, b Logprob) int { return a.ID - b.ID })
		if _, ok := e.Lookup(ids[t]); !ok {
			return nil, fmt.Errorf("prompt_logprobs: entry %d lacks the actual token %d (a vLLM-compatible server always lists it)", t, ids[t])
		}
		out[t] = e
	}
	return out, nil
}
