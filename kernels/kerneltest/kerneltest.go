// Package kerneltest is the conformance suite of kernels.Ops: every
// implementation (kernels/ref itself, kernels/cpu, the CUDA kernels) runs
// the same cases, which compare it with kernels/ref on fresh random inputs
// within documented tolerances and check batch invariance on the
// implementation under test.
//
// Use it from a test of the implementation:
//
//	func TestConformance(t *testing.T) { kerneltest.Run(t, cpu.New()) }
//
// Every case draws its inputs from math/rand/v2 seeded by the case's name, so
// a failure reproduces run after run, and names the op, the case and the
// index: "MatMul(fp8-block/fp8-token/T=7/Out=48/In=256)[t=3,o=17] = got,
// want want (tol ...)". Run one op or case with go test -run, e.g.
// -run 'Conformance/MatMul/nvfp4/'.
//
// What every case checks:
//
//   - outputs are poisoned with a NaN before the call, so an element the
//     implementation does not write shows up as "not written";
//   - a guard of poisoned elements after the end of each output must
//     survive the call (writes past the end);
//   - inputs that are not outputs must come back unchanged (a MatMul that
//     quantizes x in place, say);
//   - every output element is within the tolerance of the op (below) of
//     ref's, which computes in float64 and rounds once;
//   - batch invariance: for MatMul, RMSNorm, RoPE, Attention, SiLUMul and
//     LogSoftmax, each row computed alone (T = 1) must be bit-identical to
//     the same row of the batched call, on the implementation under test
//     (±0 count as equal).
//
// # Tolerances
//
// u = 2^-24 is float32's unit roundoff. ref is the more accurate side: it
// accumulates in float64 and rounds once, so each bound is the error a
// float32 implementation following the contract can make, with margin.
// Summing n terms in float32 errs by at most about n·u·Σ|terms| in the worst
// case but, with independent roundings, by a random walk of about
// √n·u·Σ|terms| in practice, and less for the blocked and tree-shaped sums
// SIMD kernels use; the √n bounds below have a margin of 4 or more over
// that. A sum is bounded relative to the sum of magnitudes (computed by the
// suite in float64), never relative to the result, which can cancel.
//
//	op          bound on |got - want|
//	MatMul      (8 + 4√In)·u·Σ_g |s_g|·Σ_{i∈g} |q_i|·|w_oi|
//	RMSNorm     u·|x_i|·r·((16 + 2√D)·|g_i| + 2·[zeroCentered])
//	RoPE        8u·(|x1·c| + |x2·s|) on rotated dims; exact elsewhere
//	Attention   u·Σ_p P_p|v_pd|·(2(8 + 2√Dh)·S + 4S + 24 + 4√L)
//	PagedAttention  as Attention, on the cache as KVCache.Load decodes it
//	WriteKV     0 (the stored bytes equal kernels.WriteKV's)
//	SiLUMul     32u·|want| + 2^-120·|up|
//	Add         0 (one float32 addition)
//	LogSoftmax  u·(4|want| + 4|lse| + 32 + 4√V)
//
// MatMul: q_i are the quantized activations (the decoded codes; x itself
// for ActNone), s_g their group scales and w the dequantized weight, as
// ref.QuantizeActivations and ref.Dequantize compute them. 8u covers the
// roundings outside the sum (the weight's dequantization, which a kernel
// may order differently, e.g. e2m1·(scale·global); the scale products; the
// final rounding). The quantized codes themselves get no tolerance: the
// contract pins the float32 operations that produce them (amax/448 and x/s
// are divisions, (amax/6)·G two roundings, E4M3 and E2M1 round to nearest
// even), so both sides get the same codes, and one flipped code moves the
// result by an E4M3 step (1/16 to 1/8 of |x_i·w_i|) or an E2M1 step, 15 to
// 100 times the tolerance at the sizes tested. The "ties" cases make that
// check certain rather than likely: their activations are built so that x/s
// (and, for NVFP4, (amax/6)·G) lands exactly on a rounding midpoint, where
// computing x·(1/s) instead of x/s, or amax·(G/6), flips codes.
//
// RMSNorm: r is ref's 1/sqrt(mean(x²) + eps). The float32 mean of squares
// errs by about 0.3·√D·u relatively in a sequential sum (halved by the
// square root); 16u more cover eps's addition, the square root and the
// division, or an approximate reciprocal square root refined by Newton's
// method, the two products and 1 + weight, whose absolute error u is the 2u
// term when zeroCentered (1 + weight may cancel).
//
// RoPE: x1·c - x2·s with c and s the float32 cosine and sine: two products
// and a subtraction, each within u of the magnitudes (2u, the worst case,
// is reached), and 1u more for a cosine or sine a float64 libm rounds to
// float32 on the other side of a midpoint; 8u leaves a margin of 2.
// Angles computed in float32 (pos·inv_freq, or inv_freq itself) are not
// within this bound at the large positions tested, deliberately: the
// contract says float64.
//
// Attention: S = max_p scale·Σ_d |q_d·k_pd| bounds the scores' magnitude;
// a float32 score errs by (8 + 2√Dh)·u·S (dot product, scale), s - max by
// 2u·S more (a fold of 64-position chunks, as kernels/cuda and kernels/cpu
// compute, adds about 2u·S again in exp(M − M'), within the dot product's
// 8u·S term), exp by a few ulp, and a relative error ε in the softmax
// weights moves the output by at most 2·max ε·Σ P|v|; the softmax sum and
// the weighted sum of L = start+t+1 values (with an online softmax's
// rescalings) add (24 + 4√L)·u.
//
// SiLUMul: exp within a few ulp (a vectorized polynomial exp may be off by
// 4), 1 + e, the division and the product: about 8u, which 32u (2e-6)
// covers with room for a coarser exp. The absolute term covers gate <
// -88.7, where a float32 exp(-gate) overflows and gate/(1+exp(-gate)) is ±0
// while ref's float64 gives |silu(gate)| < 2.8e-37.
//
// LogSoftmax: lse = m + log Σ exp(x - m); the float32 sum errs by about √V·u
// relatively and exp by a few ulp, which log turns into an absolute error
// (the 32 + 4√V), and m + log(...) and x - lse round at the magnitudes of
// lse and of the result: u·(|want| + |lse|), quadrupled. (Computing
// (x - m) - log(...) instead rounds at |x - m| <= |want| + log V.)
//
// An independent float32 implementation of the contract (kernels/ref's
// f32_test.go: sequential and 16-lane sums, an online softmax, an exp off
// by 2 ulp, NVFP4 weights dequantized as e2m1·(scale·global)) stays within
// half of every tolerance over the whole suite.
package kerneltest

import (
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/lowbit-ai/lowbit/kernels"
	"github.com/lowbit-ai/lowbit/kernels/ref"
)

// Op names, as Run's subtests and Check's filter spell them.
const (
	OpMatMul     = "MatMul"
	OpRMSNorm    = "RMSNorm"
	OpRoPE       = "RoPE"
	OpAttention  = "Attention"
	OpSiLUMul    = "SiLUMul"
	OpAdd        = "Add"
	OpLogSoftmax = "LogSoftmax"
	// The paged KV cache (kvcache.go).
	OpWriteKV        = "WriteKV"
	OpPagedAttention = "PagedAttention"
)

// allOps lists the op names in the order the suite runs them.
var allOps = []string{OpMatMul, OpRMSNorm, OpRoPE, OpAttention, OpWriteKV, OpPagedAttention, OpSiLUMul, OpAdd, OpLogSoftmax}

// Run runs the whole suite on ops, one subtest per op and one per case
// within it ("MatMul/bf16/none/T=1/Out=48/In=256"), and reports each
// failure with t.Error. Cases run one after the other: ops need not be safe
// for concurrent calls.
func Run(t *testing.T, ops kernels.Ops) {
	t.Helper()
	for _, op := range allOps {
		t.Run(op, func(t *testing.T) {
			for _, c := range casesOf(op) {
				t.Run(c.name, func(t *testing.T) {
					for _, e := range runCase(ops, c) {
						t.Error(e)
					}
				})
			}
		})
	}
}

// Check runs the suite on ops and returns its failures, one message each,
// in case order; none means ops conforms. With only, it runs just the cases
// whose "op/name" equals or starts with one of only followed by a slash:
// "MatMul" runs every MatMul case, "MatMul/nvfp4" the NVFP4 ones,
// "MatMul/bf16/fp8-token" those of BF16 weights with fp8-token
// activations. A panic in ops is recovered and reported as a failure of its
// case; a filter that matches no case is reported too.
func Check(ops kernels.Ops, only ...string) []string {
	var errs []string
	matched := make([]bool, len(only))
	for _, op := range allOps {
		for _, c := range casesOf(op) {
			if len(only) > 0 && !selected(op+"/"+c.name, only, matched) {
				continue
			}
			errs = append(errs, runCase(ops, c)...)
		}
	}
	for i, m := range matched {
		if !m {
			errs = append(errs, fmt.Sprintf("kerneltest.Check: no case matches %q", only[i]))
		}
	}
	return errs
}

// selected reports whether the case full ("op/name") is selected by one of
// only, and marks those that select it.
func selected(full string, only []string, matched []bool) bool {
	sel := false
	for i, p := range only {
		if full == p || strings.HasPrefix(full, strings.TrimSuffix(p, "/")+"/") {
			matched[i], sel = true, true
		}
	}
	return sel
}

// testCase is one case of the suite: op and name identify it (and seed its
// random inputs), run performs it.
type testCase struct {
	op, name string
	run      func(c *checker)
}

// maxErrs is how many failures of one case are reported individually; the
// rest are counted.
const maxErrs = 8

// checker carries one case's state: the implementation under test, the
// case's random source, and its failures.
type checker struct {
	ops   kernels.Ops
	ref   ref.Ops
	rng   *rand.Rand
	label string // "MatMul(bf16/none/T=1/Out=48/In=256)"
	errs  []string
	nerr  int
}

func runCase(ops kernels.Ops, tc testCase) (errs []string) {
	h := fnv.New64a()
	h.Write([]byte(tc.op + "/" + tc.name))
	c := &checker{
		ops:   ops,
		rng:   rand.New(rand.NewPCG(h.Sum64(), 0x6b65726e656c7465)),
		label: tc.op + "(" + tc.name + ")",
	}
	defer func() {
		if r := recover(); r != nil {
			stack := string(debug.Stack())
			if len(stack) > 4000 {
				stack = stack[:4000] + "\n..."
			}
			c.errs = append(c.errs, fmt.Sprintf("%s panicked: %v\n%s", c.label, r, stack))
		}
		if c.nerr > maxErrs {
			c.errs = append(c.errs, fmt.Sprintf("%s: %d more failures", c.label, c.nerr-maxErrs))
		}
		errs = c.errs
	}()
	tc.run(c)
	return nil
}

// errorf records a failure of the current case; the message follows the
// case's label, so it starts with the index: "[t=3,o=17] = ...".
func (c *checker) errorf(format string, args ...any) {
	c.nerr++
	if c.nerr <= maxErrs {
		c.errs = append(c.errs, c.label+fmt.Sprintf(format, args...))
	}
}

// u is float32's unit roundoff.
const u = 0x1p-24

// Poison bit patterns: quiet NaNs that arithmetic is unlikely to produce.
const (
	poisonBits = 0x7FC0BAD1 // outputs before the call
	guardBits  = 0x7FC0FEED // elements past the end of an output
	guardLen   = 17
)

// out is an output buffer: n poisoned elements followed by a guard.
type out struct {
	buf []float32
	n   int
}

func newOut(n int) out {
	buf := make([]float32, n+guardLen)
	for i := range buf {
		if i < n {
			buf[i] = math.Float32frombits(poisonBits)
		} else {
			buf[i] = math.Float32frombits(guardBits)
		}
	}
	return out{buf, n}
}

// s returns the output proper, with its capacity at the guard's end so that
// an implementation that reslices within its capacity is caught too.
func (o out) s() []float32 { return o.buf[:o.n] }

// checkGuard reports writes past the end of o.
func (c *checker) checkGuard(name string, o out) {
	for i := o.n; i < len(o.buf); i++ {
		if math.Float32bits(o.buf[i]) != guardBits {
			c.errorf(": %s[%d] written past its end (len %d): %v", name, i, o.n, o.buf[i])
			return
		}
	}
}

// unchanged reports an input the call modified.
func (c *checker) unchanged(name string, got, orig []float32) {
	for i := range orig {
		if math.Float32bits(got[i]) != math.Float32bits(orig[i]) {
			c.errorf(": input %s[%d] modified: %v, was %v", name, i, got[i], orig[i])
			return
		}
	}
}

// near compares got with want element by element within tol; at formats
// an index ("[t=3,o=17]").
func (c *checker) near(got, want []float32, tol []float64, at func(i int) string) {
	for i := range want {
		g, w := got[i], want[i]
		switch {
		case math.Float32bits(g) == poisonBits:
			c.errorf("%s = NaN (not written), want %v (tol %.3g)", at(i), w, tol[i])
		case !(math.Abs(float64(g)-float64(w)) <= tol[i]):
			c.errorf("%s = %v, want %v (tol %.3g, off by %.3g)", at(i), g, w, tol[i], math.Abs(float64(g)-float64(w)))
		}
	}
}

// same checks batch invariance: alone (row computed with T = 1) must equal
// batched bit for bit, ±0 aside.
func (c *checker) same(alone, batched []float32, at func(i int) string) {
	for i := range batched {
		a, b := alone[i], batched[i]
		if math.Float32bits(a) != math.Float32bits(b) && !(a == 0 && b == 0) {
			c.errorf("%s computed alone (T=1) = %v, batched = %v: not batch invariant (must be bit-identical)", at(i), a, b)
		}
	}
}

// Random inputs.

func (c *checker) normal() float32 { return float32(c.rng.NormFloat64()) }

// nonzero returns a normal sample times scale that is not zero.
func (c *checker) nonzero(scale float64) float32 {
	for {
		if v := float32(c.rng.NormFloat64() * scale); v != 0 {
			return v
		}
	}
}

// uniform returns a float in [lo, hi).
func (c *checker) uniform(lo, hi float64) float64 { return lo + (hi-lo)*c.rng.Float64() }

// fill returns n nonzero normal samples times scale.
func (c *checker) fill(n int, scale float64) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = c.nonzero(scale)
	}
	return x
}

func sqrt(n int) float64 { return math.Sqrt(float64(n)) }

func abs32(x float32) float64 { return math.Abs(float64(x)) }

func clone(x []float32) []float32 { return append([]float32(nil), x...) }
