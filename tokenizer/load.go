package tokenizer

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"

	"golang.org/x/text/unicode/norm"
)

// rawComponent is any component object of tokenizer.json.
type rawComponent map[string]json.RawMessage

func parseComponent(raw json.RawMessage, what string) (rawComponent, string, error) {
	if len(raw) == 0 || bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
		return nil, "", nil
	}
	mm, err := members(raw)
	if err != nil {
		return nil, "", fmt.Errorf("%s: %v", what, err)
	}
	c := rawComponent{}
	for k, v := range mm {
		c[k] = v
	}
	var typ string
	if t, ok := c["type"]; ok {
		if err := json.Unmarshal(t, &typ); err != nil {
			return nil, "", fmt.Errorf("%s: type: %v", what, err)
		}
	}
	if typ == "" {
		return nil, "", fmt.Errorf("%s: no \"type\"", what)
	}
	return c, typ, nil
}

// field decodes c[name] into v; missing fields are an error unless optional.
func (c rawComponent) field(name string, v any, optional bool) error {
	raw, ok := c[name]
	if !ok {
		if optional {
			return nil
		}
		return fmt.Errorf("missing field %q", name)
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return fmt.Errorf("field %q: %v", name, err)
	}
	return nil
}

func isNull(raw json.RawMessage) bool {
	return len(raw) == 0 || bytes.Equal(bytes.TrimSpace(raw), []byte("null"))
}

type fileJSON struct {
	Version       *string
	Truncation    json.RawMessage
	Padding       json.RawMessage
	AddedTokens   []json.RawMessage
	Normalizer    json.RawMessage
	PreTokenizer  json.RawMessage
	Model         json.RawMessage
	PostProcessor json.RawMessage
	Decoder       json.RawMessage
}

// splitFile splits tokenizer.json into its members without decoding the
// large model twice (see jsonscan.go); each small member is decoded by
// encoding/json.
func splitFile(data []byte) (*fileJSON, error) {
	m, err := members(data)
	if err != nil {
		return nil, err
	}
	f := &fileJSON{Truncation: m["truncation"], Padding: m["padding"], Normalizer: m["normalizer"],
		PreTokenizer: m["pre_tokenizer"], Model: m["model"], PostProcessor: m["post_processor"], Decoder: m["decoder"]}
	if v, ok := m["version"]; ok {
		if err := json.Unmarshal(v, &f.Version); err != nil {
			return nil, fmt.Errorf("version: %v", err)
		}
	}
	if v, ok := m["added_tokens"]; ok && !isNull(v) {
		if err := json.Unmarshal(v, &f.AddedTokens); err != nil {
			return nil, fmt.Errorf("added_tokens: %v", err)
		}
	}
	return f, nil
}

// Load parses a tokenizer.json. It fails, naming the component, on anything
// it cannot reproduce exactly.
func Load(tokenizerJSON []byte) (*Tokenizer, error) {
	classOnce.Do(buildClassTab)
	f, err := splitFile(tokenizerJSON)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: parse tokenizer.json: %w", err)
	}
	if f.Version != nil && *f.Version != "1.0" {
		return nil, fmt.Errorf("tokenizer: unknown tokenizer.json version %q", *f.Version)
	}
	if !isNull(f.Truncation) {
		return nil, errors.New("tokenizer: truncation is not supported (it must be null)")
	}
	if !isNull(f.Padding) {
		return nil, errors.New("tokenizer: padding is not supported (it must be null)")
	}
	t := &Tokenizer{}
	if t.normalizers, err = parseNormalizer(f.Normalizer); err != nil {
		return nil, fmt.Errorf("tokenizer: normalizer: %w", err)
	}
	if err = t.parsePreTokenizer(f.PreTokenizer); err != nil {
		return nil, fmt.Errorf("tokenizer: pre_tokenizer: %w", err)
	}
	if t.model, err = parseModel(f.Model); err != nil {
		return nil, fmt.Errorf("tokenizer: model: %w", err)
	}
	if err = t.parseDecoder(f.Decoder); err != nil {
		return nil, fmt.Errorf("tokenizer: decoder: %w", err)
	}
	if err = t.addTokens(f.AddedTokens); err != nil {
		return nil, fmt.Errorf("tokenizer: added_tokens: %w", err)
	}
	if err = t.parsePostProcessor(f.PostProcessor); err != nil {
		return nil, fmt.Errorf("tokenizer: post_processor: %w", err)
	}
	t.buildDecodeTable()
	t.parseSpecialDefault = true
	return t, nil
}

// LoadDir loads dir/tokenizer.json and, if present, dir/tokenizer_config.json.
func LoadDir(dir string) (*Tokenizer, error) {
	data, err := os.ReadFile(filepath.Join(dir, "tokenizer.json"))
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	t, err := Load(data)
	if err != nil {
		return nil, fmt.Errorf("%w (in %s)", err, dir)
	}
	cfgPath := filepath.Join(dir, "tokenizer_config.json")
	cfgData, err := os.ReadFile(cfgPath)
	if errors.Is(err, os.ErrNotExist) {
		return t, nil
	}
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	if err := t.SetConfig(cfgData); err != nil {
		return nil, fmt.Errorf("%w (in %s)", err, cfgPath)
	}
	return t, nil
}

type normForm = norm.Form

func parseNormalizer(raw json.RawMessage) ([]normForm, error) {
	c, typ, err := parseComponent(raw, "normalizer")
	if err != nil || c == nil {
		return nil, err
	}
	switch typ {
	case "NFC":
		return []normForm{norm.NFC}, nil
	case "NFD":
		return []normForm{norm.NFD}, nil
	case "NFKC":
		return []normForm{norm.NFKC}, nil
	case "NFKD":
		return []normForm{norm.NFKD}, nil
	case "Sequence":
		var subs []json.RawMessage
		if err := c.field("normalizers", &subs, false); err != nil {
			return nil, fmt.Errorf("Sequence: %v", err)
		}
		var out []normForm
		for i, s := range subs {
			if isNull(s) {
				return nil, fmt.Errorf("Sequence[%d]: null", i)
			}
			f, err := parseNormalizer(s)
			if err != nil {
				return nil, fmt.Errorf("Sequence[%d]: %w", i, err)
			}
			out = append(out, f...)
		}
		return out, nil
	}
	return nil, fmt.Errorf("unsupported normalizer type %q", typ)
}

// preStep is one pre-tokenizer: it splits a piece into sub-pieces.
type preStep interface {
	split(s string, emit func(string))
}

func (t *Tokenizer) parsePreTokenizer(raw json.RawMessage) error {
	steps, err := parsePreSteps(raw)
	if err != nil {
		return err
	}
	for i, s := range steps {
		if bl, ok := s.(*byteLevelStep); ok {
			if i != len(steps)-1 {
				return errors.New("ByteLevel must be the last pre-tokenizer")
			}
			t.byteLevel = true
			if !bl.addPrefixSpace && bl.re == nil {
				steps = steps[:i] // nothing to split; the mapping is done by the model step
			}
		}
	}
	t.preSteps = steps
	return nil
}

func parsePreSteps(raw json.RawMessage) ([]preStep, error) {
	c, typ, err := parseComponent(raw, "pre_tokenizer")
	if err != nil || c == nil {
		return nil, err
	}
	switch typ {
	case "Sequence":
		var subs []json.RawMessage
		if err := c.field("pretokenizers", &subs, false); err != nil {
			return nil, fmt.Errorf("Sequence: %v", err)
		}
		var out []preStep
		for i, s := range subs {
			if isNull(s) {
				return nil, fmt.Errorf("Sequence[%d]: null", i)
			}
			st, err := parsePreSteps(s)
			if err != nil {
				return nil, fmt.Errorf("Sequence[%d]: %w", i, err)
			}
			out = append(out, st...)
		}
		return out, nil
	case "Split":
		var pat map[string]string
		if err := c.field("pattern", &pat, false); err != nil {
			return nil, fmt.Errorf("Split: %v", err)
		}
		var behavior string
		var invert bool
		if err := c.field("behavior", &behavior, false); err != nil {
			return nil, fmt.Errorf("Split: %v", err)
		}
		if err := c.field("invert", &invert, false); err != nil {
			return nil, fmt.Errorf("Split: %v", err)
		}
		b, ok := map[string]splitBehavior{"Removed": bRemoved, "Isolated": bIsolated,
			"MergedWithPrevious": bMergedWithPrevious, "MergedWithNext": bMergedWithNext,
			"Contiguous": bContiguous}[behavior]
		if !ok {
			return nil, fmt.Errorf("Split: unknown behavior %q", behavior)
		}
		if len(pat) != 1 {
			return nil, fmt.Errorf("Split: pattern must be {\"Regex\": ...} or {\"String\": ...}, got %v", pat)
		}
		var m matcher
		if r, ok := pat["Regex"]; ok {
			m, err = newMatcher(r, false)
		} else if s, ok := pat["String"]; ok {
			m, err = newMatcher(s, true)
		} else {
			return nil, fmt.Errorf("Split: unknown pattern kind %v", pat)
		}
		if err != nil {
			return nil, fmt.Errorf("Split: %w", err)
		}
		return []preStep{&splitStep{m: m, behavior: b, invert: invert}}, nil
	case "ByteLevel":
		var s byteLevelStep
		useRegex := true
		var trim bool
		if err := c.field("add_prefix_space", &s.addPrefixSpace, false); err != nil {
			return nil, fmt.Errorf("ByteLevel: %v", err)
		}
		if err := c.field("trim_offsets", &trim, false); err != nil {
			return nil, fmt.Errorf("ByteLevel: %v", err)
		}
		if err := c.field("use_regex", &useRegex, true); err != nil {
			return nil, fmt.Errorf("ByteLevel: %v", err)
		}
		if useRegex {
			s.re = scanMatcher{scanGPT2}
		}
		return []preStep{&s}, nil
	}
	return nil, fmt.Errorf("unsupported pre_tokenizer type %q", typ)
}

func parseModel(raw json.RawMessage) (*bpe, error) {
	c, typ, err := parseComponent(raw, "model")
	if err != nil {
		return nil, err
	}
	if c == nil {
		return nil, errors.New("missing")
	}
	if typ != "BPE" {
		return nil, fmt.Errorf("unsupported model type %q (only BPE)", typ)
	}
	var dropout *float64
	if err := c.field("dropout", &dropout, true); err != nil {
		return nil, err
	}
	if dropout != nil && *dropout != 0 {
		return nil, fmt.Errorf("BPE dropout %v is not supported (it must be null)", *dropout)
	}
	var unk, prefix, suffix *string
	var fuseUnk, byteFallback, ignoreMerges *bool
	for _, f := range []struct {
		name string
		v    any
	}{{"unk_token", &unk}, {"continuing_subword_prefix", &prefix}, {"end_of_word_suffix", &suffix},
		{"fuse_unk", &fuseUnk}, {"byte_fallback", &byteFallback}, {"ignore_merges", &ignoreMerges}} {
		if err := c.field(f.name, f.v, true); err != nil {
			return nil, err
		}
	}
	rawVocab, ok := c["vocab"]
	if !ok {
		return nil, errors.New("missing field \"vocab\"")
	}
	vocab, err := parseVocab(rawVocab)
	if err != nil {
		return nil, err
	}
	rawMerges, ok := c["merges"]
	if !ok {
		return nil, errors.New("missing field \"merges\"")
	}
	merges, err := parseMerges(rawMerges)
	if err != nil {
		return nil, err
	}
	deref := func(p *string) string {
		if p == nil {
			return ""
		}
		return *p
	}
	derefB := func(p *bool) bool { return p != nil && *p }
	return newBPE(vocab, merges, unk, deref(prefix), deref(suffix), derefB(fuseUnk), derefB(byteFallback), derefB(ignoreMerges))
}

func (t *Tokenizer) parseDecoder(raw json.RawMessage) error {
	c, typ, err := parseComponent(raw, "decoder")
	if err != nil {
		return err
	}
	if c == nil {
		return errors.New("null decoder is not supported (only ByteLevel)")
	}
	if typ != "ByteLevel" {
		return fmt.Errorf("unsupported decoder type %q (only ByteLevel)", typ)
	}
	return nil
}

func (t *Tokenizer) parsePostProcessor(raw json.RawMessage) error {
	c, typ, err := parseComponent(raw, "post_processor")
	if err != nil || c == nil {
		return err
	}
	switch typ {
	case "ByteLevel":
		return nil // offsets only
	case "Sequence":
		var subs []json.RawMessage
		if err := c.field("processors", &subs, false); err != nil {
			return fmt.Errorf("Sequence: %v", err)
		}
		for i, s := range subs {
			if err := t.parsePostProcessor(s); err != nil {
				return fmt.Errorf("Sequence[%d]: %w", i, err)
			}
		}
		return nil
	case "TemplateProcessing":
		if t.template != nil {
			return errors.New("more than one TemplateProcessing")
		}
		var single []map[string]struct {
			ID     string `json:"id"`
			TypeID int    `json:"type_id"`
		}
		var special map[string]struct {
			ID  string   `json:"id"`
			IDs []int    `json:"ids"`
			Tok []string `json:"tokens"`
		}
		if err := c.field("single", &single, false); err != nil {
			return fmt.Errorf("TemplateProcessing: %v", err)
		}
		if err := c.field("special_tokens", &special, false); err != nil {
			return fmt.Errorf("TemplateProcessing: %v", err)
		}
		tp := &template{}
		seenSeq := false
		for _, piece := range single {
			if len(piece) != 1 {
				return fmt.Errorf("TemplateProcessing: bad piece %v", piece)
			}
			if p, ok := piece["SpecialToken"]; ok {
				st, ok := special[p.ID]
				if !ok {
					return fmt.Errorf("TemplateProcessing: special token %q has no entry in special_tokens", p.ID)
				}
				ids := make([]int, len(st.IDs))
				copy(ids, st.IDs)
				if seenSeq {
					tp.suffix = append(tp.suffix, ids...)
				} else {
					tp.prefix = append(tp.prefix, ids...)
				}
			} else if p, ok := piece["Sequence"]; ok {
				if p.ID != "A" || seenSeq {
					return fmt.Errorf("TemplateProcessing: single template must hold sequence A once, got %q", p.ID)
				}
				seenSeq = true
			} else {
				return fmt.Errorf("TemplateProcessing: bad piece %v", piece)
			}
		}
		if !seenSeq {
			return errors.New("TemplateProcessing: single template has no sequence A")
		}
		t.template = tp
		return nil
	}
	return fmt.Errorf("unsupported post_processor type %q", typ)
}

// addTokens registers the added tokens as tokenizers' AddedVocabulary
// add_tokens does, and checks that the ids it assigns are the ids in the
// file (HF only warns and uses its own; we refuse such files).
func (t *Tokenizer) addTokens(raws []json.RawMessage) error {
	t.addedByID = map[int]*AddedToken{}
	t.addedByContent = map[string]int{}
	t.specialContent = map[string]bool{}
	vocabSize := len(t.model.vocab)
	nextID := vocabSize
	for _, raw := range raws {
		var a struct {
			ID         *int    `json:"id"`
			Content    *string `json:"content"`
			SingleWord *bool   `json:"single_word"`
			LStrip     *bool   `json:"lstrip"`
			RStrip     *bool   `json:"rstrip"`
			Normalized *bool   `json:"normalized"`
			Special    *bool   `json:"special"`
		}
		if err := json.Unmarshal(raw, &a); err != nil {
			return err
		}
		if a.ID == nil || a.Content == nil || a.SingleWord == nil || a.LStrip == nil || a.RStrip == nil || a.Normalized == nil || a.Special == nil {
			return fmt.Errorf("token %s: needs id, content, single_word, lstrip, rstrip, normalized and special", raw)
		}
		tok := &AddedToken{ID: *a.ID, Content: *a.Content, SingleWord: *a.SingleWord, LStrip: *a.LStrip,
			RStrip: *a.RStrip, Normalized: *a.Normalized, Special: *a.Special}
		if tok.Content == "" {
			continue
		}
		if id, ok := t.addedByContent[tok.Content]; ok {
			if old := t.addedByID[id]; *old == *tok {
				continue
			}
		}
		id, ok := t.addedByContent[tok.Content]
		if !ok {
			if mid, inVocab := t.model.vocab[tok.Content]; inVocab {
				id, ok = int(mid), true
			}
		}
		if !ok {
			id = nextID
			nextID++
		}
		if id != tok.ID {
			return fmt.Errorf("token %q has id %d in the file but tokenizers would give it id %d", tok.Content, tok.ID, id)
		}
		t.addedByContent[tok.Content] = id
		if tok.Special {
			t.specialContent[tok.Content] = true
		}
		t.addedByID[id] = tok
	}
	t.rawTrie, t.normTrie = newTrie(), newTrie()
	ids := make([]int, 0, len(t.addedByID))
	for id := range t.addedByID {
		ids = append(ids, id)
	}
	sort.Ints(ids)
	for _, id := range ids {
		tok := t.addedByID[id]
		if tok.Normalized {
			t.normTrie.add(t.normalize(tok.Content), id)
		} else {
			t.rawTrie.add(tok.Content, id)
		}
	}
	return nil
}
