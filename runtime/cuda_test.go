//go:build cgo

package runtime

import (
	"errors"
	"maps"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/lowbit-ai/lowbit/checkpoint"
	"github.com/lowbit-ai/lowbit/kernels"
	"github.com/lowbit-ai/lowbit/kernels/cpu"
	"github.com/lowbit-ai/lowbit/kernels/cuda"
	"github.com/lowbit-ai/lowbit/quantize"
	"github.com/lowbit-ai/lowbit/synth"
)

// The CUDA tests run where a GPU is present (scripts/device_cuda.sh on the
// H200 machine) and skip elsewhere. The "cuda" backend runs every forward
// test (logits against transformers, batch invariance, quantized
// numerics) through the CUDA kernels with host copies (cuda.Ops); the
// executor tests run the device-resident forward.

var cudaDev struct {
	once sync.Once
	d    *cuda.Device
	err  error
}

func cudaDevice(t testing.TB) *cuda.Device {
	t.Helper()
	cudaDev.once.Do(func() { cudaDev.d, cudaDev.err = cuda.Open(cuda.Options{}) })
	if errors.Is(cudaDev.err, cuda.ErrNoDevice) {
		t.Skipf("no GPU: %v", cudaDev.err)
	}
	if cudaDev.err != nil {
		t.Fatal(cudaDev.err)
	}
	return cudaDev.d
}

func init() {
	backends = append(backends, backend{name: "cuda", ops: func(t testing.TB) kernels.Ops { return cuda.NewOps(cudaDevice(t)) }})
}

// TestCUDAExecutor: the device-resident forward gives the CPU's logits
// within float32 summation-order differences (float32 KV cache), and is
// batch invariant bit for bit on the GPU (every dtype).
func TestCUDAExecutor(t *testing.T) {
	d := cudaDevice(t)
	ops, err := cpu.New()
	if err != nil {
		t.Skip(err)
	}
	defer ops.Close()
	for _, v := range []struct {
		name   string
		scheme quantize.Scheme
	}{{"bf16", 0}, {"fp8-dynamic", quantize.FP8Dynamic}, {"nvfp4a16", quantize.NVFP4A16}} {
		t.Run(v.name, func(t *testing.T) {
			dir := tinyModel(t, checkpoint.Qwen3)
			if v.scheme != 0 {
				q := t.TempDir()
				quantizeTo(t, dir, q, quantize.Options{Scheme: v.scheme, Format: quantize.CompressedTensors}, "")
				dir = q
			}
			m := loadModel(t, dir, ops)
			rng := rand.New(rand.NewPCG(1, 2))
			seqs := make([][]int, 3)
			for i, n := range []int{12, 7, 20} {
				for range n {
					seqs[i] = append(seqs[i], rng.IntN(151000))
				}
			}
			V := m.VocabSize()
			for _, dt := range []kernels.KVDType{kernels.KVFloat32, kernels.KVBF16, kernels.KVFP8} {
				gpu, err := NewCUDAExecutor(m, d, 32, 4, dt)
				if err != nil {
					t.Fatal(err)
				}
				together := executorCase(t, gpu, seqs, V)
				for i, s := range seqs {
					alone, err := gpu.Forward([]BatchEntry{{Blocks: []int32{20, 21, 22, 23, 24, 25, 26, 27}, Tokens: s, Logits: len(s)}})
					if err != nil {
						t.Fatal(err)
					}
					if !sameBits(alone, together[i]) {
						t.Errorf("%v: sequence %d: GPU logits alone differ from batched (max |Δ| %.3g)", dt, i, maxDiff(alone, together[i]))
					}
				}
				gpu.Close()
				// Against the CPU: a float32 cache, and an FP8 one (the GPU
				// applies its scales to the sums, the CPU to each element).
				if dt == kernels.KVBF16 {
					continue
				}
				pool, err := m.NewKVPool(32, 4, dt)
				if err != nil {
					t.Fatal(err)
				}
				cpuOut := executorCase(t, pool, seqs, V)
				for i := range seqs {
					var scale float64
					for _, x := range cpuOut[i] {
						scale = max(scale, math.Abs(float64(x)))
					}
					diff := maxDiff(cpuOut[i], together[i])
					t.Logf("%v: sequence %d: max |Δ logit| GPU vs CPU %.3g (logits up to %.3g)", dt, i, diff, scale)
					if diff > 1e-4*max(scale, 1) {
						t.Errorf("%v: sequence %d: GPU logits differ from the CPU's by %.3g, want <= %.3g", dt, i, diff, 1e-4*max(scale, 1))
					}
				}
			}
		})
	}
}

// benchActivations is the CUDA benchmarks' executor option:
// WithPrefillBF16, or WithBF16Activations with LOWBIT_ACTIVATIONS=bf16.
func benchActivations(b *testing.B) CUDAOption {
	if os.Getenv("LOWBIT_ACTIVATIONS") == "bf16" {
		b.Log("every row on BF16 activations (WithBF16Activations)")
		return WithBF16Activations()
	}
	return WithPrefillBF16()
}

// BenchmarkCUDADecode: batch-1 greedy decode of the Qwen3-0.6B shape
// (BF16) on the device-resident forward, beside the roofline: the bytes
// one step reads (weights and KV cache) over the copy bandwidth measured
// in the same run, the higher of its measurements before and after; and
// the device's time a step (gpu-ms/step) beside the wall time.
//
//	kernels/cuda... runtime.test -test.run XXX -test.bench CUDADecode -test.benchtime 64x
func BenchmarkCUDADecode(b *testing.B) {
	d, bw, m := cudaBenchModel(b, "qwen3-0.6b")
	const bs, prompt, long = 16, 256, 1024
	// WithPrefillBF16 only changes rows marked as prompt rows: the decode
	// steps and the float32 TTFT below mark none.
	gpu, err := NewCUDAExecutor(m, d, long/bs, bs, kernels.KVBF16, benchActivations(b))
	if err != nil {
		b.Fatal(err)
	}
	defer gpu.Close()
	// What NVRTC made of the decode step's GEMV and attention kernels:
	// a spill would show here before it shows in the timing.
	for _, name := range []string{"lb_mma_gemv_bulk1", "lb_mma_gemv_bulk1_rms", "lb_mma_gemv_bulk1_silu", "lb_flash_decode_d128_q1"} {
		if ki, err := d.KernelInfo(name); err == nil {
			b.Logf("  %-24s %3d registers, %4d bytes local (spills)", name, ki.Registers, ki.LocalBytes)
		}
	}
	blocks := make([]int32, long/bs)
	for i := range blocks {
		blocks[i] = int32(i)
	}
	toks := make([]int, long)
	for i := range toks {
		toks[i] = (i*7919 + 13) % 151669
	}
	// Time to first token of a 1,024-token prompt: the median of 3 after a
	// warm-up, one forward returning the last position's logits; float32
	// activations, then BF16 on the prompt rows' linear layers.
	timeTTFT := func(promptRows int) time.Duration {
		var ttfts []time.Duration
		for i := range 4 {
			t0 := time.Now()
			if _, err := gpu.Forward([]BatchEntry{{Blocks: blocks, Tokens: toks, Logits: 1, Prompt: promptRows}}); err != nil {
				b.Fatal(err)
			}
			if i > 0 {
				ttfts = append(ttfts, time.Since(t0))
			}
		}
		slices.Sort(ttfts)
		return ttfts[1]
	}
	ttft, ttftBF16 := timeTTFT(0), timeTTFT(long)
	logits, err := gpu.Forward([]BatchEntry{{Blocks: blocks, Tokens: toks[:prompt], Logits: 1}})
	if err != nil {
		b.Fatal(err)
	}
	tok := argmax(logits)
	pos := prompt
	// A step as lowbit serve's greedy decoding runs it: the row's best
	// token found on the device (ForwardTop with k = 1, TopOnDevice), not
	// the whole row copied back and searched here.
	notWhole := []bool{false}
	step := func() {
		_, tops, err := gpu.ForwardTop([]BatchEntry{{Blocks: blocks, Start: pos, Tokens: []int{tok}, Logits: 1}}, 1, notWhole, nil)
		if err != nil {
			b.Fatal(err)
		}
		tok = int(tops[0].IDs[0])
		pos++
		if pos >= 64*bs-1 {
			pos = prompt
		}
	}
	// The first decode step runs its kernels one by one (its graph is
	// captured after): each kernel's time, against the step's floor.
	if err := d.StartProfile(); err != nil {
		b.Fatal(err)
	}
	step()
	logProfile(b, "batch-1 decode step at 256", d.StopProfile())
	for range 3 {
		step()
	}
	b.ResetTimer()
	t0 := time.Now()
	for range b.N {
		step()
	}
	el := time.Since(t0)
	b.StopTimer()
	// The copy rate again, with the model resident: the roofline takes the
	// higher of the two, so that a slow first measurement cannot flatter
	// the ratio (the Qwen3-8B processes have measured 3.8 TB/s before the
	// model loads, the 0.6B ones 4.2).
	bwAfter, err := d.CopyBandwidth(2<<30, 10)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(bwAfter/1e9, "copy-after-GB/s")
	bw = max(bw, bwAfter)
	perToken := float64(m.WeightBytes()) + float64(m.KVBlockBytes(1, kernels.KVBF16))*float64(prompt+32)
	b.ReportMetric(float64(b.N)/el.Seconds(), "tok/s")
	b.ReportMetric(bw/perToken, "roofline-tok/s")
	b.ReportMetric(float64(b.N)/el.Seconds()/(bw/perToken), "of-roofline")
	// The device's share of a step: 16 more steps with the graph replay and
	// every launch after it (the best-token reduction) timed by events; the
	// rest of a step is the host's work (the batch's upload, launches, the
	// copy back).
	const profiled = 16
	if err := d.StartProfile(); err != nil {
		b.Fatal(err)
	}
	for range profiled {
		step()
	}
	var graph, all time.Duration
	for _, kt := range d.StopProfile() {
		all += kt.Total
		if kt.Name == cuda.GraphReplay {
			graph += kt.Total
		}
	}
	// With LOWBIT_TRACE=1, one more step's timeline: which kernels the
	// step waits on, and for how long.
	if os.Getenv("LOWBIT_TRACE") == "1" {
		if err := d.TraceStart(); err != nil {
			b.Fatal(err)
		}
		step()
		spans, err := d.TraceStop()
		if err != nil {
			b.Fatal(err)
		}
		logTimeline(b, "batch-1 decode step", spans)
	}
	devStep := all.Seconds() / profiled
	b.ReportMetric(graph.Seconds()/profiled*1e3, "graph-ms/step")
	b.ReportMetric(devStep*1e3, "gpu-ms/step")
	b.ReportMetric(perToken/bw/devStep, "gpu-of-roofline")
	b.ReportMetric(bw/1e9, "copy-GB/s")
	b.ReportMetric(float64(ttft.Microseconds())/1e3, "ttft-1024-ms")
	b.ReportMetric(long/ttft.Seconds(), "prefill-tok/s")
	// 2 FLOPs a layer weight a token, the lm_head for the last token, and
	// causal attention's QKᵀ and PV (2·2·H·Dh a position pair, half of them).
	sh := m.Shape()
	qd, kvd := sh.Heads*sh.HeadDim, sh.KVHeads*sh.HeadDim
	perLayer := float64(sh.Hidden*(2*qd+2*kvd) + 3*sh.Hidden*sh.Intermediate)
	flops := 2*perLayer*float64(sh.Layers)*long + 2*float64(sh.Vocab*sh.Hidden) +
		2*float64(sh.Layers*qd)*long*(long+1)
	b.ReportMetric(flops/ttft.Seconds()/1e12, "prefill-TFLOP/s")
	b.ReportMetric(float64(ttftBF16.Microseconds())/1e3, "ttft-1024-bf16-ms")
	b.ReportMetric(flops/ttftBF16.Seconds()/1e12, "prefill-bf16-TFLOP/s")
}

// cudaBenchModel opens the device, measures its copy bandwidth and loads
// the synthetic model of LOWBIT_BENCH_SIZE (size when unset) on the CPU
// kernels (closed when the benchmark ends), for the CUDA executor to
// upload.
func cudaBenchModel(b *testing.B, size string) (*cuda.Device, float64, *Model) {
	d := cudaDevice(b)
	bw, err := d.CopyBandwidth(2<<30, 10)
	if err != nil {
		b.Fatal(err)
	}
	ops, err := cpu.New()
	if err != nil {
		b.Skip(err)
	}
	b.Cleanup(func() { ops.Close() })
	if s := os.Getenv("LOWBIT_BENCH_SIZE"); s != "" {
		size = s
	}
	m, err := Load(benchModel(b, size), ops)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { m.Close() })
	return d, bw, m
}

// benchModel returns a synthetic BF16 Qwen3 checkpoint of the given size,
// written on first use under the temporary directory.
func benchModel(b *testing.B, size string) string {
	benchMu.Lock()
	defer benchMu.Unlock()
	dir := filepath.Join(os.TempDir(), "lowbit-bench-"+size, "bf16")
	if _, err := checkpoint.ReadInventory(dir); err == nil {
		return dir
	}
	os.RemoveAll(dir)
	t0 := time.Now()
	if _, err := synth.Write(dir, synth.Options{Arch: checkpoint.Qwen3, Size: size, Seed: 1}); err != nil {
		b.Fatal(err)
	}
	b.Logf("wrote %s in %v", dir, time.Since(t0).Round(time.Millisecond))
	return dir
}

// tinyCUDAExecutor returns a device-resident executor of the tiny Qwen3
// checkpoint (64 BF16 blocks of 16 positions) and its model, both closed
// when the test ends.
func tinyCUDAExecutor(t *testing.T) (*CUDAExecutor, *Model) {
	d := cudaDevice(t)
	ops, err := cpu.New()
	if err != nil {
		t.Skip(err)
	}
	t.Cleanup(func() { ops.Close() })
	m := loadModel(t, tinyModel(t, checkpoint.Qwen3), ops)
	gpu, err := NewCUDAExecutor(m, d, 64, 16, kernels.KVBF16)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { gpu.Close() })
	return gpu, m
}

// TestCUDAGraphReplay: a decode batch runs eagerly the first time and from
// its captured graph after that, with the same bits; other shapes keep
// running eagerly beside it.
func TestCUDAGraphReplay(t *testing.T) {
	gpu, _ := tinyCUDAExecutor(t)
	a, b := []int32{3, 9}, []int32{5}
	if _, err := gpu.Forward([]BatchEntry{{Blocks: a, Tokens: []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17}}, {Blocks: b, Tokens: []int{7, 8, 9}}}); err != nil {
		t.Fatal(err)
	}
	step := []BatchEntry{{Blocks: a, Start: 17, Tokens: []int{42}, Logits: 1}, {Blocks: b, Start: 3, Tokens: []int{43}, Logits: 1}}
	eager, err := gpu.Forward(step)
	if err != nil {
		t.Fatal(err)
	}
	if len(gpu.graphs) != 1 {
		t.Fatalf("%d graphs captured after a decode step, want 1", len(gpu.graphs))
	}
	for i := range 3 {
		replay, err := gpu.Forward(step)
		if err != nil {
			t.Fatal(err)
		}
		if !sameBits(eager, replay) {
			t.Fatalf("replay %d differs from the eager run (max |Δ| %.3g)", i, maxDiff(eager, replay))
		}
	}
	// A prefill in between grows nothing here, and the graph stays valid.
	if _, err := gpu.Forward([]BatchEntry{{Blocks: []int32{20}, Tokens: []int{1, 2}, Logits: 2}}); err != nil {
		t.Fatal(err)
	}
	replay, err := gpu.Forward(step)
	if err != nil || !sameBits(eager, replay) {
		t.Fatalf("replay after a prefill: err %v, same %v", err, sameBits(eager, replay))
	}
}

// TestCUDAForwardTopGraph: ForwardTop's best entries, reduced on the device
// inside the decode step's graph (cuda.TopKInto captured with the step),
// are those of the whole logits rows that Forward returns for the same
// batch, on the eager run that captures the graph and on its replays;
// rows marked whole come back whole, bit for bit.
func TestCUDAForwardTopGraph(t *testing.T) {
	gpu, m := tinyCUDAExecutor(t)
	a, b, c := []int32{3, 9}, []int32{5}, []int32{11}
	if _, err := gpu.Forward([]BatchEntry{{Blocks: a, Tokens: []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17}},
		{Blocks: b, Tokens: []int{7, 8, 9}}, {Blocks: c, Tokens: []int{4, 4}}}); err != nil {
		t.Fatal(err)
	}
	// Each run writes its step's positions with other tokens than the run
	// before (so that a reduction left over from an earlier run, or from
	// the eager run, cannot pass) and compares against Forward of the same
	// step just before: both write the same cache rows.
	V := m.d.vocab
	full := []bool{false, true, false}
	for _, k := range []int{1, 5, cuda.TopKMax} {
		for run := range 3 { // the eager run that captures, then replays
			tok := 40 + 3*run + k%7
			step := []BatchEntry{{Blocks: a, Start: 17, Tokens: []int{tok}, Logits: 1}, {Blocks: b, Start: 3, Tokens: []int{tok + 1}, Logits: 1},
				{Blocks: c, Start: 2, Tokens: []int{tok + 2}, Logits: 1}}
			want, err := gpu.Forward(step)
			if err != nil {
				t.Fatal(err)
			}
			lp := logSoftmax(want, V)
			rows, tops, err := gpu.ForwardTop(step, k, full, nil)
			if err != nil {
				t.Fatal(err)
			}
			if !sameBits(rows, want[V:2*V]) {
				t.Fatalf("k %d run %d: the whole row differs from Forward's (max |Δ| %.3g)", k, run, maxDiff(rows, want[V:2*V]))
			}
			for r, f := range full {
				if f {
					continue
				}
				ref := TopLogitsOf(want[r*V:(r+1)*V], lp[r*V:(r+1)*V], k)
				got := tops[r]
				if !slices.Equal(got.IDs, ref.IDs) || !sameBits(got.Logits, ref.Logits) || got.Ties != ref.Ties {
					t.Fatalf("k %d run %d row %d: ids %v logits %v ties %d, want %v %v %d", k, run, r, got.IDs, got.Logits, got.Ties,
						ref.IDs, ref.Logits, ref.Ties)
				}
				// The device's log-sum-exp sums by chunks (topk.cu): within
				// float32 rounding of the host's.
				if dd := maxDiff(got.Logprobs, ref.Logprobs); dd > 1e-5 {
					t.Fatalf("k %d run %d row %d: logprobs differ by %.3g", k, run, r, dd)
				}
			}
		}
		if !slices.ContainsFunc(slices.Collect(maps.Keys(gpu.graphs)), func(g graphKey) bool { return g.tokens == 3 && g.top == k }) {
			t.Fatalf("k %d: no graph captured with the top-k reduction (graphs %v)", k, slices.Collect(maps.Keys(gpu.graphs)))
		}
	}
}

// TestCUDADescPack: the batch description's layout on the host is the
// spans descSpans gives the kernels (ids, pos, seq, partOff, work, rowsIdx,
// tables at fixed offsets of t, rows and tables), and pack uploads up to
// the last table entry. Runs without a GPU.
func TestCUDADescPack(t *testing.T) {
	a := cudaActs{t: 3, rows: 2, tables: 4}
	got := a.pack([]int32{1, 2, 3}, []int32{4, 5, 6}, []int32{7, 8, 9}, []int32{10, 11, 12}, []int32{13, 14, 15, 16},
		[]int32{17, 18}, []int32{19, 20, 21})
	want := []int32{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 0, 0, 17, 18, 19, 20, 21}
	if !slices.Equal(got, want) {
		t.Fatalf("pack = %v, want %v", got, want)
	}
	if a.descLen() != 6*3+2+4 || len(a.descHost) != a.descLen() {
		t.Fatalf("descLen %d, host %d", a.descLen(), len(a.descHost))
	}
	// A smaller batch later reuses the host slice; what it does not cover
	// keeps the old values, which no kernel reads.
	got = a.pack([]int32{9}, []int32{8}, []int32{7}, []int32{6}, []int32{5, 4}, []int32{3}, []int32{2})
	if got[0] != 9 || got[3] != 8 || got[6] != 7 || got[9] != 6 || got[12] != 5 || got[13] != 4 || got[18] != 3 || got[20] != 2 || len(got) != 21 {
		t.Fatalf("second pack = %v", got)
	}
}
