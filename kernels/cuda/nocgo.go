//go:build !cgo

package cuda

import (
	"errors"
	"fmt"

	"github.com/lowbit-ai/lowbit/kernels"
)

// ErrNoDevice wraps every error of Open on a machine that cannot run CUDA.
var ErrNoDevice = errors.New("cuda: no usable CUDA device")

// Options choose the device and where compiled kernels are cached.
type Options struct {
	Ordinal  int
	CacheDir string
	NVRTC    string
}

// Device is a CUDA device; without cgo none can be opened.
type Device struct{}

// Open returns an error wrapping ErrNoDevice and kernels.ErrNoCgo.
func Open(Options) (*Device, error) {
	return nil, fmt.Errorf("%w: %w", ErrNoDevice, kernels.ErrNoCgo)
}

// Close does nothing.
func (d *Device) Close() error { return nil }

// String describes the device.
func (d *Device) String() string { return "no device" }

// AttentionPartialsBytes is 0: there is no device to hold them.
func AttentionPartialsBytes(H, KVH, headDim, tokens int) int64 { return 0 }

// MemInfo returns an error: there is no device.
func (d *Device) MemInfo() (free, total int64, err error) { return 0, 0, ErrNoDevice }
