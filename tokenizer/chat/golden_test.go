package chat

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lowbit-ai/lowbit/internal/qwen3tok"
	"github.com/lowbit-ai/lowbit/tokenizer"
)

// goldenCase is one entry of testdata/golden.json, which
// scripts/golden_chat.py writes from transformers' own renders.
type goldenCase struct {
	Name                string          `json:"name"`
	Template            string          `json:"template"`
	Messages            json.RawMessage `json:"messages"`
	Tools               json.RawMessage `json:"tools"`
	AddGenerationPrompt bool            `json:"add_generation_prompt"`
	Kwargs              json.RawMessage `json:"kwargs"`
	Rendered            *string         `json:"rendered"`
	Error               *string         `json:"error"`
}

type golden struct {
	Transformers   string             `json:"transformers"`
	SpecialTokens  map[string]*string `json:"special_tokens"`
	TemplateSHA256 map[string]string  `json:"template_sha256"`
	Cases          []goldenCase       `json:"cases"`
}

// qwen3Config is the embedded Qwen3 tokenizer's config, read the way the
// server reads it (tokenizer.Config), so the test renders the template the
// server will.
func qwen3Config(t testing.TB) *tokenizer.Config {
	t.Helper()
	files, err := qwen3tok.Files()
	if err != nil {
		t.Fatal(err)
	}
	tok, err := tokenizer.Load(files["tokenizer.json"])
	if err != nil {
		t.Fatal(err)
	}
	if err := tok.SetConfig(files["tokenizer_config.json"]); err != nil {
		t.Fatal(err)
	}
	return tok.Config
}

// templates returns the golden set's templates by the names
// scripts/golden_chat.py gives them.
func templates(t testing.TB) map[string]string {
	t.Helper()
	m := map[string]string{"qwen3": qwen3Config(t).ChatTemplate}
	for name, file := range map[string]string{
		"qwen3-2507": "qwen3-4b-instruct-2507.jinja",
		"features":   "features.jinja",
	} {
		b, err := os.ReadFile(filepath.Join("testdata", file))
		if err != nil {
			t.Fatal(err)
		}
		m[name] = string(b)
	}
	return m
}

func loadGolden(t testing.TB) golden {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "golden.json"))
	if err != nil {
		t.Fatal(err)
	}
	var g golden
	if err := json.Unmarshal(b, &g); err != nil {
		t.Fatal(err)
	}
	return g
}

// input builds the Input the golden case was rendered with, keeping the
// JSON's key order and number spellings as Python had them.
func (c goldenCase) input(t testing.TB, g golden) Input {
	t.Helper()
	var raw []map[string]json.RawMessage
	if err := json.Unmarshal(c.Messages, &raw); err != nil {
		t.Fatal(err)
	}
	in := Input{AddGenerationPrompt: c.AddGenerationPrompt, Messages: make([]map[string]any, len(raw))}
	for i, m := range raw {
		in.Messages[i] = map[string]any{}
		for k, v := range m {
			in.Messages[i][k] = v
		}
	}
	if !bytes.Equal(c.Tools, []byte("null")) {
		var tools []json.RawMessage
		if err := json.Unmarshal(c.Tools, &tools); err != nil {
			t.Fatal(err)
		}
		for _, tool := range tools {
			in.Tools = append(in.Tools, tool)
		}
	}
	var kw map[string]json.RawMessage
	if err := json.Unmarshal(c.Kwargs, &kw); err != nil {
		t.Fatal(err)
	}
	if len(kw) > 0 {
		in.Kwargs = map[string]any{}
		for k, v := range kw {
			in.Kwargs[k] = v
		}
	}
	if s := g.SpecialTokens["bos_token"]; s != nil {
		in.BOSToken = *s
	}
	if s := g.SpecialTokens["eos_token"]; s != nil {
		in.EOSToken = *s
	}
	return in
}

func TestGolden(t *testing.T) {
	g := loadGolden(t)
	tmpls := templates(t)
	for name, want := range g.TemplateSHA256 {
		sum := sha256.Sum256([]byte(tmpls[name]))
		if got := hex.EncodeToString(sum[:]); got != want {
			t.Fatalf("template %q changed since golden.json was made (sha256 %s, golden %s): rerun scripts/golden_chat.py", name, got, want)
		}
	}
	if len(g.Cases) < 40 {
		t.Fatalf("golden.json has %d cases", len(g.Cases))
	}
	for _, c := range g.Cases {
		t.Run(c.Name, func(t *testing.T) {
			got, err := Render(tmpls[c.Template], c.input(t, g))
			if c.Error != nil {
				if err == nil {
					t.Fatalf("transformers failed (%s), Render returned:\n%s", *c.Error, got)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != *c.Rendered {
				t.Errorf("render differs from transformers %s\n%s", g.Transformers, firstDiff(*c.Rendered, got))
			}
		})
	}
}

// firstDiff shows where got first departs from want.
func firstDiff(want, got string) string {
	i := 0
	for i < len(want) && i < len(got) && want[i] == got[i] {
		i++
	}
	lo := strings.LastIndexByte(want[:i], '\n') + 1
	return "at byte " + itoa(i) + ":\nwant " + quoteLine(want[lo:]) + "\ngot  " + quoteLine(got[lo:])
}

func quoteLine(s string) string {
	if j := strings.IndexByte(s, '\n'); j >= 0 {
		s = s[:j+1]
	}
	b, _ := json.Marshal(s)
	return string(b)
}

func itoa(i int) string { b, _ := json.Marshal(i); return string(b) }
