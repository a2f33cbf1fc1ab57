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

var _ Executor = (*KVPool)(nil)

// Forward runs ForwardBatch of the pool's model on the pool.
func (p *KVPool) Forward(batch []BatchEntry) ([]float32, error) {
	return p.m.ForwardBatch(p, batch, nil)
}

// Close does nothing: the pool is Go memory.
func (p *KVPool) Close() error { return nil }
