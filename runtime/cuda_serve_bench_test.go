//go:build cgo

package runtime

import (
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/lowbit-ai/lowbit/kernels"
	"github.com/lowbit-ai/lowbit/kernels/cuda"
)

// BenchmarkCUDAServeSteps: the two phases of LowBArena's serve workload on
// the device-resident forward, as lowbit serve runs them (BF16 prefill,
// top-64 rows on the device), without the HTTP and engine around them:
// 32 prompts of 8,192 tokens prefilled in chunks of 8,192, lowbit serve's
// step on a GPU (LOWBIT_SERVE_CHUNK, a divisor of 8,192, sets another; one
// sequence a chunk), then decode steps of the 32 sequences together at 8,192
// positions. Each phase is set beside its floor measured in the same run:
// a decode step against the bytes it reads (weights and the 32 caches)
// over the copy bandwidth; prefill against its FLOPs at PyTorch's best
// BF16 matmul rate on the device (scripts/torch_gemm.py's file, named by
// LOWBIT_TORCH_GEMM, as BenchmarkKernels reads it; no ratio without it).
//
//	runtime.test -test.run XXX -test.bench CUDAServeSteps -test.benchtime 16x
func BenchmarkCUDAServeSteps(b *testing.B) {
	d, bw, m := cudaBenchModel(b, "qwen3-8b")
	const seqs, prompt, bs = 32, 8192, 16
	chunk := 8192
	if v := os.Getenv("LOWBIT_SERVE_CHUNK"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 || prompt%n != 0 {
			b.Fatalf("LOWBIT_SERVE_CHUNK=%q: want a divisor of %d", v, prompt)
		}
		chunk = n
	}
	perSeq := (prompt + 256) / bs
	gpu, err := NewCUDAExecutor(m, d, seqs*perSeq, bs, kernels.KVBF16, benchActivations(b))
	if err != nil {
		b.Fatal(err)
	}
	defer gpu.Close()
	gpu.TopOnDevice = true
	tables := make([][]int32, seqs)
	for s := range tables {
		tables[s] = make([]int32, perSeq)
		for i := range tables[s] {
			tables[s][i] = int32(s*perSeq + i)
		}
	}
	toks := make([]int, prompt)
	t0 := time.Now()
	var chunks []time.Duration
	for s := range seqs {
		for i := range toks {
			toks[i] = (i*7919 + s*104729 + 13) % 151669
		}
		for c := 0; c < prompt; c += chunk {
			logits := 0
			if c+chunk == prompt {
				logits = 1
			}
			// One chunk, the second sequence's last, with each kernel timed.
			profile := s == 1 && c+chunk == prompt
			if profile {
				if err := d.StartProfile(); err != nil {
					b.Fatal(err)
				}
			}
			c0 := time.Now()
			if _, _, err := gpu.ForwardTop([]BatchEntry{{Blocks: tables[s], Start: c, Tokens: toks[c : c+chunk], Logits: logits, Prompt: chunk}},
				cuda.TopKMax, make([]bool, logits), nil); err != nil {
				b.Fatal(err)
			}
			if profile {
				logProfile(b, fmt.Sprintf("prefill chunk of %d at %d", chunk, c), d.StopProfile())
			} else if s > 0 { // the first sequence warms up
				chunks = append(chunks, time.Since(c0))
			}
		}
	}
	prefill := time.Since(t0)
	sh := m.Shape()
	qd, kvd := sh.Heads*sh.HeadDim, sh.KVHeads*sh.HeadDim
	perLayer := float64(sh.Hidden*(2*qd+2*kvd) + 3*sh.Hidden*sh.Intermediate)
	flops := seqs * (2*perLayer*float64(sh.Layers)*prompt + 2*float64(sh.Vocab*sh.Hidden) +
		2*float64(sh.Layers*qd)*prompt*(prompt+1))
	// Decode: every sequence one token a step, top-64 rows back.
	pos := prompt
	full := make([]bool, seqs)
	step := func() {
		batch := make([]BatchEntry, seqs)
		for s := range batch {
			batch[s] = BatchEntry{Blocks: tables[s], Start: pos, Tokens: []int{(pos*31 + s) % 151669}, Logits: 1}
		}
		if _, _, err := gpu.ForwardTop(batch, cuda.TopKMax, full, nil); err != nil {
			b.Fatal(err)
		}
		pos++
	}
	// The first step of a shape runs its kernels one by one (then its graph
	// is captured): that one is profiled.
	if err := d.StartProfile(); err != nil {
		b.Fatal(err)
	}
	step()
	logProfile(b, "decode step of 32 at 8,192", d.StopProfile())
	for range 2 {
		step()
	}
	var steps []time.Duration
	b.ResetTimer()
	for range b.N {
		s0 := time.Now()
		step()
		steps = append(steps, time.Since(s0))
	}
	b.StopTimer()
	slices.Sort(steps)
	slices.Sort(chunks)
	med := steps[len(steps)/2]
	stepBytes := float64(m.WeightBytes()) + float64(m.KVBlockBytes(1, kernels.KVBF16))*float64(seqs*(pos-b.N/2))
	b.ReportMetric(prefill.Seconds(), "prefill-s")
	b.ReportMetric(flops/prefill.Seconds()/1e12, "prefill-TFLOP/s")
	if peak := torchBF16Peak(b); peak > 0 {
		b.ReportMetric(flops/prefill.Seconds()/peak, "prefill-of-torch-bf16-gemm")
	}
	b.ReportMetric(float64(chunks[len(chunks)/2].Microseconds())/1e3, fmt.Sprintf("chunk-%d-ms", chunk))
	b.ReportMetric(float64(med.Microseconds())/1e3, "decode-step-ms")
	b.ReportMetric(stepBytes/bw*1e3, "decode-floor-ms")
	b.ReportMetric(stepBytes/bw/med.Seconds(), "decode-of-roofline")
}

// logProfile logs a profile's kernels, the longest first, with their
// share of the summed time.
func logProfile(b *testing.B, what string, ks []cuda.KernelTime) {
	var sum time.Duration
	for _, k := range ks {
		sum += k.Total
	}
	b.Logf("%s: %d kernels, %.2f ms summed", what, len(ks), float64(sum.Microseconds())/1e3)
	for _, k := range ks {
		b.Logf("  %-40s %5d launches %9.3f ms %5.1f%%", k.Name, k.Launches, float64(k.Total.Microseconds())/1e3,
			100*k.Total.Seconds()/sum.Seconds())
	}
}

// logTimeline logs a timeline (LOWBIT_TRACE=1): for each kernel, the
// time from its release to the next one's (the step's time while it was
// the kernel being waited on: the critical path, kernel by kernel) summed
// by name, and how long before its release its first block was resident;
// then one layer's stretch of launches in order.
func logTimeline(b *testing.B, what string, spans []cuda.TraceSpan) {
	if len(spans) < 2 {
		return
	}
	type sum struct {
		n          int
		crit, lead time.Duration
	}
	by, order := map[string]*sum{}, []string{}
	crit := func(i int) time.Duration { return spans[i+1].Released - spans[i].Released }
	for i := range len(spans) - 1 {
		s := by[spans[i].Name]
		if s == nil {
			s = &sum{}
			by[spans[i].Name] = s
			order = append(order, spans[i].Name)
		}
		s.n++
		s.crit += crit(i)
		s.lead += spans[i].Released - spans[i].Reached
	}
	total := spans[len(spans)-1].Released - spans[0].Released
	b.Logf("%s: timeline of %d launches, %.3f ms from the first release to the last", what, len(spans), total.Seconds()*1e3)
	for _, name := range order {
		s := by[name]
		b.Logf("  %-32s %4d launches %8.3f ms critical (%5.1f%%), %6.2f µs each; resident %6.2f µs before release",
			name, s.n, s.crit.Seconds()*1e3, 100*s.crit.Seconds()/total.Seconds(), s.crit.Seconds()*1e6/float64(s.n),
			s.lead.Seconds()*1e6/float64(s.n))
	}
	for i := len(spans) / 2; i < min(len(spans)-1, len(spans)/2+12); i++ {
		b.Logf("  #%-4d %-32s released at %9.2f µs, critical %6.2f µs, resident %6.2f µs before", i, spans[i].Name,
			spans[i].Released.Seconds()*1e6, crit(i).Seconds()*1e6, (spans[i].Released-spans[i].Reached).Seconds()*1e6)
	}
}

// torchBF16Peak is the best bf16 TFLOP/s (as FLOP/s) of the file
// scripts/torch_gemm.py wrote, named by LOWBIT_TORCH_GEMM; 0 without it.
func torchBF16Peak(b *testing.B) float64 {
	path := os.Getenv("LOWBIT_TORCH_GEMM")
	if path == "" {
		return 0
	}
	var t struct {
		Shapes map[string]struct {
			BF16 float64 `json:"bf16_tflops"`
		} `json:"shapes"`
	}
	data, err := os.ReadFile(path)
	if err == nil {
		err = json.Unmarshal(data, &t)
	}
	if err != nil {
		b.Logf("LOWBIT_TORCH_GEMM: %v (no torch ratio)", err)
		return 0
	}
	best := 0.0
	for _, s := range t.Shapes {
		best = max(best, s.BF16)
	}
	return best * 1e12
}
