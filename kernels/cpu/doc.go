// Package cpu implements [kernels.Ops] in C through cgo: the CPU backend of
// lowbit's inference runtime.
//
// Every op is one C file (matmul.c with matmul_bf16.c, matmul_fp8.c and
// matmul_nvfp4.c, act_quant.c, rmsnorm.c, rope.c, attention.c with
// attention.h and attention_avx512.c, silu_mul.c, add.c, log_softmax.c),
// whose header comment gives what it computes, its
// data layout, its variants and its tests. Go wraps each op 1:1 (ops.go),
// checks shapes and panics with a "cpu: " message on a programmer error,
// as gonum does. C receives slice base pointers for the duration of a call
// only and keeps none.
//
// # Code paths
//
// The ops that carry the arithmetic (MatMul, activation quantization,
// attention, the bandwidth probe) are compiled three times, per function,
// with gcc target attributes: "avx512" (AVX-512 F/BW/VL/DQ), "avx2" (AVX2,
// FMA, F16C) and "generic" (portable C, also on non-x86 machines). [New]
// picks the best path the CPU supports, and [NewWithOptions] can force a
// lower one, which is how the tests run every path on one machine. Name
// reports the path: "cpu-avx512", "cpu-avx2" or "cpu-generic". The package
// builds with plain gcc flags and runs on any x86-64. The other ops are
// plain C, identical on every path. Within the avx512 path the FP8 MatMul
// has two run-time variants with the plain one's bits: VBMI byte tables
// for decoding, and on top of them AVX512_BF16's vdpbf16ps where the
// activations are FP8 (per token or per tensor), whose values and
// products are exact in BF16. Elsewhere AVX512_BF16 is not used: it would
// round float32 activations to BF16, which the contract does not allow.
//
// # Threads and invariance
//
// An Ops owns a pool of pthreads, created by [New] and sized to the online
// CPUs (the calling thread included), joined by [Ops.Close]. MatMul splits
// the output rows (columns of W) into blocks, Attention its (token, head)
// pairs, and the row-wise ops their rows; work too small to pay for waking
// the pool runs on the calling thread. [Ops.MatMuls] hands the row blocks
// of up to three weights that share an input (a layer's q, k and v, or
// gate and up) to the pool as one task list, which the runtime uses when
// it finds the method. Every output element is computed by
// one task with a reduction order that depends only on the problem's inner
// dimension, so results are bit-identical whatever T is, whatever other
// tokens are computed with it, and whatever the number of threads
// (kernels.Ops's batch invariance). Different code paths round
// differently; each is checked against the same tolerances.
//
// # Numerics
//
// MatMul quantizes each token's activations once, before the products,
// with the contract's float32 operations and E4M3/E2M1 rounding, so the
// activation codes are exact; it decodes FP8 and NVFP4 weights exactly and
// accumulates in float32. The one deviation from the contract's literal
// formulas, within float32 reassociation error, is ActFP8Group128, where
// each dequantized activation (value times group scale) is rounded to
// float32 before the product instead of scaling each group's sum.
//
// An Ops serializes its calls with a mutex: it holds one scratch buffer and
// one pool. Use one Ops per goroutine that needs kernels concurrently.
//
// Built with CGO_ENABLED=0, [New] returns [kernels.ErrNoCgo].
package cpu
