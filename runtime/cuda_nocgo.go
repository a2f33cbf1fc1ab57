//go:build !cgo

package runtime

import (
	"github.com/lowbit-ai/lowbit/kernels"
	"github.com/lowbit-ai/lowbit/kernels/cuda"
)

// CUDAExecutor needs cgo; see cuda.go.
type CUDAExecutor struct {
	TopOnDevice bool
}

// CUDAOption configures a CUDAExecutor.
type CUDAOption func(*CUDAExecutor)

// WithPrefillBF16 is the cgo build's option; it does nothing here.
func WithPrefillBF16() CUDAOption { return func(*CUDAExecutor) {} }

// WithBF16Activations is the cgo build's option; it does nothing here.
func WithBF16Activations() CUDAOption { return func(*CUDAExecutor) {} }

// NewCUDAExecutor returns kernels.ErrNoCgo.
func NewCUDAExecutor(*Model, *cuda.Device, int, int, kernels.KVDType, ...CUDAOption) (*CUDAExecutor, error) {
	return nil, kernels.ErrNoCgo
}

// Forward returns kernels.ErrNoCgo.
func (e *CUDAExecutor) Forward([]BatchEntry) ([]float32, error) { return nil, kernels.ErrNoCgo }

// TopMax returns 0.
func (e *CUDAExecutor) TopMax() int { return 0 }

// ForwardTop returns kernels.ErrNoCgo.
func (e *CUDAExecutor) ForwardTop([]BatchEntry, int, []bool, []float32) ([]float32, []TopLogits, error) {
	return nil, nil, kernels.ErrNoCgo
}

// ForwardInto returns kernels.ErrNoCgo.
func (e *CUDAExecutor) ForwardInto([]BatchEntry, []float32) ([]float32, error) {
	return nil, kernels.ErrNoCgo
}

// Blocks returns 0.
func (e *CUDAExecutor) Blocks() int { return 0 }

// BlockSize returns 0.
func (e *CUDAExecutor) BlockSize() int { return 0 }

// DType returns KVFloat32.
func (e *CUDAExecutor) DType() kernels.KVDType { return kernels.KVFloat32 }

// Close does nothing.
func (e *CUDAExecutor) Close() error { return nil }
