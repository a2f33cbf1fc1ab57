package kernels

// Ops is the set of operations the runtime computes with, implemented by
// kernels/ref (plain Go, the reference) and kernels/cpu (C). All tensors are
// row-major float32 slices in host memory; shapes are given in the doc of
// each method. Implementations must not keep the slices after returning,
// must not allocate per call on hot paths, and must give results that do
// not depend on how many tokens are processed together (batch invariance):
// row t of an output depends only on row t of the inputs.
type Ops interface {
	// Name identifies the implementation ("ref", "cpu-avx512", ...).
	Name() string

	// MatMul computes y[t,o] = Σ_i x[t,i]·w[o,i] for t < T with w's
	// numerics (see Weight and ActQuant); x is [T, w.In], y is [T, w.Out].
	// T = 1 is the decode case (GEMV).
	MatMul(y, x []float32, T int, w *Weight)

	// RMSNorm computes y[t,:] = x[t,:] / sqrt(mean(x[t,:]²) + eps) · g for
	// x, y [T, D]: g = weight, or 1 + weight when zeroCentered (Qwen3.5).
	// The mean accumulates in float32 (float64 allowed). y may alias x.
	RMSNorm(y, x, weight []float32, T, D int, eps float32, zeroCentered bool)

	// RoPE rotates, in place, the first rotaryDim dims of every head of x
	// [T, heads, headDim] for positions pos[t], NeoX style: pairs (j,
	// j+rotaryDim/2) for j < rotaryDim/2, with inv_freq[j] =
	// theta^(-2j/rotaryDim), angle = pos·inv_freq[j] computed in float64 and
	// its sin and cos rounded to float32.
	RoPE(x []float32, T, heads, headDim, rotaryDim int, pos []int32, theta float64)

	// Attention computes causal grouped-query attention for T new tokens of
	// one sequence at positions start..start+T-1. q is [T, H, Dh]; k and v
	// are the sequence's cache, [start+T, KVH, Dh], already holding the new
	// tokens; query head h reads KV head h/(H/KVH). out is [T, H, Dh]:
	// out = softmax(q·kᵀ·scale over positions ≤ its own) · v, with the
	// softmax's max and sum in float32.
	Attention(out, q, k, v []float32, T, start, H, KVH, Dh int, scale float32)

	// WriteKV stores k and v, [T, kv.KVHeads, kv.HeadDim], at positions
	// start..start+T-1 of kv, converted to kv.DType: the same bytes as
	// kernels.WriteKV.
	WriteKV(kv *KVCache, k, v []float32, T, start int)

	// PagedAttention is Attention over a paged cache: q and out are
	// [T, H, kv.HeadDim] for positions start..start+T-1, whose keys and
	// values kv already holds, and keys and values are read as
	// KVCache.Load decodes them. With a float32 cache it equals Attention
	// on the gathered cache bit for bit.
	PagedAttention(out, q []float32, kv *KVCache, T, start, H int, scale float32)

	// SiLUMul computes out[i] = silu(gate[i])·up[i] = gate/(1+exp(-gate))·up
	// for i < n. out may alias gate or up.
	SiLUMul(out, gate, up []float32, n int)

	// Add computes out[i] = a[i] + b[i] for i < n; out may alias a or b.
	Add(out, a, b []float32, n int)

	// LogSoftmax computes out[t,:] = logits[t,:] - logsumexp(logits[t,:])
	// for logits, out [T, V], with the max and the sum in float32 (float64
	// allowed). out may alias logits.
	LogSoftmax(out, logits []float32, T, V int)
}
