package synth

import (
	"encoding/binary"
	"io"
	"math"
	"runtime"
	"sync"

	"github.com/lowbit-ai/lowbit/format"
)

// chunkElems is how many values one generation task produces: large enough
// to amortize scheduling, small enough that the buffers in flight (a few per
// core) stay far below the 1 GB memory bound of the largest checkpoints.
const chunkElems = 1 << 20

// writeTensor streams t's values as little-endian BF16 to w. Chunks are
// generated in parallel, a batch of one per core at a time, and written in
// order: memory stays bounded by one batch, whatever the tensor's size.
func writeTensor(w io.Writer, t tensorPlan, seed uint64) error {
	total := t.numElements()
	if total == 0 {
		return nil
	}
	g := newGenerator(t, tensorSeed(seed, t.name))
	nChunks := (total + chunkElems - 1) / chunkElems
	workers := min(int64(runtime.GOMAXPROCS(0)), nChunks)
	bufs := make([][]byte, workers)
	for c0 := int64(0); c0 < nChunks; c0 += workers {
		batch := min(workers, nChunks-c0)
		var wg sync.WaitGroup
		for i := range batch {
			c := c0 + i
			lo := c * chunkElems
			n := min(chunkElems, total-lo)
			if bufs[i] == nil {
				bufs[i] = make([]byte, 2*chunkElems)
			}
			buf := bufs[i][:2*n]
			wg.Go(func() { g.fill(buf, lo, c) })
		}
		wg.Wait()
		for i := range batch {
			lo := (c0 + i) * chunkElems
			n := min(chunkElems, total-lo)
			if _, err := w.Write(bufs[i][:2*n]); err != nil {
				return err
			}
		}
	}
	return nil
}

// generator draws the values of one tensor.
type generator struct {
	t       tensorPlan
	ts      uint64
	fanIn   int64
	std     float64
	outlier map[int64]float64
}

func newGenerator(t tensorPlan, ts uint64) *generator {
	g := &generator{t: t, ts: ts, fanIn: t.shape[len(t.shape)-1]}
	switch t.init {
	case initLinear:
		g.std = 1 / math.Sqrt(float64(g.fanIn))
		g.outlier = outlierColumns(ts, g.fanIn)
	case initEmbedding:
		g.std = 0.02
	case initNorm, initNormZero:
		g.std = 0.05
	case initDtBias:
		g.std = 0.1
	case initConv:
		g.std = 1 / math.Sqrt(float64(g.fanIn))
	}
	return g
}

// fill writes the BF16 values of elements [lo, lo+len(buf)/2) into buf.
func (g *generator) fill(buf []byte, lo, chunk int64) {
	r := chunkRand(g.ts, chunk)
	n := int64(len(buf) / 2)
	row, col := lo/g.fanIn, lo%g.fanIn
	gain := 1.0
	if g.t.init == initLinear {
		gain = rowScale(g.ts, row)
	}
	for i := range n {
		var v float64
		switch g.t.init {
		case initLinear:
			v = r.NormFloat64() * g.std * gain
			if s, ok := g.outlier[col]; ok {
				v *= s
			}
		case initEmbedding, initConv, initNormZero:
			v = r.NormFloat64() * g.std
		case initNorm, initDtBias:
			v = 1 + r.NormFloat64()*g.std
		case initALog:
			v = math.Log(1 + 15*r.Float64())
		}
		binary.LittleEndian.PutUint16(buf[2*i:], format.BF16FromFloat32(float32(v)))
		if col++; col == g.fanIn {
			col = 0
			row++
			if g.t.init == initLinear {
				gain = rowScale(g.ts, row)
			}
		}
	}
}
