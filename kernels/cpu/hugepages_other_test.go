//go:build cgo && !linux

package cpu

import "testing"

// hugeBytes: without Linux's madvise there are no huge pages to ask for.
func hugeBytes(b *testing.B, n int) ([]byte, func()) {
	b.Skip("huge pages are asked for with Linux's madvise")
	return nil, nil
}
