package tokenizer

import (
	"strings"
	"testing"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// FuzzEncodeDecode: Encode never panics, on any input; for text without
// added-token text, Decode(Encode(s)) == NFC(s) (byte-level BPE round-trips
// after normalization). Invalid UTF-8 is first replaced as Python's
// bytes.decode("utf-8", "replace") does (see the package doc), so the
// round trip then gives NFC of the repaired text.
func FuzzEncodeDecode(f *testing.F) {
	tok := qwen3(f)
	for _, s := range []string{"", "Hello, world!", "I'M don't", "   \n\n\t x", "中文😀👨‍👩‍👧", "cafe\u0301",
		"<|im_start|>user\nhi<|im_end|>", "a\xffb\xe2\x82", strings.Repeat(" ", 300) + "x", "'ſ 1,000.5"} {
		f.Add(s)
	}
	var added []string
	for _, a := range tok.AddedTokens() {
		added = append(added, a.Content)
	}
	f.Fuzz(func(t *testing.T, s string) {
		ids := tok.Encode(s)
		_ = tok.EncodeWith(s, EncodeOptions{})
		text := s
		if !utf8.ValidString(s) {
			text = lossyString([]byte(s))
		}
		for _, a := range added {
			if strings.Contains(text, a) {
				return
			}
		}
		want := norm.NFC.String(text)
		if got := tok.Decode(ids, false); got != want {
			t.Fatalf("Decode(Encode(%q)) = %q, want %q", s, got, want)
		}
		d := NewStreamDecoder(tok, true)
		var sb strings.Builder
		for _, id := range ids {
			sb.WriteString(d.Add(id))
		}
		sb.WriteString(d.Flush())
		if sb.String() != want {
			t.Fatalf("stream decode of %q = %q, want %q", s, sb.String(), want)
		}
	})
}
