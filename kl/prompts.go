package kl

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"unicode/utf8"
)

// Prompt is one prompt to score: text, or token ids that are sent as they
// are.
type Prompt struct {
	Name string
	Text string
	IDs  []int
}

// builtinJSONL is the builtin prompt set: 22 short texts in English,
// Chinese, Japanese, Korean, German, French and Spanish, Go, Python and SQL
// code, JSON, Markdown, arithmetic, a dialogue, a list and one Qwen3 chat
// turn, written for lowbit, plus three public-domain passages (the opening
// of Jane Austen's Pride and Prejudice, 1813; Lincoln's Gettysburg Address,
// 1863; the United States Declaration of Independence, 1776).
//
//go:embed prompts/builtin.jsonl
var builtinJSONL []byte

// Builtin returns the builtin prompt set.
func Builtin() []Prompt {
	ps, err := ParsePrompts(builtinJSONL, true)
	if err != nil {
		panic("kl: the builtin prompts do not parse: " + err.Error())
	}
	return ps
}

// LoadPrompts reads prompts from path, or returns the builtin set for
// "builtin". A file ending in .jsonl holds one JSON value per line: a
// string, or an object with "prompt" (a string or a list of token ids),
// "text" or "prompt_token_ids", and an optional "name". Any other file
// holds one text prompt per non-empty line.
func LoadPrompts(path string) ([]Prompt, error) {
	if path == "builtin" {
		return Builtin(), nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("kl: prompts: %w", err)
	}
	ps, err := ParsePrompts(data, strings.HasSuffix(path, ".jsonl"))
	if err != nil {
		return nil, fmt.Errorf("kl: prompts %s: %w", path, err)
	}
	return ps, nil
}

// ParsePrompts parses a prompts file's contents: JSON lines when jsonl,
// else one text prompt per non-empty line. It fails on an empty set, a line
// it cannot read, invalid UTF-8 and negative token ids.
func ParsePrompts(data []byte, jsonl bool) ([]Prompt, error) {
	var out []Prompt
	for i, line := range bytes.Split(data, []byte("\n")) {
		line = bytes.TrimRight(line, "\r")
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		if !utf8.Valid(line) {
			return nil, fmt.Errorf("line %d is not valid UTF-8", i+1)
		}
		if !jsonl {
			out = append(out, Prompt{Name: fmt.Sprintf("line %d", i+1), Text: string(line)})
			continue
		}
		p, err := parsePromptLine(line)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w (want a JSON string or {\"prompt\": text or token ids})", i+1, err)
		}
		if p.Name == "" {
			p.Name = fmt.Sprintf("line %d", i+1)
		}
		out = append(out, p)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no prompts")
	}
	return out, nil
}

func parsePromptLine(line []byte) (Prompt, error) {
	var s string
	if json.Unmarshal(line, &s) == nil {
		if s == "" {
			return Prompt{}, fmt.Errorf("empty prompt")
		}
		return Prompt{Text: s}, nil
	}
	var obj struct {
		Name           string          `json:"name"`
		Prompt         json.RawMessage `json:"prompt"`
		Text           *string         `json:"text"`
		PromptTokenIDs []int           `json:"prompt_token_ids"`
	}
	dec := json.NewDecoder(bytes.NewReader(line))
	if err := dec.Decode(&obj); err != nil {
		return Prompt{}, err
	}
	if dec.More() {
		return Prompt{}, fmt.Errorf("more than one JSON value")
	}
	p := Prompt{Name: obj.Name}
	n := 0
	if obj.Prompt != nil {
		n++
		if err := json.Unmarshal(obj.Prompt, &p.Text); err != nil {
			p.Text = ""
			if err := json.Unmarshal(obj.Prompt, &p.IDs); err != nil {
				return Prompt{}, fmt.Errorf("\"prompt\" is neither a string nor a list of token ids")
			}
		}
	}
	if obj.Text != nil {
		n++
		p.Text = *obj.Text
	}
	if obj.PromptTokenIDs != nil {
		n++
		p.IDs = obj.PromptTokenIDs
	}
	switch {
	case n != 1:
		return Prompt{}, fmt.Errorf("give exactly one of \"prompt\", \"text\" and \"prompt_token_ids\"")
	case p.Text == "" && len(p.IDs) == 0:
		return Prompt{}, fmt.Errorf("empty prompt")
	case !utf8.ValidString(p.Text):
		return Prompt{}, fmt.Errorf("the prompt is not valid UTF-8")
	}
	for _, id := range p.IDs {
		if id < 0 {
			return Prompt{}, fmt.Errorf("negative token id %d", id)
		}
	}
	return p, nil
}
