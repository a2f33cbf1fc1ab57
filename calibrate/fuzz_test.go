package calibrate

import (
	"bytes"
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzParseJSONL checks that any input gives texts or an error, never a
// panic, and that every text returned is non-empty UTF-8.
func FuzzParseJSONL(f *testing.F) {
	for _, s := range []string{`{"text":"a"}`, "{\"text\":\"a\"}\n\n{\"text\":\"\\u00e9\"}", `{"messages":[]}`, `[1]`, "", `{"text":"\ud800"}`} {
		f.Add([]byte(s))
	}
	f.Add(builtinJSONL[:min(len(builtinJSONL), 600)])
	f.Fuzz(func(t *testing.T, b []byte) {
		texts, err := ParseJSONL(bytes.NewReader(b))
		if err != nil {
			if len(texts) != 0 {
				t.Fatal("texts with an error")
			}
			return
		}
		if len(texts) == 0 {
			t.Fatal("no texts and no error")
		}
		for _, s := range texts {
			if s == "" || !utf8.ValidString(s) {
				t.Fatalf("text %q", s)
			}
		}
	})
}

// FuzzParseText checks that paragraphs are non-blank and hold all of the
// input's non-blank content, in order.
func FuzzParseText(f *testing.F) {
	for _, s := range []string{"a\n\nb", "\n\n\n", "x\r\n\r\ny", "\xff"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		texts, err := ParseText(b)
		if err != nil {
			return
		}
		var all strings.Builder
		for _, s := range texts {
			if strings.TrimSpace(s) == "" {
				t.Fatalf("blank paragraph %q", s)
			}
			all.WriteString(s)
		}
		squash := func(s string) string { return strings.Join(strings.Fields(s), " ") }
		if squash(all.String()) != squash(string(b)) {
			t.Fatalf("paragraphs %q lose content of %q", texts, b)
		}
	})
}
