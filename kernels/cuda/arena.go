//go:build cgo

package cuda

import (
	"fmt"

	"github.com/lowbit-ai/lowbit/kernels"
)

// Arena hands out spans of one device allocation in order, each aligned to
// arenaAlign bytes: a model's weights take one cuMemAlloc and one Free
// (and its KV pools another), not one a tensor.
type Arena struct {
	buf Buf
	off int
}

// arenaAlign keeps every span on a 256-byte boundary, more than any
// kernel's widest load (16-byte cp.async and uint4 reads) needs.
const arenaAlign = 256

// ArenaBytes is what a span of n bytes takes of an arena.
func ArenaBytes(n int) int { return (n + arenaAlign - 1) / arenaAlign * arenaAlign }

// NewArena hands out buf (the caller allocates and frees it).
func NewArena(buf Buf) *Arena { return &Arena{buf: buf} }

// Take returns the next n bytes.
func (a *Arena) Take(n int) (Buf, error) {
	if a.off+ArenaBytes(n) > a.buf.bytes {
		return Buf{}, fmt.Errorf("cuda: arena of %d bytes: %d more do not fit after %d", a.buf.bytes, n, a.off)
	}
	b := a.buf.Slice(a.off, a.off+n)
	a.off += ArenaBytes(n)
	return b, nil
}

// WeightArenaBytes is what UploadWeightTo takes of an arena for w.
func WeightArenaBytes(w *kernels.Weight) int {
	if usesMMA(w.Format, w.Act) {
		return ArenaBytes(TiledBytes(w.Out, w.In))
	}
	n := ArenaBytes(len(w.Data))
	if len(w.Scales) > 0 {
		n += ArenaBytes(4 * len(w.Scales))
	}
	return n
}

// UploadWeightTo is UploadWeight placing the weight's device copy in a
// (WeightArenaBytes(w) bytes of it); its spans are the arena's to free.
func (d *Device) UploadWeightTo(w *kernels.Weight, a *Arena) (*Weight, error) {
	return d.uploadWeight(w, a.Take)
}
