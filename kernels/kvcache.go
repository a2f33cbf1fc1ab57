package kernels

import (
	"fmt"
	"unsafe"

	"github.com/lowbit-ai/lowbit/format"
)

// KVDType is how a KV cache stores keys and values.
type KVDType int

const (
	// KVFloat32 stores float32, exactly as computed (the runtime's default
	// for a standalone Sequence, whose logits are compared with
	// transformers' float32 forward).
	KVFloat32 KVDType = iota
	// KVBF16 stores BF16, rounded to nearest even: what vLLM's "auto" KV
	// cache holds for a BF16 model.
	KVBF16
	// KVFP8 stores E4M3 codes of value/scale, rounded to nearest even and
	// saturated to ±448 (vLLM's fp8 KV cache: scaled_convert with
	// __NV_SATFINITE); a stored code c means E4M3(c)·scale, the product
	// rounded to float32.
	KVFP8
)

func (d KVDType) String() string {
	switch d {
	case KVFloat32:
		return "float32"
	case KVBF16:
		return "bf16"
	case KVFP8:
		return "fp8_e4m3"
	}
	return fmt.Sprintf("KVDType(%d)", int(d))
}

// Size returns the bytes of one stored element.
func (d KVDType) Size() int {
	switch d {
	case KVFloat32:
		return 4
	case KVBF16:
		return 2
	case KVFP8:
		return 1
	}
	return 0
}

// KVCache is one layer's paged KV cache as one sequence sees it. The pools
// K and V hold whole blocks of BlockSize positions, each position
// [KVHeads, HeadDim] elements of DType, little-endian; the sequence's
// position p lives in pool row Blocks[p/BlockSize]·BlockSize + p%BlockSize.
// A contiguous cache is the case of one block as long as the sequence.
type KVCache struct {
	DType            KVDType
	KVHeads, HeadDim int
	BlockSize        int
	K, V             []byte
	KScale, VScale   float32 // KVFP8 only
	Blocks           []int32
}

// Check reports a cache that cannot hold positions [0, n): its sizes, its
// scales, and every block of the table that lies outside the pools.
func (c *KVCache) Check(n int) error {
	es := c.DType.Size()
	switch {
	case es == 0:
		return fmt.Errorf("kernels: KV cache: unknown dtype %v", c.DType)
	case c.KVHeads <= 0 || c.HeadDim <= 0 || c.BlockSize <= 0:
		return fmt.Errorf("kernels: KV cache: kv_heads %d, head_dim %d and block size %d must be positive", c.KVHeads, c.HeadDim, c.BlockSize)
	case c.DType == KVFP8 && !(c.KScale > 0 && c.VScale > 0):
		return fmt.Errorf("kernels: fp8 KV cache: scales %g and %g must be positive", c.KScale, c.VScale)
	}
	blockBytes := c.BlockSize * c.KVHeads * c.HeadDim * es
	if len(c.K) != len(c.V) || len(c.K)%blockBytes != 0 {
		return fmt.Errorf("kernels: KV cache: pools of %d and %d bytes, want equal multiples of a block (%d bytes)", len(c.K), len(c.V), blockBytes)
	}
	pool := len(c.K) / blockBytes
	if need := (n + c.BlockSize - 1) / c.BlockSize; len(c.Blocks) < need {
		return fmt.Errorf("kernels: KV cache: %d positions need %d blocks, the table has %d", n, need, len(c.Blocks))
	}
	for i, b := range c.Blocks[:(n+c.BlockSize-1)/c.BlockSize] {
		if b < 0 || int(b) >= pool {
			return fmt.Errorf("kernels: KV cache: block %d of the table is %d, outside the pool of %d blocks", i, b, pool)
		}
	}
	return nil
}

// Offset returns the index of position p, KV head kh, element 0 in the
// pools, counted in elements.
func (c *KVCache) Offset(p, kh int) int {
	row := int(c.Blocks[p/c.BlockSize])*c.BlockSize + p%c.BlockSize
	return (row*c.KVHeads + kh) * c.HeadDim
}

// Load returns element i (counted in elements) of pool (c.K or c.V, whose
// scale is given) as float32: the definition every implementation decodes
// to.
func (c *KVCache) Load(pool []byte, scale float32, i int) float32 {
	switch c.DType {
	case KVBF16:
		return format.BF16ToFloat32(uint16(pool[2*i]) | uint16(pool[2*i+1])<<8)
	case KVFP8:
		return format.E4M3ToFloat32(pool[i]) * scale
	}
	return *(*float32)(unsafe.Pointer(&pool[4*i]))
}

// Store writes x as element i of pool: the definition every implementation
// encodes with (see KVDType).
func (c *KVCache) Store(pool []byte, scale float32, i int, x float32) {
	switch c.DType {
	case KVBF16:
		b := format.BF16FromFloat32(x)
		pool[2*i], pool[2*i+1] = byte(b), byte(b>>8)
	case KVFP8:
		pool[i] = format.E4M3FromFloat32(x / scale)
	default:
		*(*float32)(unsafe.Pointer(&pool[4*i])) = x
	}
}

// WriteKV stores k and v, [T, KVHeads, HeadDim] float32, at positions
// start..start+T-1 of c, converting to c.DType with Store. Implementations
// of Ops.WriteKV must give the same bytes.
func WriteKV(c *KVCache, k, v []float32, T, start int) {
	if err := c.Check(start + T); err != nil {
		panic(err.Error())
	}
	n := c.KVHeads * c.HeadDim
	if len(k) != T*n || len(v) != T*n {
		panic(fmt.Sprintf("kernels: WriteKV: len(k) = %d, len(v) = %d, want %d", len(k), len(v), T*n))
	}
	for t := range T {
		// One position's KVHeads rows are contiguous in the pool.
		o, src := c.Offset(start+t, 0), t*n
		switch c.DType {
		case KVFloat32:
			copy(unsafe.Slice((*float32)(unsafe.Pointer(&c.K[4*o])), n), k[src:src+n])
			copy(unsafe.Slice((*float32)(unsafe.Pointer(&c.V[4*o])), n), v[src:src+n])
		case KVBF16:
			// Store's bytes (the float32 rows assume a little-endian
			// machine too) without its per-element dispatch: a Qwen3-0.6B
			// decode step's call took 10 µs, now 7.5 (BenchmarkDecodeOps;
			// the stores' cache misses are most of the rest).
			kb := unsafe.Slice((*uint16)(unsafe.Pointer(&c.K[2*o])), n)
			vb := unsafe.Slice((*uint16)(unsafe.Pointer(&c.V[2*o])), n)
			for i, x := range k[src : src+n] {
				kb[i] = format.BF16FromFloat32(x)
			}
			for i, x := range v[src : src+n] {
				vb[i] = format.BF16FromFloat32(x)
			}
		default:
			for i := range n {
				c.Store(c.K, c.KScale, o+i, k[src+i])
				c.Store(c.V, c.VScale, o+i, v[src+i])
			}
		}
	}
}

// Gather returns positions [0, n) of c as contiguous float32 K and V,
// [n, KVHeads, HeadDim], decoded with Load: what a reference attention over
// a paged cache reads.
func Gather(c *KVCache, n int) (k, v []float32) {
	if err := c.Check(n); err != nil {
		panic(err.Error())
	}
	k, v = make([]float32, n*c.KVHeads*c.HeadDim), make([]float32, n*c.KVHeads*c.HeadDim)
	for p := range n {
		for kh := range c.KVHeads {
			o := c.Offset(p, kh)
			dst := (p*c.KVHeads + kh) * c.HeadDim
			for d := range c.HeadDim {
				k[dst+d] = c.Load(c.K, c.KScale, o+d)
				v[dst+d] = c.Load(c.V, c.VScale, o+d)
			}
		}
	}
	return k, v
}
