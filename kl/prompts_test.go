package kl

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"unicode/utf8"
)

func TestParsePrompts(t *testing.T) {
	cases := []struct {
		name  string
		data  string
		jsonl bool
		want  []Prompt // nil: an error
	}{
		{"lines", "first prompt\n\n  \nsecond\r\n", false, []Prompt{{Name: "line 1", Text: "first prompt"}, {Name: "line 4", Text: "second"}}},
		{"jsonl forms", `"a string"` + "\n" + `{"prompt": "text", "name": "n"}` + "\n" + `{"prompt": [1, 2, 3]}` + "\n" +
			`{"text": "t"}` + "\n" + `{"prompt_token_ids": [4]}`, true,
			[]Prompt{{Name: "line 1", Text: "a string"}, {Name: "n", Text: "text"}, {Name: "line 3", IDs: []int{1, 2, 3}},
				{Name: "line 4", Text: "t"}, {Name: "line 5", IDs: []int{4}}}},
		{"empty file", "\n\n", false, nil},
		{"bad json", `{"prompt": `, true, nil},
		{"two fields", `{"prompt": "a", "text": "b"}`, true, nil},
		{"no field", `{"name": "a"}`, true, nil},
		{"empty prompt", `{"prompt": ""}`, true, nil},
		{"empty string", `""`, true, nil},
		{"null prompt", `{"prompt": null}`, true, nil},
		{"negative id", `{"prompt": [1, -2]}`, true, nil},
		{"float id", `{"prompt": [1.5]}`, true, nil},
		{"number", `17`, true, nil},
		{"two values", `{"prompt": "a"} {"prompt": "b"}`, true, nil},
		{"invalid utf-8", "ok\n\xff\xfe", false, nil},
	}
	for _, c := range cases {
		got, err := ParsePrompts([]byte(c.data), c.jsonl)
		if c.want == nil {
			if err == nil {
				t.Errorf("%s: accepted as %+v", c.name, got)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if !slices.EqualFunc(got, c.want, func(a, b Prompt) bool {
			return a.Name == b.Name && a.Text == b.Text && slices.Equal(a.IDs, b.IDs)
		}) {
			t.Errorf("%s: %+v, want %+v", c.name, got, c.want)
		}
	}
}

func TestLoadPrompts(t *testing.T) {
	b, err := LoadPrompts("builtin")
	if err != nil || len(b) != 22 {
		t.Fatalf("builtin: %d prompts, %v", len(b), err)
	}
	names := map[string]bool{}
	for _, p := range b {
		if p.Text == "" || names[p.Name] {
			t.Errorf("builtin prompt %q empty or repeated", p.Name)
		}
		names[p.Name] = true
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "p.jsonl")
	os.WriteFile(path, []byte(`{"prompt": "x\ny"}`), 0o644)
	if ps, err := LoadPrompts(path); err != nil || ps[0].Text != "x\ny" {
		t.Errorf("jsonl file: %+v, %v", ps, err)
	}
	if _, err := LoadPrompts(filepath.Join(dir, "missing.txt")); err == nil {
		t.Error("a missing file was accepted")
	}
}

func FuzzParsePrompts(f *testing.F) {
	f.Add([]byte("one\ntwo\n"), false)
	f.Add([]byte(`{"prompt": [1, 2]}`+"\n"+`"s"`), true)
	f.Add([]byte(`{"text": "a", "name": "b"}`), true)
	f.Fuzz(func(t *testing.T, data []byte, jsonl bool) {
		ps, err := ParsePrompts(data, jsonl)
		if err != nil {
			return
		}
		if len(ps) == 0 {
			t.Fatal("no prompts and no error")
		}
		for _, p := range ps {
			if (p.Text == "") == (len(p.IDs) == 0) {
				t.Fatalf("prompt %+v has neither or both of text and ids", p)
			}
			if !utf8.ValidString(p.Text) {
				t.Fatalf("invalid UTF-8 %q", p.Text)
			}
			for _, id := range p.IDs {
				if id < 0 {
					t.Fatalf("negative id %d", id)
				}
			}
		}
	})
}
