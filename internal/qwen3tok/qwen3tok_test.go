package qwen3tok

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"strings"
	"testing"
)

// The embedded files must be byte-identical to what PROVENANCE.md records, so
// a silent edit or a bad regeneration fails here.
func TestFilesMatchProvenance(t *testing.T) {
	prov, err := os.ReadFile("PROVENANCE.md")
	if err != nil {
		t.Fatal(err)
	}
	files, err := Files()
	if err != nil {
		t.Fatal(err)
	}
	for name, data := range files {
		sum := sha256.Sum256(data)
		want := "sha256 " + name
		found := false
		for _, line := range strings.Split(string(prov), "\n") {
			if strings.Contains(line, want+" ") || strings.Contains(line, want+":") {
				found = true
				if !strings.Contains(line, hex.EncodeToString(sum[:])) {
					t.Errorf("%s: sha256 %x not in PROVENANCE.md line %q", name, sum, line)
				}
			}
		}
		if !found {
			t.Errorf("%s: no sha256 line in PROVENANCE.md", name)
		}
	}
}

func TestVocabulary(t *testing.T) {
	files, err := Files()
	if err != nil {
		t.Fatal(err)
	}
	var tok struct {
		Model struct {
			Vocab map[string]int `json:"vocab"`
		} `json:"model"`
		AddedTokens []struct {
			ID      int    `json:"id"`
			Content string `json:"content"`
		} `json:"added_tokens"`
	}
	if err := json.Unmarshal(files["tokenizer.json"], &tok); err != nil {
		t.Fatal(err)
	}
	maxID := -1
	for _, id := range tok.Model.Vocab {
		maxID = max(maxID, id)
	}
	byID := map[int]string{}
	for _, a := range tok.AddedTokens {
		byID[a.ID] = a.Content
		maxID = max(maxID, a.ID)
	}
	if got := maxID + 1; got != NumTokens {
		t.Errorf("ids = %d, want %d", got, NumTokens)
	}
	for id, want := range map[int]string{EOSChat: "<|im_end|>", EOSText: "<|endoftext|>", 151667: "<think>"} {
		if byID[id] != want {
			t.Errorf("token %d = %q, want %q", id, byID[id], want)
		}
	}
	var gen map[string]any
	if err := json.Unmarshal(GenerationConfig(), &gen); err != nil {
		t.Fatalf("GenerationConfig: %v", err)
	}
}
