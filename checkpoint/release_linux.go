package checkpoint

import (
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ReleasePages tells the kernel that the pages under a mapped tensor view
// are no longer needed by this process, so they leave its resident set
// (they stay in the page cache, and a later read faults them back in). A
// streaming pass over a checkpoint larger than memory calls it after each
// tensor, so that its RSS stays bounded by what it has in flight, not by
// what it has read. Only whole pages inside data are released. It is a hint:
// errors are ignored.
func ReleasePages(data []byte) {
	if len(data) == 0 {
		return
	}
	page := uintptr(os.Getpagesize())
	start := uintptr(unsafe.Pointer(unsafe.SliceData(data)))
	end := start + uintptr(len(data))
	first := (start + page - 1) &^ (page - 1)
	last := end &^ (page - 1)
	if last <= first {
		return
	}
	_ = unix.Madvise(data[first-start:last-start], unix.MADV_DONTNEED)
}
