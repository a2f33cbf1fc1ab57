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
	bw := cpuOps.ops.MemoryBandwidth(1 << 30)
	if bw <= 0 {
		b.Fatal("kernels/cpu could not measure the memory bandwidth")
	}
	return ops, bw
}

// benchBandwidthAgain measures kernels/cpu's memory bandwidth again, after
// a benchmark's steps: on a shared VM a neighbour's traffic moves it by
// 10% between runs (BENCHMARKS.md), so the roofline takes the higher of
// the two probes.
func benchBandwidthAgain() float64 { return cpuOps.ops.MemoryBandwidth(1 << 30) }
