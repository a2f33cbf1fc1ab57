package engine

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/lowbit-ai/lowbit/kernels"
	"github.com/lowbit-ai/lowbit/kernels/ref"
	"github.com/lowbit-ai/lowbit/runtime"
)

// instantExecutor stands in for a GPU: its forward costs only what a real
// executor's host side costs (a fresh logits slice filled from memory, as
// the device-to-host copy fills it), so the engine's own work per step is
// what a benchmark over it measures.
type instantExecutor struct {
	blocks, blockSize int
	row               []float32
}

func (x *instantExecutor) Forward(batch []runtime.BatchEntry) ([]float32, error) {
	return x.fill(batch, nil), nil
}

func (x *instantExecutor) fill(batch []runtime.BatchEntry, dst []float32) []float32 {
	rows := 0
	for _, b := range batch {
		rows += b.Logits
	}
	out := dst[:0]
	if cap(dst) < rows*len(x.row) {
		out = make([]float32, rows*len(x.row))
	}
	out = out[:rows*len(x.row)]
	for r := range rows {
		copy(out[r*len(x.row):], x.row)
	}
	return out
}
func (x *instantExecutor) Blocks() int            { return x.blocks }
func (x *instantExecutor) BlockSize() int         { return x.blockSize }
func (x *instantExecutor) DType() kernels.KVDType { return kernels.KVBF16 }
func (x *instantExecutor) Close() error           { return nil }

// bufferedInstant is instantExecutor as a runtime.BufferedExecutor: the
// rows go into the engine's buffer.
type bufferedInstant struct{ *instantExecutor }

func (x bufferedInstant) ForwardInto(batch []runtime.BatchEntry, dst []float32) ([]float32, error) {
	return x.fill(batch, dst), nil
}

// topInstant is instantExecutor as a runtime.TopExecutor, as the CUDA
// executor serves by default: rows the engine marks whole come back whole,
// the others as the fixed row's TopLogits (what the GPU's top-k copies
// back).
type topInstant struct {
	*instantExecutor
	top runtime.TopLogits
}

func (x topInstant) TopMax() int { return len(x.top.IDs) }

func (x topInstant) ForwardTop(batch []runtime.BatchEntry, k int, full []bool, dst []float32) ([]float32, []runtime.TopLogits, error) {
	whole := 0
	for _, f := range full {
		if f {
			whole++
		}
	}
	rows := x.fill([]runtime.BatchEntry{{Logits: whole}}, dst)
	tops := make([]runtime.TopLogits, len(full))
	for r, f := range full {
		if !f {
			t := x.top
			tops[r] = runtime.TopLogits{IDs: t.IDs[:k], Logits: t.Logits[:k], Logprobs: t.Logprobs[:k], Ties: t.Ties}
		}
	}
	return rows, tops, nil
}

// BenchmarkEngineStep measures the engine's host work per decode step —
// scheduling, block bookkeeping, sampling (Qwen3's defaults: temperature
// 0.6, top-k 20, top-p 0.95) over 151,936 logits a row, delivery — for 16
// requests decoding together, over an executor that costs nothing on the
// device: fresh logits rows a step (fresh), rows written into the
// engine's buffer (buffered, as KVPool does), and each row's best 64
// entries only (top-64, as CUDAExecutor serves by default). Beside them,
// the cost of the fresh logits alone (allocating and filling the rows) in
// the same run.
//
//	go test ./runtime/engine -run XXX -bench EngineStep
func BenchmarkEngineStep(b *testing.B) {
	m := tinyModel(b)
	V := m.VocabSize()
	rng := rand.New(rand.NewPCG(1, 2))
	row := make([]float32, V)
	for i := range row {
		row[i] = float32(rng.NormFloat64() * 3)
	}
	const seqs, prompt, gen = 16, 64, 64
	exec := &instantExecutor{blocks: 4096, blockSize: 16, row: row}
	for _, v := range []struct {
		name string
		exec runtime.Executor
	}{{"fresh", exec}, {"buffered", bufferedInstant{exec}}, {"top-64", topInstant{exec, topOf(row, 64)}}} {
		b.Run(v.name, func(b *testing.B) {
			e := newEngine(b, m, Config{MaxNumSeqs: seqs, MaxModelLen: 512,
				NewExecutor: func(blocks, bs int, dtype kernels.KVDType) (runtime.Executor, error) { return v.exec, nil }})
			defer e.Close()
			sampling := runtime.SamplingOptions{Temperature: 0.6, TopK: 20, TopP: 0.95}
			var tokens int64
			b.ResetTimer()
			start := time.Now()
			for range b.N {
				outs := make([]<-chan Output, seqs)
				for i := range seqs {
					p := make([]int, prompt)
					for j := range p {
						p[j] = (i*131 + j*7) % 151000
					}
					ch, err := e.Submit(context.Background(), &Request{Prompt: p, MaxTokens: gen, Sampling: sampling, PromptLogprobs: -1, Logprobs: -1})
					if err != nil {
						b.Fatal(err)
					}
					outs[i] = ch
				}
				for _, ch := range outs {
					for o := range ch {
						if o.Err != nil {
							b.Fatal(o.Err)
						}
						tokens += int64(len(o.Tokens))
					}
				}
			}
			el := time.Since(start)
			b.StopTimer()
			b.ReportMetric(float64(el.Microseconds())/float64(e.Stats().Steps), "us/step")
			b.ReportMetric(float64(tokens)/el.Seconds(), "tok/s")
		})
	}
	// The logits alone: a decode step's rows allocated and filled.
	batch := make([]runtime.BatchEntry, seqs)
	for i := range batch {
		batch[i].Logits = 1
	}
	b.Run("fresh-logits-only", func(b *testing.B) {
		for range b.N {
			exec.Forward(batch)
		}
	})
}

// topOf is row's TopLogits of k entries, its log-softmax from the
// reference kernels (float64).
func topOf(row []float32, k int) runtime.TopLogits {
	lp := make([]float32, len(row))
	ref.Ops{}.LogSoftmax(lp, row, 1, len(row))
	return runtime.TopLogitsOf(row, lp, k)
}
