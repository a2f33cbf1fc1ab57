//go:build !cgo

package runtime

import (
	"github.com/lowbit-ai/lowbit/kernels"
	"github.com/lowbit-ai/lowbit/kernels/cuda"
)

// CUDAExecutor needs cgo; see cuda.go.
type CUDAExecutor struct{}

// NewCUDAExecutor returns kernels.ErrNoCgo.
func NewCUDAExecutor(*Model, *cuda.Device, int, int, kernels.KVDType) (*CUDAExecutor, error) {
	return nil, kernels.ErrNoCgo
}
