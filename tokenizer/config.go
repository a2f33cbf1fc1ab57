package tokenizer

import (
	"encoding/json"
	"fmt"
)

// Config is what the tokenizer keeps of tokenizer_config.json.
type Config struct {
	TokenizerClass string
	// Special token names ("" when unset), e.g. Qwen3: EOS "<|im_end|>",
	// Pad "<|endoftext|>", no BOS.
	BOSToken, EOSToken, PadToken, UnkToken string
	AdditionalSpecialTokens                []string
	AddBOSToken, AddEOSToken               bool
	// SplitSpecialTokens makes Encode treat special-token text as plain text.
	SplitSpecialTokens bool
	// Errors is the decode error mode; only "replace" (the default) exists here.
	Errors         string
	ModelMaxLength float64
	// ChatTemplate is the chat_template string, kept as-is (for a named list
	// of templates, the one named "default"); ChatTemplates has them all.
	ChatTemplate  string
	ChatTemplates map[string]string
}

// tokenName accepts a token given as a string or as an AddedToken object.
func tokenName(raw json.RawMessage) (string, error) {
	if isNull(raw) {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil
	}
	var o struct {
		Content *string `json:"content"`
	}
	if err := json.Unmarshal(raw, &o); err != nil || o.Content == nil {
		return "", fmt.Errorf("token %s is neither a string nor an object with content", raw)
	}
	return *o.Content, nil
}

// SetConfig parses tokenizer_config.json and applies it: special-token
// names, split_special_tokens (Encode's default), the chat template. The
// added_tokens_decoder entries must agree with tokenizer.json.
func (t *Tokenizer) SetConfig(data []byte) error {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil {
		return fmt.Errorf("tokenizer: tokenizer_config.json: %w", err)
	}
	c := &Config{Errors: "replace", ChatTemplates: map[string]string{}}
	fail := func(field string, err error) error {
		return fmt.Errorf("tokenizer: tokenizer_config.json: %s: %v", field, err)
	}
	for field, dst := range map[string]*string{"bos_token": &c.BOSToken, "eos_token": &c.EOSToken,
		"pad_token": &c.PadToken, "unk_token": &c.UnkToken} {
		if v, ok := raw[field]; ok {
			name, err := tokenName(v)
			if err != nil {
				return fail(field, err)
			}
			if name != "" {
				if _, ok := t.TokenID(name); !ok {
					return fail(field, fmt.Errorf("token %q is not in the vocabulary", name))
				}
			}
			*dst = name
		}
	}
	if v, ok := raw["additional_special_tokens"]; ok && !isNull(v) {
		var list []json.RawMessage
		if err := json.Unmarshal(v, &list); err != nil {
			return fail("additional_special_tokens", err)
		}
		for _, e := range list {
			name, err := tokenName(e)
			if err != nil {
				return fail("additional_special_tokens", err)
			}
			c.AdditionalSpecialTokens = append(c.AdditionalSpecialTokens, name)
		}
	}
	opt := func(field string, v any) error {
		if r, ok := raw[field]; ok && !isNull(r) {
			if err := json.Unmarshal(r, v); err != nil {
				return fail(field, err)
			}
		}
		return nil
	}
	for field, v := range map[string]any{"tokenizer_class": &c.TokenizerClass, "add_bos_token": &c.AddBOSToken,
		"add_eos_token": &c.AddEOSToken, "split_special_tokens": &c.SplitSpecialTokens,
		"errors": &c.Errors, "model_max_length": &c.ModelMaxLength} {
		if err := opt(field, v); err != nil {
			return err
		}
	}
	if c.Errors != "replace" {
		return fail("errors", fmt.Errorf("%q is not supported (only \"replace\", as the fast tokenizer)", c.Errors))
	}
	if r, ok := raw["chat_template"]; ok && !isNull(r) {
		if err := json.Unmarshal(r, &c.ChatTemplate); err != nil {
			var list []struct {
				Name     string `json:"name"`
				Template string `json:"template"`
			}
			if err2 := json.Unmarshal(r, &list); err2 != nil {
				return fail("chat_template", err)
			}
			for _, e := range list {
				c.ChatTemplates[e.Name] = e.Template
			}
			c.ChatTemplate = c.ChatTemplates["default"]
		} else {
			c.ChatTemplates["default"] = c.ChatTemplate
		}
	}
	if r, ok := raw["added_tokens_decoder"]; ok && !isNull(r) {
		var dec map[string]struct {
			Content string `json:"content"`
			Special *bool  `json:"special"`
		}
		if err := json.Unmarshal(r, &dec); err != nil {
			return fail("added_tokens_decoder", err)
		}
		for idStr, e := range dec {
			var id int
			if _, err := fmt.Sscan(idStr, &id); err != nil {
				return fail("added_tokens_decoder", fmt.Errorf("bad id %q", idStr))
			}
			a, ok := t.addedByID[id]
			if !ok || a.Content != e.Content || (e.Special != nil && *e.Special != a.Special) {
				return fail("added_tokens_decoder", fmt.Errorf("id %d %q disagrees with tokenizer.json's added_tokens", id, e.Content))
			}
		}
	}
	t.Config = c
	t.parseSpecialDefault = !c.SplitSpecialTokens
	return nil
}

func (t *Tokenizer) configTokenID(name string) (int, bool) {
	if name == "" {
		return 0, false
	}
	return t.TokenID(name)
}

// EOSID returns the id of the config's eos_token (Qwen3: <|im_end|>).
func (t *Tokenizer) EOSID() (int, bool) {
	if t.Config == nil {
		return 0, false
	}
	return t.configTokenID(t.Config.EOSToken)
}

// BOSID returns the id of the config's bos_token (Qwen3: none).
func (t *Tokenizer) BOSID() (int, bool) {
	if t.Config == nil {
		return 0, false
	}
	return t.configTokenID(t.Config.BOSToken)
}

// PadID returns the id of the config's pad_token (Qwen3: <|endoftext|>).
func (t *Tokenizer) PadID() (int, bool) {
	if t.Config == nil {
		return 0, false
	}
	return t.configTokenID(t.Config.PadToken)
}
