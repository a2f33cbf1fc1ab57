package kl

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/lowbit-ai/lowbit/checkpoint"
	"github.com/lowbit-ai/lowbit/kernels"
	"github.com/lowbit-ai/lowbit/kernels/cpu"
	"github.com/lowbit-ai/lowbit/kernels/ref"
	"github.com/lowbit-ai/lowbit/quantize"
	"github.com/lowbit-ai/lowbit/runtime"
	"github.com/lowbit-ai/lowbit/synth"
	"github.com/lowbit-ai/lowbit/tokenizer"
)

// The tests run synth's tiny Qwen3 (hidden 64, 2 layers, Qwen3's vocabulary
// of 151936) as the reference and its NVFP4A16 and FP8_DYNAMIC
// quantizations as candidates, on kernels/cpu (kernels/ref without cgo).

var fixtures struct {
	once sync.Once
	root string
	dirs map[string]string // "bf16", "nvfp4a16", "fp8-dynamic"
	err  error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if fixtures.root != "" {
		os.RemoveAll(fixtures.root)
	}
	os.Exit(code)
}

// modelDir returns the directory of the named fixture model.
func modelDir(t testing.TB, name string) string {
	t.Helper()
	fixtures.once.Do(func() { fixtures.err = makeFixtures() })
	if fixtures.err != nil {
		t.Fatal(fixtures.err)
	}
	d, ok := fixtures.dirs[name]
	if !ok {
		t.Fatalf("no fixture model %q", name)
	}
	return d
}

func makeFixtures() error {
	root, err := os.MkdirTemp("", "lowbit-kl-test-")
	if err != nil {
		return err
	}
	fixtures.root = root
	src := filepath.Join(root, "bf16")
	if _, err := synth.Write(src, synth.Options{Arch: checkpoint.Qwen3, Size: synth.Tiny, Seed: 1}); err != nil {
		return err
	}
	fixtures.dirs = map[string]string{"bf16": src}
	m, err := checkpoint.OpenModel(src)
	if err != nil {
		return err
	}
	defer m.Close()
	cfg, err := os.ReadFile(filepath.Join(src, checkpoint.ConfigFileName))
	if err != nil {
		return err
	}
	for _, s := range []quantize.Scheme{quantize.NVFP4A16, quantize.FP8Dynamic} {
		p, err := quantize.NewPlan(m.Inventory(), cfg, quantize.Options{Scheme: s, Format: quantize.CompressedTensors})
		if err != nil {
			return err
		}
		out := filepath.Join(root, s.String())
		if err := quantize.Write(context.Background(), m, p, out, quantize.WriteOptions{}); err != nil {
			return fmt.Errorf("quantizing %s: %w", s, err)
		}
		fixtures.dirs[s.String()] = out
	}
	return nil
}

// testOps returns the kernels the tests run on.
func testOps(t testing.TB) kernels.Ops {
	t.Helper()
	c, err := cpu.New()
	if err != nil {
		return ref.Ops{}
	}
	t.Cleanup(c.Close)
	return c
}

// load loads the named fixture model.
func load(t testing.TB, name string) *runtime.Model {
	t.Helper()
	m, err := runtime.Load(modelDir(t, name), testOps(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

// testPrompts returns a few builtin prompts as token ids, cut to at most n
// tokens each.
func testPrompts(t testing.TB, count, n int) [][]int {
	t.Helper()
	tok, err := tokenizer.LoadDir(modelDir(t, "bf16"))
	if err != nil {
		t.Fatal(err)
	}
	var out [][]int
	for _, p := range Builtin()[:count] {
		ids := tok.Encode(p.Text)
		out = append(out, ids[:min(n, len(ids))])
	}
	return out
}
