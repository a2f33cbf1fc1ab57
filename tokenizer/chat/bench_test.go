package chat

import (
	"encoding/json"
	"fmt"
	"testing"
)

// tenTurns is a 10-turn conversation (a user and an assistant message per
// turn, reasoning in the assistant turns, a system prompt and a tool), the
// shape a chat server renders on every request.
func tenTurns() Input {
	msgs := []map[string]any{{"role": "system", "content": "You are a helpful assistant. Answer briefly and cite sources."}}
	for i := range 10 {
		msgs = append(msgs,
			map[string]any{"role": "user", "content": fmt.Sprintf("Question %d: what is the capital of country number %d, and why is it there?", i, i)},
			map[string]any{"role": "assistant", "content": fmt.Sprintf("<think>\nThe user asks about country %d. Recall its history.\n</think>\n\nThe capital of country %d sits on the river for trade reasons.", i, i)})
	}
	msgs = append(msgs, map[string]any{"role": "user", "content": "Thanks. One more: summarise all of the above."})
	tool, _ := json.Marshal(map[string]any{"type": "function", "function": map[string]any{
		"name": "search", "description": "Search the web.",
		"parameters": map[string]any{"type": "object", "properties": map[string]any{"query": map[string]any{"type": "string"}}, "required": []string{"query"}}}})
	return Input{Messages: msgs, Tools: []any{json.RawMessage(tool)}, AddGenerationPrompt: true,
		Kwargs: map[string]any{"enable_thinking": true}, EOSToken: "<|im_end|>"}
}

// BenchmarkRender10Turns renders tenTurns with Qwen3's template through
// Render, as the server calls it (the compiled template comes from the
// cache after the first call).
func BenchmarkRender10Turns(b *testing.B) {
	tmpl := qwen3Config(b).ChatTemplate
	in := tenTurns()
	out, err := Render(tmpl, in)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(out)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Render(tmpl, in); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkCompileQwen3 is what a cache miss costs.
func BenchmarkCompileQwen3(b *testing.B) {
	tmpl := qwen3Config(b).ChatTemplate
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Compile(tmpl); err != nil {
			b.Fatal(err)
		}
	}
}
