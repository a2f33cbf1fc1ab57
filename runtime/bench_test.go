//go:build cgo

package runtime

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/lowbit-ai/lowbit/checkpoint"
	"github.com/lowbit-ai/lowbit/kernels"
	"github.com/lowbit-ai/lowbit/quantize"
	"github.com/lowbit-ai/lowbit/synth"
)

// benchLoads are the two ways BenchmarkDecode and BenchmarkDecodeOps load
// each checkpoint.
var benchLoads = []struct {
	name string
	opts LoadOptions
}{{"mmap", LoadOptions{}}, {"no-mmap", LoadOptions{NoMmap: true}}}

// benchKVs are the KV caches the decode benchmarks run over: BF16, what
// lowbit serve holds by default, and float32, lowbit generate's.
var benchKVs = []struct {
	name  string
	dtype kernels.KVDType
}{{"kv=bf16", kernels.KVBF16}, {"kv=float32", kernels.KVFloat32}}

// The decode benchmark of BENCHMARKS.md: the Qwen3-0.6B shape (synthetic
// weights, tied 151936x1024 embedding) in BF16, FP8 (fp8-dynamic) and NVFP4
// (nvfp4a16) on kernels/cpu, each beside its roofline, the memory
// bandwidth (measured in the same run) over the bytes a decode step reads:
// every weight and scale once, and the KV cache of the context.
//
//	go test ./runtime -run XXX -bench BenchmarkDecode -benchtime 16x
//
// The roofline takes the higher of the bandwidth probe before the formats
// and one after each run's steps (mem-GB/s, mem-after-GB/s: their spread
// says how steady the machine was); of-roofline-paired takes probes and
// steps in alternation instead (pairedRatio). Each format runs twice, one right
// after the other: "mmap", the default load (weights are views of the
// mapped checkpoint), and "no-mmap", LoadOptions.NoMmap (weights copied
// into huge-page memory); -bench 'BenchmarkDecode/.*/mmap' runs the first
// alone. Each of those runs over a BF16 and a float32 KV cache (benchKVs).
// The steps are timed in the steady state of a server, whose KV blocks
// have held other requests before: each round decodes its positions once
// untimed, so that no page of the cache is touched first inside the timer
// (a first touch costs a page fault, about 56 a step on this shape). The checkpoints (1.2 GB, 0.9 GB and 0.7 GB) are written once into
// os.TempDir()/lowbit-bench-qwen3-0.6b and reused.
func BenchmarkDecode(b *testing.B) {
	ops, bandwidth := benchBackend(b)
	b.Logf("kernels %s; memory bandwidth %.2f GB/s", ops.Name(), bandwidth/1e9)
	for _, v := range benchVariants {
		for _, load := range benchLoads {
			for _, kv := range benchKVs {
				b.Run(v.name+"/"+load.name+"/"+kv.name, func(b *testing.B) {
					benchDecode(b, benchCheckpoint(b, v), load.opts, kv.dtype, ops, bandwidth)
				})
			}
		}
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

// prefilled keeps, per checkpoint and load, a model whose sequence holds
// the prompt, so that the benchmark's rounds (b.N = 1, then more) prefill
// once.
var prefilled = map[benchKey]*benchState{}

type benchKey struct {
	dir  string
	opts LoadOptions
	kv   kernels.KVDType
}

type benchState struct {
	m       *Model
	seq     *Sequence
	next    int // the greedy token after the prompt
	prefill time.Duration
}

func benchDecode(b *testing.B, dir string, opts LoadOptions, kv kernels.KVDType, ops kernels.Ops, bandwidth float64) {
	key := benchKey{dir, opts, kv}
	st := prefilled[key]
	if st == nil {
		var m *Model
		for k, o := range prefilled { // the same model over another KV cache
			if k.dir == dir && k.opts == opts {
				m = o.m
			}
		}
		if m == nil {
			t0 := time.Now()
			var err error
			if m, err = LoadWith(dir, ops, opts); err != nil {
				b.Fatal(err)
			}
			b.Logf("loaded in %v%s", time.Since(t0).Round(time.Millisecond), hugePages(m))
		}
		prompt := make([]int, benchPrompt)
		for i := range prompt {
			prompt[i] = (i*7919 + 13) % 151669
		}
		// One token first, so that the timed prefill does not include
		// reading a mapped checkpoint from disk (a NoMmap load of another
		// run drops the files from the page cache).
		if _, err := m.Forward(m.NewSequence(1), prompt[:1]); err != nil {
			b.Fatal(err)
		}
		seq, err := m.NewSequenceKV(0, kv)
		if err != nil {
			b.Fatal(err)
		}
		var gs GenerateStats
		gs, err = m.Generate(context.Background(), seq, prompt, GenerateOptions{MaxTokens: 1}, func(id int) error {
			st = &benchState{m: m, seq: seq, next: id}
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
		st.prefill = gs.Prefill
		prefilled[key] = st
	}
	elapsed, median := st.decodeSteps(b)
	after := benchBandwidth(1 << 30)
	b.ReportMetric(after/1e9, "mem-after-GB/s")
	decode := float64(b.N) / elapsed.Seconds()
	b.ReportMetric(st.pairedRatio(b), "of-roofline-paired")
	perToken := st.bytesPerToken(b.N)
	roofline := max(bandwidth, after) / perToken
	b.ReportMetric(decode, "tok/s")
	b.ReportMetric(benchPrompt/st.prefill.Seconds(), "prefill-tok/s")
	b.ReportMetric(perToken/1e6, "MB/tok")
	b.ReportMetric(roofline, "roofline-tok/s")
	b.ReportMetric(decode/roofline, "of-roofline")
	// The median step as well: on a shared VM, a neighbour's burst moves
	// the mean of 16 steps by up to 2x, the median much less.
	b.ReportMetric(1/median.Seconds()/roofline, "of-roofline-median")
	b.ReportMetric(bandwidth/1e9, "mem-GB/s")
}

// decodeSteps times b.N greedy decode steps after the prompt (the
// benchmark timer runs over them only) and returns their time and the
// median step's. The same steps run once before, untimed, so that the
// timed ones write KV cache pages that have been touched (a server's
// steady state).
func (st *benchState) decodeSteps(b *testing.B) (elapsed, median time.Duration) {
	st.warmSteps(b, b.N)
	return st.timedSteps(b)
}

// warmSteps decodes n steps after the prompt, untimed.
func (st *benchState) warmSteps(b *testing.B, n int) {
	st.seq.Truncate(benchPrompt)
	for tok, i := st.next, 0; i < n; i++ {
		tok = st.step(b, tok)
	}
}

// step decodes tok at the sequence's end and returns the greedy next one.
func (st *benchState) step(b *testing.B, tok int) int {
	logits, err := st.m.ForwardWith(st.seq, []int{tok}, ForwardOptions{LastOnly: true})
	if err != nil {
		b.Fatal(err)
	}
	return argmax(logits)
}

// bytesPerToken is what a decode step reads, over n steps from
// benchPrompt: the weights once, and K and V of the steps' average
// context.
func (st *benchState) bytesPerToken(n int) float64 {
	return float64(st.m.WeightBytes()) + float64(st.m.KVBlockBytes(1, st.seq.dtype))*(benchPrompt+float64(n+1)/2)
}

// pairedRatio returns the median, over benchPairRounds rounds, of the
// ratio of decode to the roofline within a round: a bandwidth probe of
// 256 MiB, benchPairSteps steps from benchPrompt (positions the timed
// steps have written before), a second probe, the roofline from the two
// probes' mean. On the Zen 5 VM the probe swings between about 30 and 80
// GB/s from one minute to the next (BENCHMARKS.md), so of-roofline, the
// steps against the better of two probes taken tens of seconds apart,
// moves with the neighbours' traffic; a round compares steps with the
// bandwidth of the same fraction of a second.
func (st *benchState) pairedRatio(b *testing.B) float64 {
	perToken := st.bytesPerToken(benchPairSteps)
	ratios := make([]float64, benchPairRounds)
	for r := range ratios {
		before := benchBandwidth(256 << 20)
		st.seq.Truncate(benchPrompt)
		tok := st.next
		t0 := time.Now()
		for range benchPairSteps {
			tok = st.step(b, tok)
		}
		rate := benchPairSteps / time.Since(t0).Seconds()
		bw := (before + benchBandwidth(256<<20)) / 2
		ratios[r] = rate / (bw / perToken)
	}
	slices.Sort(ratios)
	return ratios[len(ratios)/2]
}

// The rounds and steps of pairedRatio.
const (
	benchPairRounds = 9
	benchPairSteps  = 4
)

// timedSteps is decodeSteps without the untimed pass.
func (st *benchState) timedSteps(b *testing.B) (elapsed, median time.Duration) {
	st.seq.Truncate(benchPrompt)
	tok := st.next
	steps := make([]time.Duration, b.N)
	b.ResetTimer()
	t0 := time.Now()
	for i := range b.N {
		ts := time.Now()
		tok = st.step(b, tok)
		steps[i] = time.Since(ts)
	}
	elapsed = time.Since(t0)
	b.StopTimer()
	slices.Sort(steps)
	return elapsed, steps[b.N/2]
}

// hugePages describes how much of a NoMmap model's arena the kernel backs
// with transparent huge pages (AnonHugePages of /proc/self/smaps), or
// returns "" for a mapped model or without /proc.
func hugePages(m *Model) string {
	if m.arena == nil {
		return ""
	}
	buf := m.arena.bytes()
	lo := uint64(uintptr(unsafe.Pointer(unsafe.SliceData(buf))))
	hi := lo + uint64(len(buf))
	f, err := os.ReadFile("/proc/self/smaps")
	if err != nil {
		return ""
	}
	var kB int64
	inside := false
	for _, line := range strings.Split(string(f), "\n") {
		var start, end uint64
		if n, _ := fmt.Sscanf(line, "%x-%x ", &start, &end); n == 2 {
			inside = start < hi && end > lo
			continue
		}
		var v int64
		if inside && strings.HasPrefix(line, "AnonHugePages:") {
			if _, err := fmt.Sscanf(line, "AnonHugePages: %d kB", &v); err == nil {
				kB += v
			}
		}
	}
	return fmt.Sprintf("; %d of %d MiB of weights in huge pages", kB>>10, len(buf)>>20)
}
