package tokenizer

import (
	"sort"
	"unicode/utf8"
)

// Tokenizer is a loaded tokenizer.json. It is safe for concurrent use.
type Tokenizer struct {
	normalizers []normForm
	preSteps    []preStep
	byteLevel   bool // the pre-tokenizer ends with ByteLevel: the model sees byte-level characters
	model       *bpe
	template    *template

	addedByID      map[int]*AddedToken
	addedByContent map[string]int
	specialContent map[string]bool
	rawTrie        *trie // added tokens with normalized=false, matched on the input
	normTrie       *trie // added tokens with normalized=true, matched after normalization

	// decode table: the bytes of id i are decBytes[decOff[i]:decOff[i+1]].
	decBytes  []byte
	decOff    []uint32
	decKnown  []bool // id has a token
	decSkip   []bool // id is a special token, dropped when skipSpecial
	vocabSize int

	cache wordCache

	// Config is tokenizer_config.json, when loaded by LoadDir or SetConfig.
	Config *Config
	// parseSpecialDefault is Encode's ParseSpecial: true unless the config
	// says split_special_tokens.
	parseSpecialDefault bool
}

type template struct{ prefix, suffix []int }

// EncodeOptions control EncodeWith.
type EncodeOptions struct {
	// AddSpecial adds the post-processor's special tokens (HF's
	// add_special_tokens; Qwen3 adds none).
	AddSpecial bool
	// ParseSpecial recognises special tokens written in the text (HF's
	// split_special_tokens=false). Non-special added tokens (Qwen3's <think>,
	// <tool_call>, ...) are always recognised, as in HF.
	ParseSpecial bool
}

// Encode returns the ids of text as vLLM's tokenizer.encode(text) does: with
// the post-processor's special tokens, parsing special tokens in the text
// (unless tokenizer_config.json sets split_special_tokens).
func (t *Tokenizer) Encode(text string) []int {
	return t.EncodeWith(text, EncodeOptions{AddSpecial: true, ParseSpecial: t.parseSpecialDefault})
}

// EncodeWith encodes text with explicit options.
func (t *Tokenizer) EncodeWith(text string, opt EncodeOptions) []int {
	text = sanitizeUTF8(text)
	out := make([]int, 0, len(text)/3+4)
	if opt.AddSpecial && t.template != nil {
		out = append(out, t.template.prefix...)
	}
	var buf []int32
	var spans [16]span
	for _, sp := range t.findAdded(t.rawTrie, text, opt.ParseSpecial, spans[:0]) {
		if sp.id >= 0 {
			out = append(out, sp.id)
			continue
		}
		if sp.start >= sp.end {
			continue
		}
		piece := t.normalize(text[sp.start:sp.end])
		var spans2 [8]span
		for _, sp2 := range t.findAdded(t.normTrie, piece, opt.ParseSpecial, spans2[:0]) {
			if sp2.id >= 0 {
				out = append(out, sp2.id)
				continue
			}
			if sp2.start >= sp2.end {
				continue
			}
			buf = t.encodePiece(buf[:0], piece[sp2.start:sp2.end])
			for _, id := range buf {
				out = append(out, int(id))
			}
		}
	}
	if opt.AddSpecial && t.template != nil {
		out = append(out, t.template.suffix...)
	}
	return out
}

// normalize applies the normalizers to s.
func (t *Tokenizer) normalize(s string) string {
	for _, f := range t.normalizers {
		s = normalizeForm(f, s)
	}
	return s
}

// encodePiece pre-tokenizes a normalized piece and appends its ids.
func (t *Tokenizer) encodePiece(dst []int32, piece string) []int32 {
	if len(t.preSteps) == 1 {
		// The common case (Qwen, Llama 3): a single Split, isolated.
		if sp, ok := t.preSteps[0].(*splitStep); ok && sp.behavior == bIsolated {
			sp.m.matches(piece, func(start, end int) {
				dst = t.encodeWord(dst, piece[start:end])
			})
			return dst
		}
	}
	t.runSteps(piece, 0, func(w string) { dst = t.encodeWord(dst, w) })
	return dst
}

func (t *Tokenizer) runSteps(s string, k int, emit func(string)) {
	if s == "" {
		return
	}
	if k == len(t.preSteps) {
		emit(s)
		return
	}
	t.preSteps[k].split(s, func(sub string) { t.runSteps(sub, k+1, emit) })
}

// encodeWord appends the ids of one pre-token, through the word cache.
func (t *Tokenizer) encodeWord(dst []int32, w string) []int32 {
	if w == "" {
		return dst
	}
	if ids, ok := t.cache.get(w); ok {
		return append(dst, ids...)
	}
	start := len(dst)
	dst = t.model.appendWord(dst, w, t.byteLevel)
	if len(w) <= cacheMaxWord {
		ids := make([]int32, len(dst)-start)
		copy(ids, dst[start:])
		t.cache.put(w, ids)
	}
	return dst
}

// buildDecodeTable precomputes each id's decoded bytes (byte-level decoder:
// a token whose characters are all byte-level characters stands for those
// bytes, any other token for its own UTF-8 text) and special flags.
func (t *Tokenizer) buildDecodeTable() {
	n := len(t.model.vocabR)
	for id := range t.addedByID {
		if id+1 > n {
			n = id + 1
		}
	}
	t.vocabSize = n
	t.decOff = make([]uint32, n+1)
	t.decKnown = make([]bool, n)
	t.decSkip = make([]bool, n)
	t.decBytes = make([]byte, 0, 4*n)
	for id := 0; id < n; id++ {
		tok, ok := t.tokenString(id)
		t.decOff[id] = uint32(len(t.decBytes))
		if ok {
			t.decKnown[id] = true
			t.decSkip[id] = t.specialContent[tok]
			t.decBytes = appendTokenBytes(t.decBytes, tok)
		}
	}
	t.decOff[n] = uint32(len(t.decBytes))
}

// tokenString is the token decode uses for id: the added token's content
// (normalized, for normalized added tokens), else the model's token.
func (t *Tokenizer) tokenString(id int) (string, bool) {
	if a, ok := t.addedByID[id]; ok {
		if a.Normalized {
			return t.normalize(a.Content), true
		}
		return a.Content, true
	}
	if id >= 0 && id < len(t.model.vocabR) && t.model.vocabR[id] != "" {
		return t.model.vocabR[id], true
	}
	if id >= 0 && id < len(t.model.vocabR) {
		// The empty string can be a vocabulary token only through a JSON
		// key "": check.
		if v, ok := t.model.vocab[""]; ok && int(v) == id {
			return "", true
		}
	}
	return "", false
}

func appendTokenBytes(dst []byte, tok string) []byte {
	start := len(dst)
	for _, r := range tok {
		b, ok := runeToByte[r]
		if !ok {
			return append(dst[:start], tok...)
		}
		dst = append(dst, b)
	}
	return dst
}

// tokenBytes returns the decoded bytes of id and whether it is shown.
func (t *Tokenizer) tokenBytes(id int, skipSpecial bool) ([]byte, bool) {
	if id < 0 || id >= t.vocabSize || !t.decKnown[id] || (skipSpecial && t.decSkip[id]) {
		return nil, false
	}
	return t.decBytes[t.decOff[id]:t.decOff[id+1]], true
}

// Decode returns the text of ids (HF's decode). Unknown ids are skipped;
// special tokens too when skipSpecial. Invalid UTF-8 is replaced, one
// U+FFFD per maximal invalid subsequence (String::from_utf8_lossy).
func (t *Tokenizer) Decode(ids []int, skipSpecial bool) string {
	buf := make([]byte, 0, 4*len(ids))
	for _, id := range ids {
		if b, ok := t.tokenBytes(id, skipSpecial); ok {
			buf = append(buf, b...)
		}
	}
	if utf8.Valid(buf) {
		return string(buf)
	}
	return lossyString(buf)
}

// IDToken returns the token of id as stored in tokenizer.json (byte-level
// characters for BPE tokens, e.g. "Ġthe"), or "" if id has none.
func (t *Tokenizer) IDToken(id int) string {
	if a, ok := t.addedByID[id]; ok {
		return a.Content
	}
	if id >= 0 && id < len(t.model.vocabR) {
		return t.model.vocabR[id]
	}
	return ""
}

// TokenID returns the id of token s (an added token's content or a
// vocabulary entry in byte-level characters).
func (t *Tokenizer) TokenID(s string) (int, bool) {
	if id, ok := t.addedByContent[s]; ok {
		return id, true
	}
	if id, ok := t.model.vocab[s]; ok {
		return int(id), true
	}
	return 0, false
}

// VocabSize is one more than the largest id with a token (HF's
// get_vocab_size(with_added_tokens=True) when ids are contiguous): 151669
// for Qwen3, whose checkpoints pad the embedding further.
func (t *Tokenizer) VocabSize() int { return t.vocabSize }

// SpecialIDs returns the ids of the special added tokens, ascending.
func (t *Tokenizer) SpecialIDs() []int {
	var ids []int
	for id, a := range t.addedByID {
		if a.Special {
			ids = append(ids, id)
		}
	}
	sort.Ints(ids)
	return ids
}

// IsSpecial reports whether id is a special token (dropped by Decode and
// StreamDecoder when skipSpecial).
func (t *Tokenizer) IsSpecial(id int) bool {
	return id >= 0 && id < t.vocabSize && t.decSkip[id]
}

// AddedTokens returns the added tokens, by ascending id.
func (t *Tokenizer) AddedTokens() []AddedToken {
	out := make([]AddedToken, 0, len(t.addedByID))
	for _, a := range t.addedByID {
		out = append(out, *a)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}
