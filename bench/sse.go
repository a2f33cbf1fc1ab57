package bench

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// sseReader returns the data lines of a Server-Sent Events stream, one at a
// time, as vLLM's benchmark client takes them: every line that starts with
// "data:" is one message (with or without the space after the colon, and
// with surrounding whitespace trimmed); comments (":ping"), event:, id: and
// retry: lines and blank lines are skipped; lines may end in "\n" or
// "\r\n"; a last data line without a newline still counts.
type sseReader struct {
	r *bufio.Reader
}

// maxSSELine bounds one line, so that a broken server cannot make the
// client buffer without end.
const maxSSELine = 64 << 20

func newSSEReader(r io.Reader) *sseReader { return &sseReader{r: bufio.NewReaderSize(r, 64<<10)} }

// next returns the next data payload, or io.EOF at the end of the stream.
func (s *sseReader) next() ([]byte, error) {
	var line []byte
	for {
		chunk, err := s.r.ReadSlice('\n')
		line = append(line, chunk...)
		if err == bufio.ErrBufferFull {
			if len(line) > maxSSELine {
				return nil, fmt.Errorf("an SSE line longer than %d bytes", maxSSELine)
			}
			continue
		}
		if err != nil && err != io.EOF {
			return nil, err
		}
		if payload, ok := dataPayload(line); ok {
			return payload, nil
		}
		if err == io.EOF {
			return nil, io.EOF
		}
		line = line[:0]
	}
}

func dataPayload(line []byte) ([]byte, bool) {
	rest, ok := bytes.CutPrefix(line, []byte("data:"))
	if !ok {
		return nil, false
	}
	return bytes.TrimSpace(rest), true
}

// chunk is the part of a streamed completion or chat chunk the benchmark
// reads; a chunk may instead be an error object (vLLM's mid-stream error).
type chunk struct {
	Choices []struct {
		Text  *string `json:"text"`
		Delta *struct {
			Content          *string `json:"content"`
			ReasoningContent *string `json:"reasoning_content"`
			Reasoning        *string `json:"reasoning"`
		} `json:"delta"`
	} `json:"choices"`
	Usage *struct {
		PromptTokens     int `json:"prompt_tokens"`
		CompletionTokens int `json:"completion_tokens"`
	} `json:"usage"`
	Error json.RawMessage `json:"error"`
}

// text returns the first choice's new text: completions' text, or chat's
// content, else its reasoning (vLLM counts chain-of-thought as output).
func (c *chunk) text() string {
	ch := c.Choices[0]
	switch {
	case ch.Text != nil:
		return *ch.Text
	case ch.Delta == nil:
		return ""
	case ch.Delta.Content != nil && *ch.Delta.Content != "":
		return *ch.Delta.Content
	case ch.Delta.ReasoningContent != nil:
		return *ch.Delta.ReasoningContent
	case ch.Delta.Reasoning != nil:
		return *ch.Delta.Reasoning
	}
	return ""
}

// parseChunk decodes one data payload. An error object (vLLM sends
// {"error": {...}} and then [DONE] when generation fails mid-stream) comes
// back as an error with the server's message.
func parseChunk(data []byte) (*chunk, error) {
	var c chunk
	if err := json.Unmarshal(data, &c); err != nil {
		return nil, fmt.Errorf("a stream message that is not JSON: %s", clip(data))
	}
	if len(c.Error) > 0 && !bytes.Equal(c.Error, []byte("null")) {
		return nil, errors.New("the server reported an error mid-stream: " + errorMessage(c.Error))
	}
	return &c, nil
}

// errorMessage returns the message of an OpenAI/vLLM error object (either
// {"message": ...} or a bare string), or the raw JSON.
func errorMessage(raw json.RawMessage) string {
	var obj struct {
		Message string `json:"message"`
	}
	if json.Unmarshal(raw, &obj) == nil && obj.Message != "" {
		return obj.Message
	}
	var s string
	if json.Unmarshal(raw, &s) == nil && s != "" {
		return s
	}
	return string(clip(raw))
}

// clip shortens b for an error message.
func clip(b []byte) []byte {
	if len(b) > 300 {
		return append(bytes.Clone(b[:300]), "..."...)
	}
	return b
}
