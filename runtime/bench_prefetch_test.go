//go:build cgo

package runtime

import (
	"slices"
	"testing"
	"time"

	"github.com/lowbit-ai/lowbit/kernels"
)

// noPrefetch hides the kernels' Prefetch method, so that a forward runs as
// it did before the runtime gave weight hints.
type noPrefetch struct{ kernels.Ops }

func (o noPrefetch) MatMuls(x []float32, T int, ys [][]float32, ws []*kernels.Weight) {
	o.Ops.(matMuls).MatMuls(x, T, ys, ws)
}

// BenchmarkDecodePrefetchAB compares decode steps with and without the
// weight hints (runtime.prefetcher) in one process, alternating step by
// step (ABBA), so that the shared VM's slow drifts hit both alike: each
// b.N step pair reports the median step of either mode, its share of the
// roofline, and the median of the per-pair ratios (with / without).
//
//	go test ./runtime -run XXX -bench 'BenchmarkDecodePrefetchAB/.*/no-mmap' -benchtime 64x
func BenchmarkDecodePrefetchAB(b *testing.B) {
	ops, bandwidth := benchBackend(b)
	if _, ok := ops.(prefetcher); !ok {
		b.Skip("the kernels take no hints")
	}
	for _, v := range benchVariants {
		for _, load := range benchLoads {
			b.Run(v.name+"/"+load.name, func(b *testing.B) {
				dir := benchCheckpoint(b, v)
				benchDecode(b, dir, load.opts, ops, bandwidth) // load and prefill, once
				st := prefilled[benchKey{dir, load.opts}]
				defer func() { st.m.ops = ops }()
				var with, without, ratio []time.Duration
				st.seq.Truncate(benchPrompt)
				tok := st.next
				b.ResetTimer()
				for i := range b.N {
					var pair [2]time.Duration
					for j := range 2 {
						hint := (i+j)%2 == 0 // ABBA: which mode goes first alternates
						st.m.ops = ops
						if !hint {
							st.m.ops = noPrefetch{ops}
						}
						if st.seq.Len() >= benchPrompt+16 {
							st.seq.Truncate(benchPrompt)
						}
						t0 := time.Now()
						logits, err := st.m.ForwardWith(st.seq, []int{tok}, ForwardOptions{LastOnly: true})
						if err != nil {
							b.Fatal(err)
						}
						tok = argmax(logits)
						d := time.Since(t0)
						if hint {
							with, pair[0] = append(with, d), d
						} else {
							without, pair[1] = append(without, d), d
						}
					}
					ratio = append(ratio, time.Duration(float64(time.Millisecond)*float64(pair[0])/float64(pair[1])))
				}
				b.StopTimer()
				med := func(s []time.Duration) time.Duration { slices.Sort(s); return s[len(s)/2] }
				perToken := float64(st.m.WeightBytes()) + float64(st.m.KVBytesPerToken())*(benchPrompt+8.5)
				roofline := bandwidth / perToken
				mw, mo := med(with), med(without)
				b.ReportMetric(float64(mw.Microseconds())/1e3, "ms-with")
				b.ReportMetric(float64(mo.Microseconds())/1e3, "ms-without")
				b.ReportMetric(1/mw.Seconds()/roofline, "of-roofline-with")
				b.ReportMetric(1/mo.Seconds()/roofline, "of-roofline-without")
				b.ReportMetric(float64(med(ratio))/float64(time.Millisecond), "ratio-with/without")
			})
		}
	}
}
