package hub

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// ErrNoToken is returned by FindToken when neither the environment nor the
// token file holds a token.
var ErrNoToken = errors.New("no Hugging Face token: set HF_TOKEN to a token with write access " +
	"(https://huggingface.co/settings/tokens), or run `hf auth login`")

// FindToken returns the Hub token and where it came from: the HF_TOKEN
// environment variable (or the older HUGGING_FACE_HUB_TOKEN), else the token
// file (TokenPath). It returns ErrNoToken, wrapped with the file it looked
// at, when there is none.
func FindToken() (token, source string, err error) {
	for _, name := range []string{"HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"} {
		if t := cleanToken(os.Getenv(name)); t != "" {
			return t, "$" + name, nil
		}
	}
	path := TokenPath()
	b, err := os.ReadFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return "", "", fmt.Errorf("%w (no token file at %s)", ErrNoToken, path)
	case err != nil:
		return "", "", fmt.Errorf("hub: read token file: %w", err)
	}
	if t := cleanToken(string(b)); t != "" {
		return t, path, nil
	}
	return "", "", fmt.Errorf("%w (the token file %s is empty)", ErrNoToken, path)
}

// TokenPath is where huggingface_hub keeps the token: HF_TOKEN_PATH, else
// $HF_HOME/token, else $XDG_CACHE_HOME/huggingface/token, else
// ~/.cache/huggingface/token. Variables and a leading ~ are expanded, as
// huggingface_hub expands them.
func TokenPath() string {
	if p := os.Getenv("HF_TOKEN_PATH"); p != "" {
		return expandPath(p)
	}
	return filepath.Join(hfHome(), "token")
}

func hfHome() string {
	if h := os.Getenv("HF_HOME"); h != "" {
		return expandPath(h)
	}
	cache := os.Getenv("XDG_CACHE_HOME")
	if cache == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			home = "~"
		}
		cache = filepath.Join(home, ".cache")
	}
	return filepath.Join(expandPath(cache), "huggingface")
}

func expandPath(p string) string {
	p = os.ExpandEnv(p)
	if p == "~" || strings.HasPrefix(p, "~/") {
		if home, err := os.UserHomeDir(); err == nil {
			p = filepath.Join(home, p[1:])
		}
	}
	return p
}

// cleanToken strips the whitespace and line breaks a token file or a
// pasted variable carries.
func cleanToken(s string) string {
	return strings.TrimSpace(strings.ReplaceAll(s, "\n", ""))
}
