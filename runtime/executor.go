package runtime

import "github.com/lowbit-ai/lowbit/kernels"

// Executor runs batched forwards of one Model over a paged KV cache that it
// owns: a KVPool on the CPU, a CUDAExecutor on a GPU. The engine schedules
// over either.
type Executor interface {
	// Forward is Model.ForwardBatch on the executor's cache: the logits
	// rows the entries ask for, on the host.
	Forward(batch []BatchEntry) ([]float32, error)
	Blocks() int
	BlockSize() int
	DType() kernels.KVDType
	// Close frees what the executor holds (device memory); a KVPool has
	// nothing to free.
	Close() error
}

// BufferedExecutor is an Executor that can write the logits rows into a
// buffer its caller keeps from step to step (dst, when its capacity
// suffices; else a new slice), so that a step does not allocate and clear
// rows × vocab floats (9.7 MB for 16 rows of Qwen3's vocabulary) only to
// overwrite them. KVPool and CUDAExecutor are.
type BufferedExecutor interface {
	Executor
	ForwardInto(batch []BatchEntry, dst []float32) ([]float32, error)
}

var (
	_ BufferedExecutor = (*KVPool)(nil)
	_ BufferedExecutor = (*CUDAExecutor)(nil)
	_ TopExecutor      = (*CUDAExecutor)(nil)
)

// Forward runs ForwardBatch of the pool's model on the pool.
func (p *KVPool) Forward(batch []BatchEntry) ([]float32, error) {
	return p.m.ForwardBatch(p, batch, nil)
}

// ForwardInto is Forward writing the logits into dst when it can hold them.
func (p *KVPool) ForwardInto(batch []BatchEntry, dst []float32) ([]float32, error) {
	return p.m.forwardBatch(p, batch, nil, nil, dst)
}

// logitsBuffer returns dst[:n] when dst can hold n floats, else a new
// slice (the values are about to be overwritten either way).
func logitsBuffer(dst []float32, n int) []float32 {
	if cap(dst) >= n {
		return dst[:n]
	}
	return make([]float32, n)
}

// Close does nothing: the pool is Go memory.
func (p *KVPool) Close() error { return nil }
