package kernels

import (
	"bytes"
	"math"
	"math/rand/v2"
	"testing"
)

// TestWriteKVBytes: WriteKV writes, for every cache type, the bytes that
// Store writes element by element, at the positions its block table maps
// them to (shuffled blocks, a start inside a block), for values that
// exercise the conversions' edges: NaNs, infinities, signed zeros,
// subnormals, exact rounding ties and values past the formats' ranges.
func TestWriteKVBytes(t *testing.T) {
	const kvh, dh, bs, T, start = 2, 24, 4, 7, 3
	rng := rand.New(rand.NewPCG(5, 8))
	special := []float32{
		float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1)), 0, float32(math.Copysign(0, -1)),
		math.Float32frombits(1), math.Float32frombits(0x807FFFFF), 1 + 1.0/256, 1 + 3.0/256, -(1 + 1.0/256),
		3.4e38, -3.4e38, 448, 480, 1e-9, 0.0019531, 65504,
	}
	vals := func() []float32 {
		x := make([]float32, T*kvh*dh)
		for i := range x {
			if i < len(special) {
				x[i] = special[i]
				continue
			}
			x[i] = float32(rng.NormFloat64() * math.Exp2(float64(rng.IntN(40)-20)))
		}
		rng.Shuffle(len(x), func(i, j int) { x[i], x[j] = x[j], x[i] })
		return x
	}
	for _, dt := range []KVDType{KVFloat32, KVBF16, KVFP8} {
		k, v := vals(), vals()
		poolBytes := 4 * bs * kvh * dh * dt.Size()
		mk := func() *KVCache {
			return &KVCache{DType: dt, KVHeads: kvh, HeadDim: dh, BlockSize: bs, KScale: 0.37, VScale: 1.7,
				K: make([]byte, poolBytes), V: make([]byte, poolBytes), Blocks: []int32{2, 0, 3}}
		}
		got, want := mk(), mk()
		WriteKV(got, k, v, T, start)
		for tk := range T {
			for i := range kvh * dh {
				o := want.Offset(start+tk, 0) + i
				want.Store(want.K, want.KScale, o, k[tk*kvh*dh+i])
				want.Store(want.V, want.VScale, o, v[tk*kvh*dh+i])
			}
		}
		if !bytes.Equal(got.K, want.K) || !bytes.Equal(got.V, want.V) {
			t.Errorf("%v: WriteKV's bytes differ from Store's", dt)
		}
	}
}
