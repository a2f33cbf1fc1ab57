package tokenizer

import (
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/lowbit-ai/lowbit/internal/qwen3tok"
)

var (
	qwenOnce sync.Once
	qwenTok  *Tokenizer
	qwenErr  error
	qwenDir  string
)

// qwen3 returns Qwen3's tokenizer, loaded once per test binary with
// LoadDir from a temporary copy of the embedded files.
func qwen3(tb testing.TB) *Tokenizer {
	tb.Helper()
	qwenOnce.Do(func() {
		files, err := qwen3tok.Files()
		if err != nil {
			qwenErr = err
			return
		}
		dir, err := os.MkdirTemp("", "qwen3tok-")
		if err != nil {
			qwenErr = err
			return
		}
		qwenDir = dir
		for name, data := range files {
			if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
				qwenErr = err
				return
			}
		}
		qwenTok, qwenErr = LoadDir(dir)
	})
	if qwenErr != nil {
		tb.Fatal(qwenErr)
	}
	return qwenTok
}

func TestMain(m *testing.M) {
	code := m.Run()
	if qwenDir != "" {
		os.RemoveAll(qwenDir)
	}
	os.Exit(code)
}
