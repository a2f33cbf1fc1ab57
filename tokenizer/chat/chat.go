// Package chat renders a model's Jinja chat template (tokenizer_config.json's
// chat_template) into the prompt text, as transformers' apply_chat_template
// does.
package chat

import "errors"

// Input is what a template sees. Messages and Tools are JSON-shaped values
// (maps, slices, strings, numbers, bools, nil) as decoded from an OpenAI
// request, with message content already a string.
type Input struct {
	Messages            []map[string]any
	Tools               []any
	AddGenerationPrompt bool
	// Kwargs are extra template variables (chat_template_kwargs, e.g.
	// enable_thinking).
	Kwargs map[string]any
	// BOSToken and EOSToken are the special token strings ("" when unset).
	BOSToken, EOSToken string
}

// Render renders template with in.
func Render(template string, in Input) (string, error) {
	return "", errors.New("chat: not implemented yet")
}
