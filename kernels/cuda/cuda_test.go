//go:build cgo

package cuda

import (
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/lowbit-ai/lowbit/kernels/kerneltest"
)

// openOrSkip opens device 0 with a fresh kernel cache, or skips the test
// where there is no GPU (CI): the GPU tests run on the H200 machine through
// scripts/device_cuda.sh.
func openOrSkip(t *testing.T) *Device {
	t.Helper()
	d, err := Open(Options{CacheDir: t.TempDir()})
	if errors.Is(err, ErrNoDevice) {
		t.Skipf("no GPU: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	t.Logf("%v; kernels compiled in %.2f s", d, d.Compile.Seconds)
	return d
}

// TestConformance runs the shared conformance suite on the CUDA kernels.
func TestConformance(t *testing.T) {
	d := openOrSkip(t)
	kerneltest.Run(t, NewOps(d))
}

// TestKernelCache: a second Open with the same cache directory loads the
// cubin and compiles nothing.
func TestKernelCache(t *testing.T) {
	dir := t.TempDir()
	d, err := Open(Options{CacheDir: dir})
	if errors.Is(err, ErrNoDevice) {
		t.Skipf("no GPU: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	first := d.Compile
	d.Close()
	d, err = Open(Options{CacheDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if first.Cached || !d.Compile.Cached || d.Compile.Path != first.Path {
		t.Errorf("first open %+v, second %+v: want a compile, then a cache hit on the same file", first, d.Compile)
	}
	if _, err := os.Stat(first.Path); err != nil {
		t.Error(err)
	}
}

// TestCompileError: NVRTC's log reaches the error.
func TestCompileError(t *testing.T) {
	openOrSkip(t)
	_, err := nvrtcCompile(`extern "C" __global__ void broken() { undeclared_name = 1; }`, []string{"--std=c++17"})
	if err == nil || !strings.Contains(err.Error(), "undeclared_name") {
		t.Errorf("compile error = %v, want NVRTC's log naming undeclared_name", err)
	}
}
