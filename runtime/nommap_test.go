package runtime

import (
	"errors"
	"math"
	"path/filepath"
	"testing"
	"unsafe"

	"github.com/lowbit-ai/lowbit/checkpoint"
	"github.com/lowbit-ai/lowbit/quantize"
)

// TestNoMmap loads BF16, FP8 and NVFP4 checkpoints, with tied and untied
// embeddings, with and without LoadOptions.NoMmap on every backend, and
// checks that the copy holds every streamed tensor, that the checkpoint is
// closed, and that a prefill and a decode step give the same logits bit for
// bit.
func TestNoMmap(t *testing.T) {
	for _, tied := range []bool{false, true} {
		spec := small128
		spec.tied = tied
		src := spec.write(t)
		dirs := map[string]string{"bf16": src}
		for name, s := range map[string]quantize.Scheme{"fp8-dynamic": quantize.FP8Dynamic, "nvfp4a16": quantize.NVFP4A16} {
			dirs[name] = filepath.Join(t.TempDir(), name)
			quantizeTo(t, src, dirs[name], quantize.Options{Scheme: s, Format: quantize.CompressedTensors}, "")
		}
		for name, dir := range dirs {
			for _, b := range backends {
				label := name + "/" + b.name
				if tied {
					label += "/tied"
				}
				t.Run(label, func(t *testing.T) {
					ops := b.ops(t)
					mapped := loadModel(t, dir, ops)
					copied, err := LoadWith(dir, ops, LoadOptions{NoMmap: true})
					if err != nil {
						t.Fatal(err)
					}
					defer copied.Close()
					checkInArena(t, copied, tied)
					if _, err := copied.ck.Tensor("model.norm.weight"); !errors.Is(err, checkpoint.ErrClosed) {
						t.Errorf("checkpoint of a NoMmap model: Tensor gives %v, want ErrClosed", err)
					}
					s1, s2 := mapped.NewSequence(0), copied.NewSequence(0)
					for step, tokens := range [][]int{testTokens, {77}} {
						want, got := forward(t, mapped, s1, tokens), forward(t, copied, s2, tokens)
						for i := range want {
							if math.Float32bits(want[i]) != math.Float32bits(got[i]) {
								t.Fatalf("forward %d: logit %d is %g with NoMmap, %g without", step, i, got[i], want[i])
							}
						}
					}
				})
			}
		}
	}
}

// checkInArena checks that the embedding and every linear layer's data and
// scales are cache-line-aligned slices of m's arena.
func checkInArena(t *testing.T, m *Model, tied bool) {
	t.Helper()
	if m.arena == nil {
		t.Fatal("no arena")
	}
	buf := m.arena.bytes()
	lo := uintptr(unsafe.Pointer(unsafe.SliceData(buf)))
	hi := lo + uintptr(len(buf))
	in := func(what string, p unsafe.Pointer, n int) {
		if n == 0 {
			return
		}
		a := uintptr(p)
		if a < lo || a+uintptr(n) > hi || a%arenaAlign != 0 {
			t.Errorf("%s: %d bytes at %#x, want an aligned slice of the arena [%#x, %#x)", what, n, a, lo, hi)
		}
	}
	in("embedding", unsafe.Pointer(unsafe.SliceData(m.embed)), len(m.embed))
	for i, w := range m.linearWeights() {
		in("weight data", unsafe.Pointer(unsafe.SliceData(w.Data)), len(w.Data))
		p, n := floatBytes(w.Scales)
		in("weight scales", unsafe.Pointer(p), n)
		if i == len(m.layers)*7 && tied && unsafe.SliceData(w.Data) != unsafe.SliceData(m.embed) {
			t.Error("the tied LM head is not the embedding's copy")
		}
	}
}
