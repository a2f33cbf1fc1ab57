//go:build cgo

package cpu

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/lowbit-ai/lowbit/kernels"
)

// BenchmarkGEMVStep runs the GEMVs of one Qwen3-0.6B decode step in the
// runtime's order and grouping (q/k/v and gate/up through MatMuls, o,
// down, then the 151936x1024 head), called from Go as the runtime calls
// them, over weights laid out layer after layer in huge-page memory (1.15
// GB in BF16), so that every step streams them from memory. Each step sits
// between two 256 MiB bandwidth probes, and the step's streaming rate is
// set against their mean: of-probe is the median of those ratios, the
// GEMVs' share of the roofline without the attention and the small ops
// that BenchmarkDecode (runtime) adds.
//
//	go test -run '^$' -bench GEMVStep -benchtime 24x ./kernels/cpu
func BenchmarkGEMVStep(b *testing.B) {
	const layers, hidden, inter, vocab = 28, 1024, 3072, 151936
	shapes := []struct{ out, in int }{{2048, hidden}, {1024, hidden}, {1024, hidden}, {hidden, 2048},
		{inter, hidden}, {inter, hidden}, {hidden, inter}}
	ops := newOps(b, "", 0)
	for _, fa := range benchFormats[:2] {
		b.Run(fmt.Sprintf("%v/%v", fa.f, fa.a), func(b *testing.B) {
			perWeight := map[kernels.WeightFormat]int{kernels.WeightBF16: 2, kernels.WeightFP8Channel: 1}[fa.f]
			total := vocab * hidden * 2 // the tied head stays BF16, as in the checkpoints
			for _, s := range shapes {
				total += layers * s.out * s.in * perWeight
			}
			arena, free := hugeBytes(b, total)
			defer free()
			// Touch every page so that the weights are real memory, not
			// the kernel's shared zero page.
			for i := 0; i < len(arena); i += 4096 {
				arena[i] = 0x11
			}
			take := func(out, in, bytes int, f kernels.WeightFormat, a kernels.ActQuant) *kernels.Weight {
				w := &kernels.Weight{Format: f, Act: a, Out: out, In: in, Data: arena[: out*in*bytes : out*in*bytes]}
				if f == kernels.WeightFP8Channel {
					w.Scales = slices.Repeat([]float32{0.01}, out)
				}
				arena = arena[out*in*bytes:]
				return w
			}
			var ws [][]*kernels.Weight
			for range layers {
				var lw []*kernels.Weight
				for _, s := range shapes {
					lw = append(lw, take(s.out, s.in, perWeight, fa.f, fa.a))
				}
				ws = append(ws, lw)
			}
			head := take(vocab, hidden, 2, kernels.WeightBF16, kernels.ActNone)
			x := make([]float32, inter)
			for i := range x {
				x[i] = float32(i%7-3) * 0.01
			}
			y := make([]float32, vocab)
			qkv := [][]float32{make([]float32, 2048), make([]float32, 1024), make([]float32, 1024)}
			gateUp := [][]float32{make([]float32, inter), make([]float32, inter)}
			step := func() {
				for _, w := range ws {
					ops.MatMuls(x[:hidden], 1, qkv, w[0:3])
					ops.MatMul(y[:hidden], x[:2048], 1, w[3])
					ops.MatMuls(x[:hidden], 1, gateUp, w[4:6])
					ops.MatMul(y[:hidden], x[:inter], 1, w[6])
				}
				ops.MatMul(y, x[:hidden], 1, head)
			}
			step() // warm up: the pool's threads, the scratch memory
			var rates, ratios []float64
			for b.Loop() {
				before := ops.MemoryBandwidth(256 << 20)
				t0 := time.Now()
				step()
				rate := float64(total) / time.Since(t0).Seconds()
				after := ops.MemoryBandwidth(256 << 20)
				rates = append(rates, rate)
				ratios = append(ratios, 2*rate/(before+after))
			}
			slices.Sort(rates)
			slices.Sort(ratios)
			b.ReportMetric(rates[len(rates)/2]/1e9, "GB/s")
			b.ReportMetric(ratios[len(ratios)/2], "of-probe")
			b.ReportMetric(float64(total)/1e6, "MB/step")
		})
	}
}
