package runtime

import (
	"fmt"

	"github.com/lowbit-ai/lowbit/kernels"
)

// KVPool is a paged KV cache for every layer of one Model: per layer, a K
// and a V pool of Blocks() blocks of BlockSize() positions in DType(). It
// holds storage only; which sequence owns which block is the caller's
// business (package engine allocates, shares and frees blocks). A KVPool and
// the forwards that use it are not safe for concurrent use.
type KVPool struct {
	m         *Model
	dtype     kernels.KVDType
	blockSize int
	blocks    int
	k, v      [][]byte
	kScale    []float32 // per layer; 1 unless the dtype is FP8
	vScale    []float32
	buf       scratch
}

// KVBlockBytes returns the bytes one block of blockSize positions takes in
// dtype, all layers, K and V.
func (m *Model) KVBlockBytes(blockSize int, dtype kernels.KVDType) int64 {
	return int64(m.d.layers) * 2 * int64(blockSize) * int64(m.d.kvHeads*m.d.headDim) * int64(dtype.Size())
}

// NewKVPool allocates a pool of blocks blocks of blockSize positions. For
// kernels.KVFP8 the scales are the checkpoint's k_scale and v_scale where
// it declares an FP8 KV cache, and 1 otherwise (vLLM's default too).
func (m *Model) NewKVPool(blocks, blockSize int, dtype kernels.KVDType) (*KVPool, error) {
	if blocks <= 0 || blockSize <= 0 {
		return nil, fmt.Errorf("runtime: KV pool of %d blocks of %d positions: both must be positive", blocks, blockSize)
	}
	if dtype.Size() == 0 {
		return nil, fmt.Errorf("runtime: KV pool: unknown dtype %v", dtype)
	}
	p := &KVPool{m: m, dtype: dtype, blockSize: blockSize, blocks: blocks,
		k: make([][]byte, m.d.layers), v: make([][]byte, m.d.layers),
		kScale: make([]float32, m.d.layers), vScale: make([]float32, m.d.layers)}
	size := int64(blocks) * int64(blockSize) * int64(m.d.kvHeads*m.d.headDim) * int64(dtype.Size())
	for i := range p.k {
		p.k[i], p.v[i] = make([]byte, size), make([]byte, size)
		p.kScale[i], p.vScale[i] = 1, 1
		if ly := &m.layers[i]; dtype == kernels.KVFP8 && ly.kScale > 0 && ly.vScale > 0 {
			p.kScale[i], p.vScale[i] = ly.kScale, ly.vScale
		}
	}
	return p, nil
}

// Blocks returns the number of blocks.
func (p *KVPool) Blocks() int { return p.blocks }

// BlockSize returns the positions per block.
func (p *KVPool) BlockSize() int { return p.blockSize }

// DType returns the element type.
func (p *KVPool) DType() kernels.KVDType { return p.dtype }

// Scales returns layer i's K and V scales (1 unless FP8).
func (p *KVPool) Scales(i int) (k, v float32) { return p.kScale[i], p.vScale[i] }

// cache returns layer i's cache as the sequence with block table blocks
// sees it.
func (p *KVPool) cache(i int, blocks []int32) *kernels.KVCache {
	d := p.m.d
	return &kernels.KVCache{DType: p.dtype, KVHeads: d.kvHeads, HeadDim: d.headDim, BlockSize: p.blockSize,
		K: p.k[i], V: p.v[i], KScale: p.kScale[i], VScale: p.vScale[i], Blocks: blocks}
}
