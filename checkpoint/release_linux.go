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
func ReleasePages(data []byte) { advise(data, unix.MADV_DONTNEED) }

// PrefetchPages asks the kernel to start reading the pages under a mapped
// view in the background (madvise MADV_WILLNEED), so that a pass that will
// read it soon finds it in memory instead of faulting page by page. It is a
// hint: errors are ignored.
func PrefetchPages(data []byte) { advise(data, unix.MADV_WILLNEED) }

// advise applies advice to the whole pages inside data.
func advise(data []byte, advice int) {
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
	_ = unix.Madvise(data[first-start:last-start], advice)
}
