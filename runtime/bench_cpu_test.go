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
