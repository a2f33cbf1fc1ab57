package chat

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode"
)

// FuzzRender fuzzes the two inputs a render takes.
//
// Message content comes from clients: every real template must render any
// of it, without error, panic or hang. The template text is fuzzed too,
// and Render must return (a result or an error) for it; but the engine has
// no step, depth or memory limit (see the package doc), so templates whose
// text could loop or allocate without bound are skipped (boundedTemplate).
func FuzzRender(f *testing.F) {
	real := templates(f)
	for _, src := range real {
		f.Add(src, "hello")
	}
	for _, s := range []string{
		"{{ messages[0].content | trim }}",
		"{% for m in messages %}{{ loop.index }}{{ m.role | upper }}{% endfor %}",
		"{%- if tools %}{{ tools | tojson(indent=2) }}{% endif -%}",
		"{% set ns = namespace(x=1) %}{% set ns.x = ns.x + 1 %}{{ ns.x }}",
		"{{ raise_exception('no') }}",
		"{{ messages[-1].content.split('</think>')[-1].lstrip('\\n') }}",
		"{% for i in range(3) %}{% if i == 1 %}{% continue %}{% endif %}{{ i }}{% endfor %}",
		"{{ 'a' * 3 }}{{ [1, 2][::-1] }}{{ {'k': 1}.items() | list }}",
	} {
		f.Add(s, "<think>x</think>\n\ny")
	}
	f.Add("{{ x }}", "\xff\xfe invalid \u2028 東京 🙂 \"'\\ {{ }} {% %}")
	f.Fuzz(func(t *testing.T, tmpl, content string) {
		in := fuzzInput(content)
		for name, src := range real {
			if _, err := Render(src, in); err != nil {
				t.Fatalf("%s template fails on content %q: %v", name, content, err)
			}
		}
		if boundedTemplate(tmpl) {
			_, _ = Render(tmpl, in) // an error is fine; a panic or hang is not
		}
	})
}

// fuzzInput puts content in every place a conversation carries text.
func fuzzInput(content string) Input {
	schema, _ := json.Marshal(map[string]any{"type": "function", "function": map[string]any{
		"name": "f", "description": content, "parameters": map[string]any{"type": "object"}}})
	return Input{
		Messages: []map[string]any{
			{"role": "system", "content": content},
			{"role": "user", "content": content},
			{"role": "assistant", "content": "<think>" + content + "</think>" + content, "tool_calls": []any{
				map[string]any{"type": "function", "function": map[string]any{"name": content, "arguments": map[string]any{"q": content}}},
				map[string]any{"type": "function", "function": map[string]any{"name": "g", "arguments": content}}}},
			{"role": "tool", "content": content},
			{"role": "assistant", "content": content, "reasoning_content": content},
			{"role": "user", "content": content},
		},
		Tools:               []any{json.RawMessage(schema)},
		AddGenerationPrompt: true,
		Kwargs:              map[string]any{"enable_thinking": len(content)%2 == 0},
		EOSToken:            "<|im_end|>",
	}
}

// boundedTemplate reports whether a fuzzed template's text keeps its render
// finite on this engine: short, numbers of at most three digits and one
// '*' (so ranges, repeats and loops stay small), at most two loops, no
// macros (recursion), and none of the list and dict mutators the sandbox
// would refuse (a list appended to itself prints forever). A loop may not
// reassign variables, which could double a string per iteration.
func boundedTemplate(tmpl string) bool {
	if len(tmpl) > 512 || strings.Count(tmpl, "for") > 2 || strings.Count(tmpl, "*") > 1 {
		return false
	}
	for _, w := range []string{"macro", "call", "append", "insert", "extend", "update", "pop", "setdefault"} {
		if strings.Contains(tmpl, w) {
			return false
		}
	}
	if strings.Contains(tmpl, "for") && strings.Contains(tmpl, "set") {
		return false
	}
	digits := 0
	for _, r := range tmpl {
		if unicode.IsDigit(r) {
			if digits++; digits > 3 {
				return false
			}
		} else {
			digits = 0
		}
	}
	return true
}
