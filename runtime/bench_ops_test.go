//go:build cgo

package runtime

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/lowbit-ai/lowbit/kernels"
)

// BenchmarkDecodeOps times every kernel call of the decode steps of
// BenchmarkDecode's models, so that BENCHMARKS.md can say where a step's
// time goes: each op's milliseconds a step and, for the matmuls, the rate
// at which they stream their weights; "other" is the step's time outside
// the kernels (the Go side: embedding, KV writes, loops).
//
//	go test ./runtime -run XXX -bench BenchmarkDecodeOps -benchtime 16x
//
// The timer costs about 0.1 µs a call, 400 calls a step.
func BenchmarkDecodeOps(b *testing.B) {
	ops, bandwidth := benchBackend(b)
	for _, v := range benchVariants {
		for _, load := range benchLoads {
			for _, kv := range benchKVs {
				b.Run(v.name+"/"+load.name+"/"+kv.name, func(b *testing.B) {
					dir := benchCheckpoint(b, v)
					benchDecode(b, dir, load.opts, kv.dtype, ops, bandwidth) // load and prefill, once
					st := prefilled[benchKey{dir, load.opts, kv.dtype}]
					st.warmSteps(b, b.N)
					timed := &timedOps{Ops: ops, stats: map[string]*opStat{}}
					st.m.ops = timed
					defer func() { st.m.ops = ops }()
					elapsed, _ := st.timedSteps(b)
					step := elapsed / time.Duration(b.N)
					timed.report(b, step, b.N)
				})
			}
		}
	}
}

// timedOps adds up the time and bytes of every call by op and shape.
type timedOps struct {
	kernels.Ops
	stats map[string]*opStat
}

type opStat struct {
	calls int
	time  time.Duration
	bytes int64 // weight bytes read, for matmuls
}

func (o *timedOps) add(name string, t0 time.Time, bytes int64) {
	s := o.stats[name]
	if s == nil {
		s = &opStat{}
		o.stats[name] = s
	}
	s.calls++
	s.time += time.Since(t0)
	s.bytes += bytes
}

func weightBytes(w *kernels.Weight) int64 { return int64(len(w.Data)) + 4*int64(len(w.Scales)) }

func (o *timedOps) MatMul(y, x []float32, T int, w *kernels.Weight) {
	t0 := time.Now()
	o.Ops.MatMul(y, x, T, w)
	o.add(fmt.Sprintf("MatMul %dx%d", w.Out, w.In), t0, weightBytes(w))
}

func (o *timedOps) MatMuls(x []float32, T int, ys [][]float32, ws []*kernels.Weight) {
	t0 := time.Now()
	var n int64
	for _, w := range ws {
		n += weightBytes(w)
	}
	name := fmt.Sprintf("MatMuls %d x (%dx%d, ...)", len(ws), ws[0].Out, ws[0].In)
	if mm, ok := o.Ops.(matMuls); ok {
		mm.MatMuls(x, T, ys, ws)
	} else {
		name = fmt.Sprintf("MatMul %dx%d and %d more", ws[0].Out, ws[0].In, len(ws)-1)
		for i, w := range ws {
			o.Ops.MatMul(ys[i], x, T, w)
		}
	}
	o.add(name, t0, n)
}

func (o *timedOps) RMSNorm(y, x, weight []float32, T, D int, eps float32, zc bool) {
	t0 := time.Now()
	o.Ops.RMSNorm(y, x, weight, T, D, eps, zc)
	o.add("RMSNorm", t0, 0)
}

func (o *timedOps) RoPE(x []float32, T, heads, headDim, rotaryDim int, pos []int32, theta float64) {
	t0 := time.Now()
	o.Ops.RoPE(x, T, heads, headDim, rotaryDim, pos, theta)
	o.add("RoPE", t0, 0)
}

func (o *timedOps) WriteKV(kv *kernels.KVCache, k, v []float32, T, start int) {
	t0 := time.Now()
	o.Ops.WriteKV(kv, k, v, T, start)
	o.add("WriteKV", t0, 0)
}

func (o *timedOps) PagedAttention(out, q []float32, kv *kernels.KVCache, T, start, H int, scale float32) {
	t0 := time.Now()
	o.Ops.PagedAttention(out, q, kv, T, start, H, scale)
	o.add("PagedAttention", t0, 0)
}

func (o *timedOps) SiLUMul(out, gate, up []float32, n int) {
	t0 := time.Now()
	o.Ops.SiLUMul(out, gate, up, n)
	o.add("SiLUMul", t0, 0)
}

func (o *timedOps) Add(out, a, b []float32, n int) {
	t0 := time.Now()
	o.Ops.Add(out, a, b, n)
	o.add("Add", t0, 0)
}

// report logs each op's share of a step, slowest first.
func (o *timedOps) report(b *testing.B, step time.Duration, steps int) {
	names := make([]string, 0, len(o.stats))
	var inOps time.Duration
	for n, s := range o.stats {
		names = append(names, n)
		inOps += s.time
	}
	slices.SortFunc(names, func(x, y string) int { return int(o.stats[y].time - o.stats[x].time) })
	ms := func(d time.Duration) float64 { return d.Seconds() * 1e3 / float64(steps) }
	b.Logf("%d steps, %.2f ms a step", steps, ms(step*time.Duration(steps)))
	for _, n := range names {
		s := o.stats[n]
		line := fmt.Sprintf("%-34s %4d calls %7.2f ms  %6.1f µs a call", n, s.calls/steps, ms(s.time),
			s.time.Seconds()*1e6/float64(s.calls))
		if s.bytes > 0 {
			line += fmt.Sprintf("  %5.1f GB/s", float64(s.bytes)/s.time.Seconds()/1e9)
		}
		b.Logf("%s", line)
	}
	b.Logf("%-34s            %7.2f ms", "other (outside the kernels)", ms(step*time.Duration(steps)-inOps))
}
