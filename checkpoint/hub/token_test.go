package hub

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestFindToken(t *testing.T) {
	home := t.TempDir()
	write := func(path, s string) string {
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	defaultFile := write(filepath.Join(home, ".cache", "huggingface", "token"), "hf_default\n")
	hfHomeFile := write(filepath.Join(home, "hfhome", "token"), "  hf_home  ")
	xdgFile := write(filepath.Join(home, "xdg", "huggingface", "token"), "hf_xdg")
	pathFile := write(filepath.Join(home, "elsewhere", "tok"), "hf_path\r\n")
	empty := write(filepath.Join(home, "empty"), "\n")
	for _, tt := range []struct {
		name       string
		env        map[string]string
		token, src string
		err        string
	}{
		{"HF_TOKEN wins", map[string]string{"HF_TOKEN": " hf_env\n", "HUGGING_FACE_HUB_TOKEN": "hf_old"}, "hf_env", "$HF_TOKEN", ""},
		{"older variable", map[string]string{"HUGGING_FACE_HUB_TOKEN": "hf_old"}, "hf_old", "$HUGGING_FACE_HUB_TOKEN", ""},
		{"HF_TOKEN_PATH", map[string]string{"HF_TOKEN_PATH": pathFile, "HF_HOME": filepath.Dir(hfHomeFile)}, "hf_path", pathFile, ""},
		{"HF_TOKEN_PATH with a variable", map[string]string{"HF_TOKEN_PATH": "$HOME/elsewhere/tok"}, "hf_path", pathFile, ""},
		{"HF_HOME", map[string]string{"HF_HOME": filepath.Dir(hfHomeFile)}, "hf_home", hfHomeFile, ""},
		{"XDG_CACHE_HOME", map[string]string{"XDG_CACHE_HOME": filepath.Join(home, "xdg")}, "hf_xdg", xdgFile, ""},
		{"default file", nil, "hf_default", defaultFile, ""},
		{"no file", map[string]string{"HF_HOME": filepath.Join(home, "none")}, "", "", "no token file at " + filepath.Join(home, "none", "token")},
		{"empty file", map[string]string{"HF_TOKEN_PATH": empty}, "", "", "is empty"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			for _, k := range []string{"HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_TOKEN_PATH", "HF_HOME", "XDG_CACHE_HOME"} {
				t.Setenv(k, tt.env[k])
			}
			t.Setenv("HOME", home)
			token, src, err := FindToken()
			if tt.err != "" {
				if !errors.Is(err, ErrNoToken) || !strings.Contains(err.Error(), tt.err) || !strings.Contains(err.Error(), "HF_TOKEN") {
					t.Fatalf("err %v: want ErrNoToken mentioning %q and HF_TOKEN", err, tt.err)
				}
				return
			}
			if err != nil || token != tt.token || src != tt.src {
				t.Fatalf("FindToken() = %q, %q, %v; want %q, %q", token, src, err, tt.token, tt.src)
			}
		})
	}
}

func TestEndpoint(t *testing.T) {
	t.Setenv("HF_ENDPOINT", "https://hf-mirror.example.com/")
	c, err := NewClient("", "t", "")
	if err != nil || c.Endpoint != "https://hf-mirror.example.com" {
		t.Fatalf("endpoint %q, %v: want the HF_ENDPOINT mirror without its slash", c.Endpoint, err)
	}
	if got := c.fixURL(DefaultEndpoint + "/lfs/x"); got != "https://hf-mirror.example.com/lfs/x" {
		t.Errorf("fixURL = %q", got)
	}
	if got := c.fixURL("https://s3.example.com/x"); got != "https://s3.example.com/x" {
		t.Errorf("fixURL changed a storage URL: %q", got)
	}
	for _, bad := range []string{"huggingface.co", "ftp://x", "http://"} {
		if _, err := NewClient(bad, "t", ""); err == nil || !strings.Contains(err.Error(), "want an http or https URL") {
			t.Errorf("NewClient(%q): %v", bad, err)
		}
	}
}
