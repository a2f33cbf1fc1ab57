package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/lowbit-ai/lowbit/tokenizer"
)

// client sends requests to an OpenAI-compatible server.
type client struct {
	http  *http.Client
	base  string // scheme://host[:port][/prefix], no trailing slash
	model string
	tok   *tokenizer.Tokenizer
}

type streamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

// completionBody is vLLM's openai backend payload, field for field.
type completionBody struct {
	Model             string        `json:"model"`
	Prompt            string        `json:"prompt"`
	RepetitionPenalty float64       `json:"repetition_penalty"`
	MaxTokens         int           `json:"max_tokens"`
	Logprobs          *int          `json:"logprobs"`
	Stream            bool          `json:"stream"`
	StreamOptions     streamOptions `json:"stream_options"`
	IgnoreEOS         bool          `json:"ignore_eos,omitempty"`
}

// chatBody is vLLM's openai-chat backend payload.
type chatBody struct {
	Model               string        `json:"model"`
	Messages            []message     `json:"messages"`
	MaxCompletionTokens int           `json:"max_completion_tokens"`
	Stream              bool          `json:"stream"`
	StreamOptions       streamOptions `json:"stream_options"`
	IgnoreEOS           bool          `json:"ignore_eos,omitempty"`
}

type message struct {
	Role string `json:"role"`
	// Content is a string, or for user turns the list of parts vLLM's
	// benchmark sends ([{"type": "text", "text": ...}]).
	Content any `json:"content"`
}

type textPart struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

func userMessage(text string) message {
	return message{Role: "user", Content: []textPart{{Type: "text", Text: text}}}
}

// send sends r (after the chat history, for a chat) and measures it. t0 is
// the phase start that Record.Start counts from. The record's error says
// what failed; send itself never fails.
func (c *client) send(ctx context.Context, r RequestSpec, history []message, ignoreEOS bool, t0 time.Time) Record {
	rec := Record{Kind: r.Kind, Endpoint: r.Endpoint, PromptLen: r.PromptLen, MaxTokens: r.MaxTokens}
	var body any
	path := "/v1/completions"
	if r.Endpoint == Chat {
		path = "/v1/chat/completions"
		msgs := append(append([]message(nil), history...), userMessage(r.Prompt))
		body = chatBody{Model: c.model, Messages: msgs, MaxCompletionTokens: r.MaxTokens, Stream: true,
			StreamOptions: streamOptions{IncludeUsage: true}, IgnoreEOS: ignoreEOS}
	} else {
		body = completionBody{Model: c.model, Prompt: r.Prompt, RepetitionPenalty: 1, MaxTokens: r.MaxTokens,
			Stream: true, StreamOptions: streamOptions{IncludeUsage: true}, IgnoreEOS: ignoreEOS}
	}
	payload, err := json.Marshal(body)
	if err != nil {
		rec.Error = err.Error()
		return rec
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base+path, bytes.NewReader(payload))
	if err != nil {
		rec.Error = err.Error()
		return rec
	}
	req.Header.Set("Content-Type", "application/json")
	st := time.Now()
	rec.Start = st.Sub(t0).Seconds()
	err = c.stream(req, st, r.Endpoint == Chat, &rec)
	if err != nil {
		rec.Success = false
		rec.Error = err.Error()
		if rec.Latency == 0 {
			rec.Latency = time.Since(st).Seconds()
		}
		return rec
	}
	rec.Success = true
	if rec.OutputTokens == 0 {
		// vLLM's fallback when the server sent no usage: count the text.
		rec.OutputTokens = len(c.tok.EncodeWith(rec.GeneratedText, tokenizer.EncodeOptions{ParseSpecial: true}))
		rec.OutputCounted = true
	}
	return rec
}

// stream posts req and reads its SSE stream into rec.
func (c *client) stream(req *http.Request, st time.Time, chat bool, rec *Record) error {
	resp, err := c.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return httpError(resp)
	}
	sse := newSSEReader(resp.Body)
	var text strings.Builder
	first := false
	last := st
	for {
		data, err := sse.next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("reading the stream: %w", err)
		}
		if string(data) == "[DONE]" {
			break
		}
		ts := time.Now()
		ch, err := parseChunk(data)
		if err != nil {
			rec.GeneratedText = text.String()
			return err
		}
		if len(ch.Choices) > 0 {
			if !first {
				first = true
				rec.TTFT = ts.Sub(st).Seconds()
			} else {
				rec.ITL = append(rec.ITL, ts.Sub(last).Seconds())
			}
			text.WriteString(ch.text())
			last = ts
		}
		if ch.Usage != nil {
			rec.OutputTokens = ch.Usage.CompletionTokens
			rec.ServerPrompt = ch.Usage.PromptTokens
		}
		if chat {
			// vLLM's chat client ends the request at the last data message,
			// the usage chunk included.
			last = ts
		}
	}
	rec.GeneratedText = text.String()
	rec.Latency = last.Sub(st).Seconds()
	if !first {
		return errors.New("the stream ended without a message carrying a choice, so there is no first token")
	}
	return nil
}

// httpError describes a refused request by its status and the server's
// error message.
func httpError(resp *http.Response) error {
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	var e struct {
		Error   json.RawMessage `json:"error"`
		Message string          `json:"message"`
	}
	msg := strings.TrimSpace(string(clip(body)))
	if json.Unmarshal(body, &e) == nil {
		if len(e.Error) > 0 {
			msg = errorMessage(e.Error)
		} else if e.Message != "" {
			msg = e.Message
		}
	}
	return fmt.Errorf("HTTP %s: %s", resp.Status, msg)
}

// models returns the first model id of GET /v1/models, as vLLM's benchmark
// does when no model is given.
func (c *client) firstModel(ctx context.Context) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+"/v1/models", nil)
	if err != nil {
		return "", err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return "", httpError(resp)
	}
	var list struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 16<<20)).Decode(&list); err != nil {
		return "", fmt.Errorf("GET /v1/models: %w", err)
	}
	if len(list.Data) == 0 || list.Data[0].ID == "" {
		return "", errors.New("GET /v1/models lists no model; pass --model")
	}
	return list.Data[0].ID, nil
}
