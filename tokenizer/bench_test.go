package tokenizer

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/lowbit-ai/lowbit/internal/qwen3tok"
)

// englishText is Newton's Opticks from Go's source tree (567 KB of English
// prose), or, where that is absent, the golden corpus's prose repeated.
func englishText(b *testing.B) string {
	for _, root := range []string{os.Getenv("GOROOT"), runtime.GOROOT()} {
		if root == "" {
			continue
		}
		if data, err := os.ReadFile(filepath.Join(root, "src", "testdata", "Isaac.Newton-Opticks.txt")); err == nil {
			return string(data)
		}
	}
	b.Log("Opticks text not found in GOROOT; using repeated prose")
	return strings.Repeat("It was the best of times, it was the worst of times, it was the age of wisdom, it was the age of foolishness. ", 5000)
}

func benchEncode(b *testing.B, text string, cold bool) {
	tok := qwen3(b)
	b.SetBytes(int64(len(text)))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if cold {
			b.StopTimer()
			tok.cache = wordCache{}
			b.StartTimer()
		}
		tok.Encode(text)
	}
}

// BenchmarkEncodeEnglish: steady state of a server (word cache warm).
func BenchmarkEncodeEnglish(b *testing.B) { benchEncode(b, englishText(b), false) }

// BenchmarkEncodeEnglishCold: every pass starts with an empty word cache.
func BenchmarkEncodeEnglishCold(b *testing.B) { benchEncode(b, englishText(b), true) }

func BenchmarkEncodeCode(b *testing.B) {
	files, _ := filepath.Glob("*.go")
	var sb strings.Builder
	for _, f := range files {
		data, _ := os.ReadFile(f)
		sb.Write(data)
	}
	benchEncode(b, sb.String(), false)
}

func BenchmarkEncodeCJK(b *testing.B) {
	benchEncode(b, strings.Repeat("我们今天去公园散步，天气非常好！日本語のテキストです。안녕하세요, 세계! ", 2000), false)
}

func BenchmarkDecode(b *testing.B) {
	tok := qwen3(b)
	text := englishText(b)
	ids := tok.Encode(text)
	b.SetBytes(int64(len(text)))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		tok.Decode(ids, true)
	}
}

func BenchmarkStreamDecode(b *testing.B) {
	tok := qwen3(b)
	text := englishText(b)
	ids := tok.Encode(text)
	b.SetBytes(int64(len(text)))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		d := NewStreamDecoder(tok, true)
		for _, id := range ids {
			d.Add(id)
		}
		d.Flush()
	}
}

func BenchmarkLoad(b *testing.B) {
	files, err := qwen3tok.Files()
	if err != nil {
		b.Fatal(err)
	}
	data := files["tokenizer.json"]
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := Load(data); err != nil {
			b.Fatal(err)
		}
	}
}
