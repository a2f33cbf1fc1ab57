package tokenizer

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// AddedToken is an entry of tokenizer.json's added_tokens.
type AddedToken struct {
	ID         int
	Content    string
	SingleWord bool
	LStrip     bool
	RStrip     bool
	Normalized bool
	Special    bool
}

// trie finds added tokens leftmost-longest, as the daachorse automaton
// (MatchKind::LeftmostLongest) of tokenizers' AddedVocabulary.
type trie struct {
	nodes []trieNode
	first [256]bool
	// oneFirst is the only first byte of all patterns, or -1.
	oneFirst int
}

type trieNode struct {
	next map[byte]int32
	id   int32 // token id of the pattern ending here, or -1
}

func newTrie() *trie {
	return &trie{nodes: []trieNode{{id: -1}}, oneFirst: -1}
}

func (t *trie) add(pattern string, id int) {
	n := int32(0)
	for i := 0; i < len(pattern); i++ {
		c := pattern[i]
		nx, ok := t.nodes[n].next[c]
		if !ok {
			if t.nodes[n].next == nil {
				t.nodes[n].next = map[byte]int32{}
			}
			nx = int32(len(t.nodes))
			t.nodes = append(t.nodes, trieNode{id: -1})
			t.nodes[n].next[c] = nx
		}
		n = nx
	}
	if t.nodes[n].id < 0 { // the first pattern wins for duplicates
		t.nodes[n].id = int32(id)
	}
	t.first[pattern[0]] = true
	firsts := 0
	for b := range t.first {
		if t.first[b] {
			firsts++
			t.oneFirst = b
		}
	}
	if firsts != 1 {
		t.oneFirst = -1
	}
}

func (t *trie) empty() bool { return len(t.nodes) == 1 }

// longestAt returns the id and end of the longest pattern starting at s[i],
// or id -1.
func (t *trie) longestAt(s string, i int) (id, end int) {
	id, end = -1, -1
	n := int32(0)
	for j := i; j < len(s); j++ {
		nx, ok := t.nodes[n].next[s[j]]
		if !ok {
			break
		}
		n = nx
		if t.nodes[n].id >= 0 {
			id, end = int(t.nodes[n].id), j+1
		}
	}
	return
}

// next returns the leftmost-longest match at or after i: start, end, id;
// id -1 when there is none.
func (t *trie) next(s string, i int) (start, end, id int) {
	for i < len(s) {
		if t.oneFirst >= 0 {
			k := strings.IndexByte(s[i:], byte(t.oneFirst))
			if k < 0 {
				return -1, -1, -1
			}
			i += k
		} else if !t.first[s[i]] {
			i++
			continue
		}
		if id, end := t.longestAt(s, i); id >= 0 {
			return i, end, id
		}
		i++
	}
	return -1, -1, -1
}

// span is a piece of the input: an added token (id >= 0) or text (id -1).
type span struct {
	start, end int
	id         int
}

// findAdded is AddedVocabulary::find_matches: it splits s into text and
// added-token spans. Special tokens are skipped unless parseSpecial (HF's
// encode_special_tokens=true skips them after matching, so text they
// covered is not searched again for other tokens).
func (t *Tokenizer) findAdded(tr *trie, s string, parseSpecial bool, out []span) []span {
	if tr.empty() || s == "" {
		return append(out, span{0, len(s), -1})
	}
	startOffset := 0
	for i := 0; i < len(s); {
		start, stop, id := tr.next(s, i)
		if id < 0 {
			break
		}
		i = stop
		tok := t.addedByID[id]
		if !parseSpecial && tok.Special {
			continue
		}
		if tok.SingleWord {
			startSpace := start == 0 || !endsWithWord(s[:start])
			stopSpace := stop == len(s) || !startsWithWord(s[stop:])
			if !startSpace || !stopSpace {
				continue
			}
		}
		if tok.LStrip {
			ns := len(strings.TrimRightFunc(s[:start], unicode.IsSpace))
			start = max(ns, startOffset)
		}
		if tok.RStrip {
			stop = len(s) - len(strings.TrimLeftFunc(s[stop:], unicode.IsSpace))
		}
		if startOffset < start {
			out = append(out, span{startOffset, start, -1})
		}
		out = append(out, span{start, stop, id})
		startOffset = stop
	}
	if startOffset != len(s) {
		out = append(out, span{startOffset, len(s), -1})
	}
	return out
}

// isRustWord is Rust regex's Unicode \w: Alphabetic, M, Nd, Pc, Join_Control.
func isRustWord(r rune) bool {
	return unicode.IsLetter(r) || unicode.Is(unicode.Nl, r) || unicode.Is(unicode.Other_Alphabetic, r) ||
		unicode.IsMark(r) || unicode.Is(unicode.Nd, r) || unicode.Is(unicode.Pc, r) ||
		r == 0x200C || r == 0x200D
}

func endsWithWord(s string) bool {
	r, n := utf8.DecodeLastRuneInString(s)
	return n > 0 && isRustWord(r)
}

func startsWithWord(s string) bool {
	r, n := utf8.DecodeRuneInString(s)
	return n > 0 && isRustWord(r)
}
