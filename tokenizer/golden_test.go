package tokenizer

import (
	"bufio"
	"encoding/json"
	"errors"
	"os"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

const (
	goldenPath  = "../testdata/golden/tokenizer/qwen3.jsonl"
	unicodePath = "../testdata/golden/tokenizer/hf_unicode.json"
	corpusPath  = "../testdata/golden/tokenizer/corpus.jsonl"
)

type goldenRecord struct {
	Name        string `json:"name"`
	Text        string `json:"text"`
	IDs         []int  `json:"ids"`
	IDsSplit    []int  `json:"ids_split"`
	Decoded     string `json:"decoded"`
	DecodedSkip string `json:"decoded_skip"`
}

func readJSONL[T any](t *testing.T, path string) []T {
	t.Helper()
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		t.Skipf("%s does not exist: run scripts/golden_tokenizer.py (see its header) on a machine with tokenizers and transformers", path)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []T
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Bytes()
		if len(strings.TrimSpace(string(line))) == 0 || strings.HasPrefix(string(line), `{"meta"`) {
			continue
		}
		var v T
		if err := json.Unmarshal(line, &v); err != nil {
			t.Fatalf("%s:%d: %v", path, n, err)
		}
		out = append(out, v)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestGolden requires exact equality with Hugging Face tokenizers (and
// transformers, which the script cross-checks) on every corpus line.
func TestGolden(t *testing.T) {
	recs := readJSONL[goldenRecord](t, goldenPath)
	tok := qwen3(t)
	corpus := readJSONL[struct{ Name, Text string }](t, corpusPath)
	if len(corpus) != len(recs) {
		t.Errorf("corpus has %d lines, golden %d: regenerate with scripts/golden_tokenizer.py", len(corpus), len(recs))
	}
	for i, r := range recs {
		if i < len(corpus) && (corpus[i].Name != r.Name || corpus[i].Text != r.Text) {
			t.Errorf("line %d: golden %q does not match corpus %q: regenerate", i+1, r.Name, corpus[i].Name)
		}
		if got := tok.Encode(r.Text); !slices.Equal(got, r.IDs) {
			t.Errorf("%s: Encode(%q)\n got %v\nwant %v", r.Name, abbrev(r.Text), got, r.IDs)
		}
		if got := tok.EncodeWith(r.Text, EncodeOptions{AddSpecial: true}); !slices.Equal(got, r.IDsSplit) {
			t.Errorf("%s: EncodeWith(ParseSpecial false)\n got %v\nwant %v", r.Name, got, r.IDsSplit)
		}
		for _, skip := range []bool{false, true} {
			want := r.Decoded
			if skip {
				want = r.DecodedSkip
			}
			if got := tok.Decode(r.IDs, skip); got != want {
				t.Errorf("%s: Decode(skip=%v) = %q, want %q", r.Name, skip, abbrev(got), abbrev(want))
			}
			d := NewStreamDecoder(tok, skip)
			var sb strings.Builder
			for _, id := range r.IDs {
				s := d.Add(id)
				if !utf8.ValidString(s) {
					t.Errorf("%s: stream chunk %q is not valid UTF-8", r.Name, s)
				}
				sb.WriteString(s)
			}
			sb.WriteString(d.Flush())
			if got := sb.String(); got != want {
				t.Errorf("%s: stream decode (skip=%v) = %q, want %q", r.Name, skip, abbrev(got), abbrev(want))
			}
		}
	}
}

func abbrev(s string) string {
	if len(s) > 120 {
		return s[:120] + "..."
	}
	return s
}

type hfUnicode struct {
	L, N, S [][2]rune
	NFC     []json.RawMessage // [code point, normalized string]
}

func readHFUnicode(t *testing.T) *hfUnicode {
	t.Helper()
	data, err := os.ReadFile(unicodePath)
	if errors.Is(err, os.ErrNotExist) {
		t.Skipf("%s does not exist: run scripts/golden_tokenizer.py (see its header)", unicodePath)
	}
	if err != nil {
		t.Fatal(err)
	}
	var u hfUnicode
	if err := json.Unmarshal(data, &u); err != nil {
		t.Fatal(err)
	}
	return &u
}

// TestHFCharClasses checks the pre-tokenizer's \p{L}, \p{N}, \s on every
// code point against those of the regex engine inside tokenizers.
func TestHFCharClasses(t *testing.T) {
	u := readHFUnicode(t)
	classOnce.Do(buildClassTab)
	want := make([]uint8, utf8.MaxRune+1)
	for _, x := range []struct {
		rs [][2]rune
		c  uint8
	}{{u.L, cLetter}, {u.N, cNumber}, {u.S, cSpace}} {
		for _, r := range x.rs {
			for c := r[0]; c <= r[1]; c++ {
				want[c] = x.c
			}
		}
	}
	want['\r'], want['\n'] = cNewline, cNewline
	bad := 0
	for r := rune(0); r <= utf8.MaxRune; r++ {
		if r >= 0xD800 && r <= 0xDFFF {
			continue
		}
		got := runeClass(r)
		if r < utf8.RuneSelf {
			got = asciiClass[r]
		}
		if got != want[r] {
			if bad < 10 {
				t.Errorf("U+%04X: class %d, tokenizers' Oniguruma says %d", r, got, want[r])
			}
			bad++
		}
	}
	if bad > 0 {
		t.Errorf("%d code points differ", bad)
	}
}

// TestHFNormalizer checks NFC of every single code point against
// tokenizers' NFC normalizer.
func TestHFNormalizer(t *testing.T) {
	u := readHFUnicode(t)
	want := map[rune]string{}
	for _, raw := range u.NFC {
		var pair [2]any
		if err := json.Unmarshal(raw, &pair); err != nil {
			t.Fatal(err)
		}
		want[rune(pair[0].(float64))] = pair[1].(string)
	}
	bad := 0
	for r := rune(0); r <= utf8.MaxRune; r++ {
		if r >= 0xD800 && r <= 0xDFFF {
			continue
		}
		s := string(r)
		w, ok := want[r]
		if !ok {
			w = s
		}
		if got := normalizeForm(norm.NFC, s); got != w {
			if bad < 10 {
				t.Errorf("NFC(U+%04X) = %+q, tokenizers gives %+q", r, got, w)
			}
			bad++
		}
	}
	if bad > 0 {
		t.Errorf("%d code points differ", bad)
	}
}
