//go:build cgo

package runtime

import (
	"math"
	"path/filepath"
	"sync"
	"testing"

	"github.com/lowbit-ai/lowbit/kernels"
	"github.com/lowbit-ai/lowbit/kernels/cpu"
	"github.com/lowbit-ai/lowbit/quantize"
)

// cpuOps is one kernels/cpu instance (a thread pool) shared by every test.
var cpuOps struct {
	sync.Once
	ops *cpu.Ops
	err error
}

func cpuBackend(t testing.TB) kernels.Ops {
	cpuOps.Do(func() { cpuOps.ops, cpuOps.err = cpu.New() })
	if cpuOps.err != nil {
		t.Skipf("kernels/cpu: %v", cpuOps.err)
	}
	return cpuOps.ops
}

func init() {
	backends = append(backends, backend{name: "cpu", ops: cpuBackend})
}

// TestMatMulsShared: with kernels/cpu, a layer's q/k/v and gate/up run as
// one MatMuls dispatch each; the logits of a prefill and a decode step must
// be those of separate MatMuls (the same kernels behind a wrapper that
// hides MatMuls), bit for bit, in BF16, FP8 and NVFP4.
func TestMatMulsShared(t *testing.T) {
	ops := cpuBackend(t)
	if _, ok := ops.(matMuls); !ok {
		t.Fatal("kernels/cpu does not implement MatMuls")
	}
	src := small128.write(t)
	dirs := []string{src}
	for _, s := range []quantize.Scheme{quantize.FP8Dynamic, quantize.NVFP4A16, quantize.NVFP4} {
		dir := filepath.Join(t.TempDir(), s.String())
		statsPath := ""
		if s.StaticInputs() {
			statsPath = filepath.Join(t.TempDir(), "stats.safetensors")
			writeStats(t, src, testTokens, statsPath)
		}
		quantizeTo(t, src, dir, quantize.Options{Scheme: s, Format: quantize.CompressedTensors}, statsPath)
		dirs = append(dirs, dir)
	}
	for _, dir := range dirs {
		shared := loadModel(t, dir, ops)
		separate := loadModel(t, dir, struct{ kernels.Ops }{ops})
		s1, s2 := shared.NewSequence(0), separate.NewSequence(0)
		for step, tokens := range [][]int{testTokens, {77}} {
			got, want := forward(t, shared, s1, tokens), forward(t, separate, s2, tokens)
			for i := range want {
				if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
					t.Fatalf("%s, forward %d: logit %d is %g with MatMuls, %g without", filepath.Base(dir), step, i, got[i], want[i])
				}
			}
		}
	}
}
