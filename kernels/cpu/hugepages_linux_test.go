//go:build cgo && linux

package cpu

import (
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// hugeBytes returns n bytes of anonymous memory, 2 MiB aligned and advised
// to use transparent huge pages before any page is touched, as
// runtime.LoadOptions.NoMmap places a model's weights, and the function
// that unmaps it.
func hugeBytes(b *testing.B, n int) ([]byte, func()) {
	const huge = 2 << 20
	n = (n + huge - 1) &^ (huge - 1)
	mem, err := unix.Mmap(-1, 0, n+huge, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		b.Fatal(err)
	}
	base := uintptr(unsafe.Pointer(unsafe.SliceData(mem)))
	off := int((base+huge-1)&^(huge-1) - base)
	buf := mem[off : off+n : off+n]
	if err := unix.Madvise(buf, unix.MADV_HUGEPAGE); err != nil {
		unix.Munmap(mem)
		b.Skipf("madvise(MADV_HUGEPAGE): %v", err)
	}
	return buf, func() { unix.Munmap(mem) }
}
