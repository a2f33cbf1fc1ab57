package synth

import (
	"hash/fnv"
	"math"
	"math/rand/v2"
)

// Every value is a pure function of (seed, tensor name, position), so a
// tensor's bytes do not depend on which other tensors exist, on the order of
// writing, or on how many goroutines generate it.

// tensorSeed mixes the model seed with the tensor's name.
func tensorSeed(seed uint64, name string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(name))
	return splitmix64(seed ^ h.Sum64())
}

// splitmix64 is a strong 64-bit mixer (Steele, Lea and Flood 2014); it turns
// structured inputs such as (seed, index) into independent-looking words.
func splitmix64(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// chunkRand returns the generator for one chunk of a tensor.
func chunkRand(ts uint64, chunk int64) *rand.Rand {
	return rand.New(rand.NewPCG(ts, splitmix64(uint64(chunk)^0x5eed)))
}

// unitFloat maps a hashed word to a uniform float64 in [0, 1).
func unitFloat(x uint64) float64 { return float64(x>>11) / (1 << 53) }

// rowScale gives each output row of a linear weight its own gain, log-normal
// around 1 (sigma 0.25), as trained weights have: per-channel scales then
// differ from a per-tensor scale, which is what per-channel quantization is
// for.
func rowScale(ts uint64, row int64) float64 {
	u1 := unitFloat(splitmix64(ts ^ uint64(row)*0x2545f4914f6cdd1d))
	u2 := unitFloat(splitmix64(ts + uint64(row)*0x9e3779b97f4a7c15 + 1))
	n := math.Sqrt(-2*math.Log(1-u1)) * math.Cos(2*math.Pi*u2) // Box-Muller
	return math.Exp(0.25 * n)
}

// outlierColumns picks the heavy input channels of a linear weight: one in
// every 256 (at least one), each scaled by a gain between 8 and 24. Large
// trained models show a few such channels; they dominate block absmax values
// and make round-to-nearest quantization visibly worse than clipped or
// GPTQ-rounded quantization, as in real checkpoints.
func outlierColumns(ts uint64, fanIn int64) map[int64]float64 {
	n := max(1, fanIn/256)
	cols := make(map[int64]float64, n)
	for i := int64(0); int64(len(cols)) < n; i++ {
		h := splitmix64(ts ^ 0x0c0ffee ^ uint64(i)*0xd1b54a32d192ed03)
		col := int64(h % uint64(fanIn))
		if _, dup := cols[col]; !dup {
			cols[col] = 8 + 16*unitFloat(splitmix64(h))
		}
	}
	return cols
}
