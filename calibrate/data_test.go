package calibrate

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestParseJSONL(t *testing.T) {
	for _, c := range []struct {
		name, in string
		want     []string
		err      string
	}{
		{"two", `{"text": "a"}` + "\n" + `{"text": "b c", "id": 3}` + "\n", []string{"a", "b c"}, ""},
		{"blank lines and CRLF", "\n" + `{"text":"x"}` + "\r\n\r\n  \n" + `{"text":"y"}`, []string{"x", "y"}, ""},
		{"empty text skipped", `{"text": ""}` + "\n" + `{"text": "z"}`, []string{"z"}, ""},
		{"escapes", `{"text": "line\nnext \u00e9"}`, []string{"line\nnext é"}, ""},
		{"no text", `{"prompt": "a"}`, nil, `line 1: no "text" field`},
		{"messages", `{"text":"a"}` + "\n" + `{"messages": []}`, nil, `line 2: no "text" field: render its "messages"`},
		{"not an object", `["a"]`, nil, "line 1: not a JSON object"},
		{"truncated", `{"text": "a`, nil, "line 1: not a JSON object"},
		{"number", `{"text": 3}`, nil, `line 1: "text" is not a string`},
		{"all empty", `{"text": ""}`, nil, "no texts"},
		{"empty file", "", nil, "no texts"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := ParseJSONL(strings.NewReader(c.in))
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("err = %v, want one containing %q", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, c.want) {
				t.Errorf("got %q, want %q", got, c.want)
			}
		})
	}
}

func TestParseText(t *testing.T) {
	got, err := ParseText([]byte("first para\nstill first\n\n\n\nsecond\r\n\r\nthird"))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"first para\nstill first\n\n", "second\n\n", "third\n\n"}
	if !slices.Equal(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
	if _, err := ParseText([]byte("\xff\xfe")); err == nil || !strings.Contains(err.Error(), "UTF-8") {
		t.Errorf("binary input: err = %v", err)
	}
	if _, err := ParseText([]byte("\n \n\n")); err == nil {
		t.Error("blank input: no error")
	}
}

// runes "tokenizes" by Unicode code point, so that sample boundaries are
// easy to predict.
func runes(s string) []int {
	var ids []int
	for _, r := range s {
		ids = append(ids, int(r))
	}
	return ids
}

func TestSamples(t *testing.T) {
	docs := &Documents{Name: "t", Texts: []string{"abcdef", "gh", "ijklmnop"}}
	for _, c := range []struct {
		name      string
		packed    bool
		n, seqLen int
		want      []string
	}{
		{"separate truncated", false, 10, 4, []string{"abcd", "gh", "ijkl"}},
		{"separate first n", false, 2, 100, []string{"abcdef", "gh"}},
		{"packed windows", true, 10, 4, []string{"abcd", "efgh", "ijkl", "mnop"}},
		{"packed tail kept", true, 10, 5, []string{"abcde", "fghij", "klmno", "p"}},
		{"packed first n", true, 2, 3, []string{"abc", "def"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			docs.Packed = c.packed
			got, err := Samples(docs, runes, c.n, c.seqLen)
			if err != nil {
				t.Fatal(err)
			}
			var want [][]int
			for _, s := range c.want {
				want = append(want, runes(s))
			}
			if !slices.EqualFunc(got, want, slices.Equal) {
				t.Errorf("got %v, want %v", got, want)
			}
		})
	}
	if _, err := Samples(docs, runes, 0, 4); err == nil {
		t.Error("0 samples: no error")
	}
	if _, err := Samples(&Documents{Name: "e", Texts: []string{"x"}}, func(string) []int { return nil }, 1, 4); err == nil {
		t.Error("no tokens: no error")
	}
}

func TestReadDocuments(t *testing.T) {
	b, err := ReadDocuments(Builtin)
	if err != nil {
		t.Fatal(err)
	}
	if b.Packed || len(b.Texts) < 32 {
		t.Errorf("builtin: packed %v, %d texts", b.Packed, len(b.Texts))
	}
	dir := t.TempDir()
	jl := filepath.Join(dir, "set.JSONL")
	os.WriteFile(jl, []byte(`{"text":"one"}`+"\n"), 0o644)
	d, err := ReadDocuments(jl)
	if err != nil || d.Packed || d.Name != "set.JSONL" || !slices.Equal(d.Texts, []string{"one"}) {
		t.Errorf("jsonl: %+v, %v", d, err)
	}
	txt := filepath.Join(dir, "book.txt")
	os.WriteFile(txt, []byte("a\n\nb"), 0o644)
	d, err = ReadDocuments(txt)
	if err != nil || !d.Packed || len(d.Texts) != 2 {
		t.Errorf("text: %+v, %v", d, err)
	}
	if _, err := ReadDocuments(filepath.Join(dir, "missing.jsonl")); err == nil || !strings.Contains(err.Error(), "builtin") {
		t.Errorf("missing file: %v", err)
	}
	bad := filepath.Join(dir, "bad.jsonl")
	os.WriteFile(bad, []byte("{\"text\":\"a\"}\nnope\n"), 0o644)
	if _, err := ReadDocuments(bad); err == nil || !strings.Contains(err.Error(), "bad.jsonl: line 2") {
		t.Errorf("bad jsonl: %v", err)
	}
}
