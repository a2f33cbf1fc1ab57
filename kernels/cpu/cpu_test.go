//go:build cgo

package cpu

import (
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/lowbit-ai/lowbit/kernels/kerneltest"
)

// TestConformance runs the shared conformance suite (kernels/kerneltest:
// every op against kernels/ref within its documented tolerances, plus batch
// invariance) on every code path this CPU supports.
func TestConformance(t *testing.T) {
	forEachISA(t, func(t *testing.T, ops *Ops) { kerneltest.Run(t, ops) })
}

// TestConformanceWithoutVBMI runs the MatMul cases on the plain AVX-512 FP8
// variant too, which a VBMI CPU would otherwise never run.
func TestConformanceWithoutVBMI(t *testing.T) {
	if !slices.Contains(ISAs(), "avx512") {
		t.Skip("no AVX-512 on this CPU")
	}
	setVBMI(false)
	defer setVBMI(true)
	ops := newOps(t, "avx512", 0)
	for _, f := range kerneltest.Check(ops, "MatMul/fp8-channel", "MatMul/fp8-tensor", "MatMul/fp8-block") {
		t.Error(f)
	}
}

// forEachISA runs f on an Ops of every code path this CPU supports, with
// the default thread count.
func forEachISA(t *testing.T, f func(t *testing.T, ops *Ops)) {
	t.Helper()
	for _, isa := range ISAs() {
		t.Run(isa, func(t *testing.T) { f(t, newOps(t, isa, 0)) })
	}
}

func newOps(t testing.TB, isa string, threads int) *Ops {
	t.Helper()
	ops, err := NewWithOptions(Options{ISA: isa, Threads: threads})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ops.Close)
	return ops
}

func TestISAs(t *testing.T) {
	isas := ISAs()
	if len(isas) == 0 || isas[len(isas)-1] != "generic" {
		t.Fatalf("ISAs() = %v, want a list ending in generic", isas)
	}
	ops, err := New()
	if err != nil {
		t.Fatal(err)
	}
	defer ops.Close()
	if want := "cpu-" + isas[0]; ops.Name() != want {
		t.Errorf("New().Name() = %q, want %q", ops.Name(), want)
	}
	for _, bad := range []Options{{ISA: "sse9"}, {Threads: -1}} {
		if ops, err := NewWithOptions(bad); err == nil {
			ops.Close()
			t.Errorf("NewWithOptions(%+v) succeeded, want an error", bad)
		}
	}
	for _, isa := range []string{"avx512", "avx2"} {
		if !slices.Contains(isas, isa) {
			if _, err := NewWithOptions(Options{ISA: isa}); err == nil {
				t.Errorf("NewWithOptions(ISA: %s) succeeded on a CPU without it", isa)
			}
		}
	}
}

func TestClose(t *testing.T) {
	ops := newOps(t, "", 2)
	ops.Close()
	ops.Close()
	wantPanic(t, "closed", func() { ops.Add([]float32{0}, []float32{1}, []float32{2}, 1) })
}

// wantPanic checks that f panics with a "cpu: " message containing substr.
func wantPanic(t *testing.T, substr string, f func()) {
	t.Helper()
	defer func() {
		t.Helper()
		r := recover()
		msg, _ := r.(string)
		if r == nil || !strings.HasPrefix(msg, "cpu: ") || !strings.Contains(msg, substr) {
			t.Errorf("panic %v, want a \"cpu: \" message containing %q", r, substr)
		}
	}()
	f()
}

func TestMemoryBandwidth(t *testing.T) {
	ops := newOps(t, "", 0)
	bw := ops.MemoryBandwidth(64 << 20)
	if !(bw > 1e8) {
		t.Errorf("MemoryBandwidth(64 MiB) = %g B/s, want > 1e8", bw)
	}
	t.Logf("%s, %d threads: %.1f GB/s over 64 MiB", ops.Name(), ops.Threads(), bw/1e9)
}

// randn returns n normal samples times scale.
func randn(rng *rand.Rand, n int, scale float64) []float32 {
	s := make([]float32, n)
	for i := range s {
		s[i] = float32(rng.NormFloat64() * scale)
	}
	return s
}

// ulpTol is n float32 ulps of |v| (at least of the smallest normal).
func ulpTol(v float64, n float64) float64 {
	return n * math.Max(math.Abs(v), 0x1p-126) * 0x1p-23
}

// sameBits reports whether a and b are the same float32, NaNs of any
// payload and zeros of either sign counting as equal.
func sameBits(a, b float32) bool {
	return a == b || (a != a && b != b)
}
