//go:build !cgo

package cpu

import "github.com/lowbit-ai/lowbit/kernels"

// Ops is the C implementation of [kernels.Ops]; this binary was built
// without cgo, so none can be created.
type Ops struct{}

var _ kernels.Ops = (*Ops)(nil)

// ISAs returns nil: without cgo there is no code path.
func ISAs() []string { return nil }

// New returns [kernels.ErrNoCgo].
func New() (*Ops, error) { return nil, kernels.ErrNoCgo }

// NewWithOptions returns [kernels.ErrNoCgo].
func NewWithOptions(Options) (*Ops, error) { return nil, kernels.ErrNoCgo }

const noCgo = "cpu: built without cgo"

func (o *Ops) Close()                                          {}
func (o *Ops) Name() string                                    { return "cpu-nocgo" }
func (o *Ops) Threads() int                                    { return 0 }
func (o *Ops) MemoryBandwidth(bytes int64) float64             { panic(noCgo) }
func (o *Ops) MatMul(y, x []float32, T int, w *kernels.Weight) { panic(noCgo) }
func (o *Ops) MatMuls(x []float32, T int, ys [][]float32, ws []*kernels.Weight) {
	panic(noCgo)
}
func (o *Ops) RMSNorm(y, x, weight []float32, T, D int, eps float32, zeroCentered bool) {
	panic(noCgo)
}
func (o *Ops) RoPE(x []float32, T, heads, headDim, rotaryDim int, pos []int32, theta float64) {
	panic(noCgo)
}
func (o *Ops) Attention(out, q, k, v []float32, T, start, H, KVH, Dh int, scale float32) {
	panic(noCgo)
}
func (o *Ops) SiLUMul(out, gate, up []float32, n int)     { panic(noCgo) }
func (o *Ops) Add(out, a, b []float32, n int)             { panic(noCgo) }
func (o *Ops) LogSoftmax(out, logits []float32, T, V int) { panic(noCgo) }

func (o *Ops) WriteKV(kv *kernels.KVCache, k, v []float32, T, start int) { panic(noCgo) }

func (o *Ops) PagedAttention(out, q []float32, kv *kernels.KVCache, T, start, H int, scale float32) {
	panic(noCgo)
}
