//go:build !cgo

package cpu

import (
	"errors"
	"testing"

	"github.com/lowbit-ai/lowbit/kernels"
)

func TestNoCgo(t *testing.T) {
	if _, err := New(); !errors.Is(err, kernels.ErrNoCgo) {
		t.Errorf("New() error = %v, want kernels.ErrNoCgo", err)
	}
	if _, err := NewWithOptions(Options{ISA: "generic"}); !errors.Is(err, kernels.ErrNoCgo) {
		t.Errorf("NewWithOptions error = %v, want kernels.ErrNoCgo", err)
	}
}
