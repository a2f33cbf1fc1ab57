//go:build cgo

package runtime

import (
	"testing"

	"github.com/lowbit-ai/lowbit/kernels"
)

// benchBackend returns kernels/cpu and the memory bandwidth it measures on
// a 1 GiB buffer, the roofline's numerator.
func benchBackend(b *testing.B) (kernels.Ops, float64) {
	ops := cpuBackend(b)
	bw := benchBandwidth(1 << 30)
	if bw <= 0 {
		b.Fatal("kernels/cpu could not measure the memory bandwidth")
	}
	return ops, bw
}

// benchBandwidth measures kernels/cpu's memory bandwidth on a buffer of
// about `bytes`: 1 GiB before the benchmarks and again after each run's
// steps, since on a shared VM a neighbour's traffic moves it by 10% between
// runs (BENCHMARKS.md), and the roofline takes the higher of the two
// probes; 256 MiB around each round of pairedRatio.
func benchBandwidth(bytes int64) float64 { return cpuOps.ops.MemoryBandwidth(bytes) }
