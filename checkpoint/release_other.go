//go:build !linux

package checkpoint

// ReleasePages is a no-op where madvise(MADV_DONTNEED) is unavailable; see
// the Linux version.
func ReleasePages(data []byte) {}

// PrefetchPages is a no-op where madvise(MADV_WILLNEED) is unavailable; see
// the Linux version.
func PrefetchPages(data []byte) {}
