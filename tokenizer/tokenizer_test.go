package tokenizer

import (
	"math/rand"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"github.com/lowbit-ai/lowbit/internal/qwen3tok"
)

func TestQwen3Basics(t *testing.T) {
	tok := qwen3(t)
	if got := tok.VocabSize(); got != qwen3tok.NumTokens {
		t.Errorf("VocabSize = %d, want %d", got, qwen3tok.NumTokens)
	}
	special := tok.SpecialIDs()
	if len(special) != 14 || special[0] != qwen3tok.EOSText || special[13] != 151656 {
		t.Errorf("SpecialIDs = %v", special)
	}
	if id, ok := tok.EOSID(); !ok || id != qwen3tok.EOSChat {
		t.Errorf("EOSID = %d, %v", id, ok)
	}
	if id, ok := tok.PadID(); !ok || id != qwen3tok.EOSText {
		t.Errorf("PadID = %d, %v", id, ok)
	}
	if _, ok := tok.BOSID(); ok {
		t.Error("Qwen3 has no BOS")
	}
	if !strings.Contains(tok.Config.ChatTemplate, "<|im_start|>") || tok.Config.TokenizerClass != "Qwen2Tokenizer" {
		t.Errorf("config not kept: class %q", tok.Config.TokenizerClass)
	}
	for _, s := range []string{"<|im_end|>", "<think>", "Ġthe", "Hello"} {
		id, ok := tok.TokenID(s)
		if !ok || tok.IDToken(id) != s {
			t.Errorf("TokenID/IDToken round trip of %q: %d %v %q", s, id, ok, tok.IDToken(id))
		}
	}
	if tok.IDToken(-1) != "" || tok.IDToken(1<<30) != "" {
		t.Error("IDToken of unknown ids should be empty")
	}
	if !tok.IsSpecial(qwen3tok.EOSChat) || tok.IsSpecial(151667) {
		t.Error("IsSpecial")
	}
}

// Hand-checked ids (they also agree with the golden data).
func TestQwen3Encode(t *testing.T) {
	tok := qwen3(t)
	cases := []struct {
		text string
		ids  []int
	}{
		{"", []int{}},
		{"Hello World, I'M here  \n\n  ok<|im_start|>user\nhi<|im_end|>",
			[]int{9707, 4337, 11, 358, 27603, 1588, 18611, 220, 5394, 151644, 872, 198, 6023, 151645}},
	}
	for _, c := range cases {
		if got := tok.Encode(c.text); !slices.Equal(got, c.ids) {
			t.Errorf("Encode(%q) = %v, want %v", c.text, got, c.ids)
		}
	}
	// Special tokens are text when not parsed; <think> is not special and
	// stays an added token.
	ids := tok.EncodeWith("<|im_end|><think>", EncodeOptions{})
	if len(ids) < 3 || ids[len(ids)-1] != 151667 || slices.Contains(ids, qwen3tok.EOSChat) {
		t.Errorf("EncodeWith(ParseSpecial false) = %v", ids)
	}
	if got := tok.Decode(ids, false); got != "<|im_end|><think>" {
		t.Errorf("Decode = %q", got)
	}
}

// The pre-tokenizer's matches for the Qwen2 pattern, checked against the
// regex semantics by hand.
func TestScanQwen(t *testing.T) {
	classOnce.Do(buildClassTab)
	cases := []struct {
		in   string
		want []string
	}{
		{"Hello world", []string{"Hello", " world"}},
		{"   hello", []string{"  ", " hello"}},
		{"\t\t\tfoo", []string{"\t\t", "\tfoo"}},
		{"a  \n  b", []string{"a", "  \n", " ", " b"}},
		{"x   ", []string{"x", "   "}},
		{"x 3", []string{"x", " ", "3"}},
		{"1234", []string{"1", "2", "3", "4"}},
		{"I'M don't 'sand", []string{"I", "'M", " don", "'t", " '", "sand"}},
		{"'sand", []string{"'s", "and"}},
		{"'ſ", []string{"'ſ"}},
		{"$hello ...world", []string{"$hello", " ...", "world"}},
		{"a!!\n\nb", []string{"a", "!!\n\n", "b"}},
		{"a \n\n b", []string{"a", " \n\n", " b"}},
		{"中文abc", []string{"中文abc"}},
		{"\u3000\u3000x", []string{"\u3000", "\u3000x"}},
		{"e\u0301", []string{"e", "\u0301"}},
		{"\r\n\r\n", []string{"\r\n\r\n"}},
		{" \u00a0x", []string{" ", "\u00a0x"}},
	}
	for _, c := range cases {
		var got []string
		scanMatcher{func(s string, i int) int { return scanQwen(s, i, 1) }}.matches(c.in, func(a, b int) {
			got = append(got, c.in[a:b])
		})
		if !slices.Equal(got, c.want) {
			t.Errorf("scan(%q) = %q, want %q", c.in, got, c.want)
		}
	}
	var got []string
	scanMatcher{scanGPT2}.matches("I'M  don't 123 ok", func(a, b int) { got = append(got, "I'M  don't 123 ok"[a:b]) })
	if want := []string{"I", "'", "M", " ", " don", "'t", " 123", " ok"}; !slices.Equal(got, want) {
		t.Errorf("gpt2 scan = %q, want %q", got, want)
	}
}

func TestLossyUTF8(t *testing.T) {
	// Expectations from Python's bytes.decode("utf-8", "replace"), which
	// matches Rust's String::from_utf8_lossy (maximal subparts).
	cases := []struct{ in, want string }{
		{"abc", "abc"},
		{"\xe2\x82", "\uFFFD"},
		{"\xe2\x82A", "\uFFFDA"},
		{"\xf0\x9f\x98", "\uFFFD"},
		{"\xf0\x9f\x98\x80", "😀"},
		{"\xc0\xaf", "\uFFFD\uFFFD"},
		{"\xed\xa0\x80", "\uFFFD\uFFFD\uFFFD"},
		{"\xf4\x90\x80\x80", "\uFFFD\uFFFD\uFFFD\uFFFD"},
		{"\xe0\x80\x80", "\uFFFD\uFFFD\uFFFD"},
		{"\xf0\x80", "\uFFFD\uFFFD"},
		{"a\x80b\xffc", "a\uFFFDb\uFFFDc"},
		{"\xe2\x82\xe2\x82\xac", "\uFFFD€"},
		{"\xf1\x80\x80", "\uFFFD"},
	}
	for _, c := range cases {
		if got := lossyString([]byte(c.in)); got != c.want {
			t.Errorf("lossy(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

func TestStreamDecoder(t *testing.T) {
	tok := qwen3(t)
	text := "Emoji 😀👨‍👩‍👧 and 中文, <think>x</think> done\n"
	ids := tok.Encode(text + "<|im_end|>")
	for _, skip := range []bool{false, true} {
		d := NewStreamDecoder(tok, skip)
		var parts []string
		for _, id := range ids {
			parts = append(parts, d.Add(id))
		}
		parts = append(parts, d.Flush())
		want := tok.Decode(ids, skip)
		if got := strings.Join(parts, ""); got != want {
			t.Errorf("skip=%v: stream %q, want %q", skip, got, want)
		}
		for _, p := range parts {
			if !utf8.ValidString(p) || strings.ContainsRune(p, utf8.RuneError) {
				t.Errorf("chunk %q holds a replacement character", p)
			}
		}
	}
	// A character split across tokens is held back until complete.
	var byteIDs []int
	for _, b := range []byte("é") {
		id, ok := tok.TokenID(string(byteToRune[b]))
		if !ok {
			t.Fatal("no byte token")
		}
		byteIDs = append(byteIDs, id)
	}
	d := NewStreamDecoder(tok, false)
	if s := d.Add(byteIDs[0]); s != "" {
		t.Errorf("first half emitted %q", s)
	}
	if s := d.Add(byteIDs[1]); s != "é" {
		t.Errorf("second half emitted %q", s)
	}
	d.Add(byteIDs[0])
	if s := d.Flush(); s != "\uFFFD" {
		t.Errorf("Flush of an incomplete sequence = %q", s)
	}
	if got := tok.Decode(byteIDs[:1], false); got != "\uFFFD" {
		t.Errorf("Decode of half a character = %q", got)
	}
}

// Encode replaces invalid UTF-8 first (as Python's decode with
// errors="replace"), so it equals the encoding of the repaired text.
func TestEncodeInvalidUTF8(t *testing.T) {
	tok := qwen3(t)
	for _, s := range []string{"a\xffb", "\xe2\x82", "ok\xf0\x9f\x98", "\xed\xa0\x80x"} {
		want := tok.Encode(lossyString([]byte(s)))
		if got := tok.Encode(s); !slices.Equal(got, want) {
			t.Errorf("Encode(%q) = %v, want %v", s, got, want)
		}
	}
}

// mergeAll's two algorithms (rescan for short words, heap for long) agree.
func TestMergeAlgorithmsAgree(t *testing.T) {
	tok := qwen3(t)
	m := tok.model
	rng := rand.New(rand.NewSource(1))
	alpha := []byte("aaabbbeeeenstrl  \n\t.,0123")
	for n := 0; n < 2000; n++ {
		w := make([]byte, 2+rng.Intn(60))
		for i := range w {
			w[i] = alpha[rng.Intn(len(alpha))]
		}
		syms := make([]int32, len(w))
		for i, b := range w {
			syms[i] = m.byteInit[b]
		}
		a := m.mergeAll(slices.Clone(syms), 0)
		b := m.mergeHeap(slices.Clone(syms))
		if !slices.Equal(a, b) {
			t.Fatalf("%q: rescan %v, heap %v", w, a, b)
		}
	}
}

func TestConcurrentEncode(t *testing.T) {
	tok := qwen3(t)
	text := strings.Repeat("The quick brown fox, 123 jumps; 中文 😀\n", 20)
	want := tok.Encode(text)
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 20; i++ {
				if got := tok.Encode(text); !slices.Equal(got, want) {
					t.Error("concurrent Encode differs")
					return
				}
			}
		}()
	}
	wg.Wait()
}

// tiny builds a tokenizer.json with a small byte-level vocabulary.
func tiny(pre, extra string) string {
	var sb strings.Builder
	sb.WriteString(`{"version":"1.0","truncation":null,"padding":null,"added_tokens":[],`)
	sb.WriteString(`"normalizer":{"type":"NFC"},"pre_tokenizer":` + pre + `,"post_processor":null,`)
	sb.WriteString(`"decoder":{"type":"ByteLevel","add_prefix_space":false,"trim_offsets":false,"use_regex":false},`)
	sb.WriteString(`"model":{"type":"BPE","dropout":null,"unk_token":null,"continuing_subword_prefix":null,"end_of_word_suffix":null,"fuse_unk":false,"byte_fallback":false,"ignore_merges":false` + extra + `,"vocab":{`)
	for b := 0; b < 256; b++ {
		if b > 0 {
			sb.WriteString(",")
		}
		sb.WriteString(`"` + strings.ReplaceAll(strings.ReplaceAll(string(byteToRune[b]), `\`, `\\`), `"`, `\"`) + `":`)
		sb.WriteString(strconv.Itoa(b))
	}
	sb.WriteString(`,"ab":256,"abc":257},"merges":[["a","b"],["ab","c"]]}}`)
	return sb.String()
}

func TestLoadTinyAndErrors(t *testing.T) {
	bl := `{"type":"ByteLevel","add_prefix_space":false,"trim_offsets":false,"use_regex":true}`
	tk, err := Load([]byte(tiny(bl, "")))
	if err != nil {
		t.Fatal(err)
	}
	// GPT-2 split "abc", " ab"; the space (byte 32, "Ġ") has no merge.
	if got := tk.Encode("abc ab"); !slices.Equal(got, []int{257, 32, 256}) {
		t.Errorf("Encode = %v", got)
	}
	if got := tk.Decode(tk.Encode("abc ab\n"), false); got != "abc ab\n" {
		t.Errorf("round trip = %q", got)
	}
	bad := []struct{ json, want string }{
		{strings.Replace(tiny(bl, ""), `"normalizer":{"type":"NFC"}`, `"normalizer":{"type":"Lowercase"}`, 1), `unsupported normalizer type "Lowercase"`},
		{tiny(`{"type":"Split","pattern":{"Regex":"\\w+(?=x)"},"behavior":"Isolated","invert":false}`, ""), `\w+(?=x)`},
		{tiny(`{"type":"Whitespace"}`, ""), `unsupported pre_tokenizer type "Whitespace"`},
		{strings.Replace(tiny(bl, ""), `"dropout":null`, `"dropout":0.1`, 1), "dropout"},
		{strings.Replace(tiny(bl, ""), `"type":"BPE"`, `"type":"WordPiece"`, 1), `unsupported model type "WordPiece"`},
		{strings.Replace(tiny(bl, ""), `"truncation":null`, `"truncation":{"max_length":5}`, 1), "truncation"},
		{strings.Replace(tiny(bl, ""), `["ab","c"]`, `["ab","zz"]`, 1), `"zz" is not in the vocabulary`},
		{strings.Replace(tiny(bl, ""), `"decoder":{"type":"ByteLevel"`, `"decoder":{"type":"Metaspace"`, 1), `unsupported decoder type "Metaspace"`},
	}
	for _, b := range bad {
		_, err := Load([]byte(b.json))
		if err == nil || !strings.Contains(err.Error(), b.want) {
			t.Errorf("Load: error %v, want one containing %q", err, b.want)
		}
	}
	// A lookahead-free Split regex is compiled with Go's regexp, \s made Unicode.
	tk, err = Load([]byte(tiny(`{"type":"Sequence","pretokenizers":[{"type":"Split","pattern":{"Regex":"\\s+"},"behavior":"Removed","invert":false},`+bl+`]}`, "")))
	if err != nil {
		t.Fatal(err)
	}
	if got := tk.Decode(tk.Encode("ab\u3000c  ab"), false); got != "abcab" {
		t.Errorf("Removed split = %q", got)
	}
	// Legacy "a b" merges.
	legacy := strings.Replace(tiny(bl, ""), `"merges":[["a","b"],["ab","c"]]`, `"merges":["a b","ab c"]`, 1)
	if tk, err := Load([]byte(legacy)); err != nil || !slices.Equal(tk.Encode("abc"), []int{257}) {
		t.Errorf("legacy merges: %v", err)
	}
}

func TestLoadDirAndConfigErrors(t *testing.T) {
	if _, err := LoadDir(t.TempDir()); err == nil {
		t.Error("LoadDir of an empty directory should fail")
	}
	tok := qwen3(t)
	for _, bad := range []string{`{"eos_token": "<|nope|>"}`, `{"errors": "strict"}`,
		`{"added_tokens_decoder": {"151643": {"content": "<|wrong|>"}}}`} {
		if err := tok.SetConfig([]byte(bad)); err == nil {
			t.Errorf("SetConfig(%s) should fail", bad)
		}
	}
	if id, ok := tok.EOSID(); !ok || id != qwen3tok.EOSChat {
		t.Error("a failed SetConfig changed the config")
	}
}

func TestJSONScan(t *testing.T) {
	v, err := parseVocab([]byte(` { "a\u00e9\"\\" : 1 , "\ud83d\ude00":2,"x\n\t\/":3, "a\u00e9\"\\": 4 } `))
	if err != nil || len(v) != 3 || v["aé\"\\"] != 4 || v["😀"] != 2 || v["x\n\t/"] != 3 {
		t.Errorf("parseVocab = %v, %v", v, err)
	}
	for _, bad := range []string{`{"a": -1}`, `{"a": 1.5}`, `{"\ud83d": 1}`, `{"a" 1}`, `{"a": 1,}`, `["a"]`, `{"a":1`} {
		if _, err := parseVocab([]byte(bad)); err == nil {
			t.Errorf("parseVocab(%s) should fail", bad)
		}
	}
	m, err := parseMerges([]byte(`["#version: 0.2", "a b", "\u0120 t"]`))
	if err != nil || len(m) != 2 || m[1] != [2]string{"Ġ", "t"} {
		t.Errorf("legacy merges = %v, %v", m, err)
	}
	for _, bad := range []string{`["a b c"]`, `[["a","b"], "a b"]`, `[["a"]]`, `[["a","b","c"]]`, `["ab"]`} {
		if _, err := parseMerges([]byte(bad)); err == nil {
			t.Errorf("parseMerges(%s) should fail", bad)
		}
	}
	// Truncated or corrupted files fail cleanly.
	good := tiny(`{"type":"ByteLevel","add_prefix_space":false,"trim_offsets":false,"use_regex":true}`, "")
	for n := 0; n < len(good); n += 7 {
		if _, err := Load([]byte(good[:n])); err == nil {
			t.Errorf("Load of %d-byte prefix succeeded", n)
		}
	}
}
