package runtime

import (
	"testing"

	"github.com/lowbit-ai/lowbit/kernels"
	"github.com/lowbit-ai/lowbit/kernels/ref"
)

// backend is a kernels.Ops the forward tests run with.
type backend struct {
	name string
	// ops returns the kernels, or skips t when they are not available.
	ops func(t testing.TB) kernels.Ops
	// exact: the backend's results do not depend on how tokens are split
	// into forwards, bit for bit (the reference); others within 1e-4.
	exact bool
}

// backends are the reference kernels and, in cgo builds, kernels/cpu
// (backends_cgo_test.go).
var backends = []backend{{name: "ref", ops: func(testing.TB) kernels.Ops { return ref.Ops{} }, exact: true}}
