//go:build cgo

package runtime

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/lowbit-ai/lowbit/checkpoint"
	"github.com/lowbit-ai/lowbit/kernels"
	"github.com/lowbit-ai/lowbit/quantize"
	"github.com/lowbit-ai/lowbit/synth"
)

// The decode benchmark of BENCHMARKS.md: the Qwen3-0.6B shape (synthetic
// weights, tied 151936x1024 embedding) in BF16, FP8 (fp8-dynamic) and NVFP4
// (nvfp4a16) on kernels/cpu, each beside its roofline, the memory
// bandwidth (measured in the same run) over the bytes a decode step reads:
// every weight and scale once, and the KV cache of the context.
//
//	go test ./runtime -run XXX -bench BenchmarkDecode -benchtime 16x
//
// The checkpoints (1.2 GB, 0.9 GB and 0.7 GB) are written once into
// os.TempDir()/lowbit-bench-qwen3-0.6b and reused.
func BenchmarkDecode(b *testing.B) {
	ops, bandwidth := benchBackend(b)
	b.Logf("kernels %s; memory bandwidth %.2f GB/s", ops.Name(), bandwidth/1e9)
	for _, v := range benchVariants {
		b.Run(v.name, func(b *testing.B) { benchDecode(b, benchCheckpoint(b, v), ops, bandwidth) })
	}
}

// benchPrompt is the prefill length before decoding.
const benchPrompt = 256

var benchVariants = []struct {
	name   string
	scheme quantize.Scheme // 0: the BF16 source
}{{"bf16", 0}, {"fp8-dynamic", quantize.FP8Dynamic}, {"nvfp4a16", quantize.NVFP4A16}}

var benchMu sync.Mutex

// benchCheckpoint returns the directory of a variant, writing it (and the
// BF16 source) on first use.
func benchCheckpoint(b *testing.B, v struct {
	name   string
	scheme quantize.Scheme
}) string {
	benchMu.Lock()
	defer benchMu.Unlock()
	root := filepath.Join(os.TempDir(), "lowbit-bench-qwen3-0.6b")
	complete := func(dir string) bool { _, err := checkpoint.ReadInventory(dir); return err == nil }
	src := filepath.Join(root, "bf16")
	if !complete(src) {
		os.RemoveAll(src)
		t0 := time.Now()
		if _, err := synth.Write(src, synth.Options{Arch: checkpoint.Qwen3, Size: "qwen3-0.6b", Seed: 1}); err != nil {
			b.Fatal(err)
		}
		b.Logf("wrote %s in %v", src, time.Since(t0).Round(time.Millisecond))
	}
	if v.scheme == 0 {
		return src
	}
	dst := filepath.Join(root, v.name)
	if !complete(dst) {
		os.RemoveAll(dst)
		t0 := time.Now()
		quantizeTo(b, src, dst, quantize.Options{Scheme: v.scheme, Format: quantize.CompressedTensors}, "")
		b.Logf("wrote %s in %v", dst, time.Since(t0).Round(time.Millisecond))
	}
	return dst
}

// prefilled keeps, per checkpoint, a model whose sequence holds the prompt,
// so that the benchmark's rounds (b.N = 1, then more) prefill once.
var prefilled = map[string]*benchState{}

type benchState struct {
	m       *Model
	seq     *Sequence
	next    int // the greedy token after the prompt
	prefill time.Duration
}

func benchDecode(b *testing.B, dir string, ops kernels.Ops, bandwidth float64) {
	st := prefilled[dir]
	if st == nil {
		m, err := Load(dir, ops)
		if err != nil {
			b.Fatal(err)
		}
		prompt := make([]int, benchPrompt)
		for i := range prompt {
			prompt[i] = (i*7919 + 13) % 151669
		}
		seq := m.NewSequence(0)
		var gs GenerateStats
		gs, err = m.Generate(context.Background(), seq, prompt, GenerateOptions{MaxTokens: 1}, func(id int) error {
			st = &benchState{m: m, seq: seq, next: id}
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
		st.prefill = gs.Prefill
		prefilled[dir] = st
	}
	st.seq.Truncate(benchPrompt)
	tok := st.next
	b.ResetTimer()
	t0 := time.Now()
	for range b.N {
		logits, err := st.m.ForwardWith(st.seq, []int{tok}, ForwardOptions{LastOnly: true})
		if err != nil {
			b.Fatal(err)
		}
		tok = argmax(logits)
	}
	elapsed := time.Since(t0)
	b.StopTimer()
	decode := float64(b.N) / elapsed.Seconds()
	// Bytes read per step: the weights once, and K and V of the average
	// context of the steps.
	perToken := float64(st.m.WeightBytes()) + float64(st.m.KVBytesPerToken())*(benchPrompt+float64(b.N+1)/2)
	roofline := bandwidth / perToken
	b.ReportMetric(decode, "tok/s")
	b.ReportMetric(benchPrompt/st.prefill.Seconds(), "prefill-tok/s")
	b.ReportMetric(perToken/1e6, "MB/tok")
	b.ReportMetric(roofline, "roofline-tok/s")
	b.ReportMetric(decode/roofline, "of-roofline")
	b.ReportMetric(bandwidth/1e9, "mem-GB/s")
}
