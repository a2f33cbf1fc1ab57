//go:build cgo

package cuda

import (
	"testing"

	"github.com/lowbit-ai/lowbit/kernels"
)

// TestArena: spans come in order, each on a 256-byte boundary of the
// allocation, and a span that does not fit is an error, not an overlap.
// Runs without a GPU (the arithmetic only).
func TestArena(t *testing.T) {
	a := NewArena(Buf{ptr: 1 << 20, bytes: 1024})
	var got []Buf
	for _, n := range []int{10, 256, 300} {
		b, err := a.Take(n)
		if err != nil {
			t.Fatalf("Take(%d): %v", n, err)
		}
		got = append(got, b)
	}
	for i, want := range []struct{ off, n int }{{0, 10}, {256, 256}, {512, 300}} {
		if int(got[i].ptr)-(1<<20) != want.off || got[i].bytes != want.n {
			t.Errorf("span %d at +%d, %d bytes; want +%d, %d", i, int(got[i].ptr)-(1<<20), got[i].bytes, want.off, want.n)
		}
	}
	if _, err := a.Take(1); err == nil {
		t.Error("Take past the arena's end succeeded")
	}
	// What the executor sizes an arena by: tiled BF16 weights take their
	// mma tiles, others their codes and scales, each span aligned.
	bf16 := &kernels.Weight{Format: kernels.WeightBF16, Out: 130, In: 20, Data: make([]byte, 2*130*20)}
	if got, want := WeightArenaBytes(bf16), ArenaBytes(TiledBytes(130, 20)); got != want {
		t.Errorf("BF16 130x20: %d arena bytes, want %d", got, want)
	}
	fp8 := &kernels.Weight{Format: kernels.WeightFP8Channel, Out: 3, In: 100, Data: make([]byte, 300), Scales: make([]float32, 3)}
	if got := WeightArenaBytes(fp8); got != 512+256 {
		t.Errorf("FP8 3x100: %d arena bytes, want 768 (codes, then scales)", got)
	}
}
