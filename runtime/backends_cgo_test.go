//go:build cgo

package runtime

import (
	"sync"
	"testing"

	"github.com/lowbit-ai/lowbit/kernels"
	"github.com/lowbit-ai/lowbit/kernels/cpu"
)

// cpuOps is one kernels/cpu instance (a thread pool) shared by every test.
var cpuOps struct {
	sync.Once
	ops *cpu.Ops
	err error
}

func cpuBackend(t testing.TB) kernels.Ops {
	cpuOps.Do(func() { cpuOps.ops, cpuOps.err = cpu.New() })
	if cpuOps.err != nil {
		t.Skipf("kernels/cpu: %v", cpuOps.err)
	}
	return cpuOps.ops
}

func init() {
	backends = append(backends, backend{name: "cpu", ops: cpuBackend})
}
