package checkpoint

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestCopyAuxFiles(t *testing.T) {
	cases := []struct {
		name    string
		present []string // files in the source; "dir:" prefix makes a directory
		want    []string
		wantErr string
	}{
		{"none", nil, nil, ""},
		{"some", []string{"merges.txt", "tokenizer.json", "config.json", "model.safetensors", "chat_template.jinja"},
			[]string{"tokenizer.json", "merges.txt", "chat_template.jinja"}, ""},
		{"all", AuxFileNames(), AuxFileNames(), ""},
		{"directory in the way", []string{"tokenizer.json", "dir:vocab.json"}, []string{"tokenizer.json"}, "vocab.json"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			src, dst := t.TempDir(), t.TempDir()
			blobs := t.TempDir()
			for i, n := range c.present {
				if d, ok := strings.CutPrefix(n, "dir:"); ok {
					os.Mkdir(filepath.Join(src, d), 0o755)
					continue
				}
				if i%2 == 0 { // a symbolic link, as in a Hugging Face cache snapshot
					blob := writeBytes(t, blobs, n, []byte("content of "+n))
					if err := os.Symlink(blob, filepath.Join(src, n)); err != nil {
						t.Fatal(err)
					}
				} else {
					writeBytes(t, src, n, []byte("content of "+n))
				}
			}
			got, err := CopyAuxFiles(src, dst)
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Errorf("err = %v, want one mentioning %q", err, c.wantErr)
				}
			} else if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, c.want) {
				t.Errorf("copied %q, want %q", got, c.want)
			}
			if names := dirNames(t, dst); len(names) != len(c.want) {
				t.Errorf("destination holds %q", names)
			}
			for _, n := range c.want {
				b, err := os.ReadFile(filepath.Join(dst, n))
				if err != nil || string(b) != "content of "+n {
					t.Errorf("%s: %q, %v", n, b, err)
				}
				if st, _ := os.Lstat(filepath.Join(dst, n)); !st.Mode().IsRegular() || st.Mode().Perm() != 0o644 {
					t.Errorf("%s: mode %v", n, st.Mode())
				}
			}
		})
	}
	if got := AuxFileNames(); slices.Contains(got, "config.json") || len(got) != 10 {
		t.Errorf("AuxFileNames = %q", got)
	}
}

func TestCopyAuxFilesMissingDest(t *testing.T) {
	src := t.TempDir()
	writeBytes(t, src, "tokenizer.json", []byte("{}"))
	dst := filepath.Join(t.TempDir(), "nope")
	if _, err := CopyAuxFiles(src, dst); err == nil || !strings.Contains(err.Error(), "tokenizer.json") {
		t.Errorf("err = %v", err)
	}
}
