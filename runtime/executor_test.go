package runtime

import (
	"testing"

	"github.com/lowbit-ai/lowbit/kernels"
)

// TestForwardInto: a KVPool writes the logits into the caller's buffer
// when it can hold them (the same memory back, the same bits as Forward's
// fresh slice), and into a new slice when it cannot.
func TestForwardInto(t *testing.T) {
	dir := small128.write(t)
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			m := loadModel(t, dir, b.ops(t))
			V := m.VocabSize()
			blocks := []int32{0, 1, 2, 3}
			prompt := []BatchEntry{{Blocks: blocks, Tokens: []int{3, 1, 4, 1, 5}, Logits: 2}}
			step := []BatchEntry{{Blocks: blocks, Start: 5, Tokens: []int{9}, Logits: 1}}
			run := func(into bool, dst []float32) ([]float32, []float32) {
				pool, err := m.NewKVPool(4, 4, kernels.KVBF16)
				if err != nil {
					t.Fatal(err)
				}
				a, err := pool.Forward(prompt)
				if err != nil {
					t.Fatal(err)
				}
				var c []float32
				if into {
					c, err = pool.ForwardInto(step, dst)
				} else {
					c, err = pool.Forward(step)
				}
				if err != nil {
					t.Fatal(err)
				}
				return a, c
			}
			_, want := run(false, nil)
			buf := make([]float32, 3*V)
			for i := range buf {
				buf[i] = -7 // must all be overwritten where the rows go
			}
			_, got := run(true, buf)
			if len(got) != V || &got[0] != &buf[0] {
				t.Fatalf("ForwardInto with room for 3 rows: %d floats at a new address, want the buffer's first %d", len(got), V)
			}
			if !sameBits(got, want) {
				t.Fatalf("ForwardInto's logits differ from Forward's (max |Δ| %g)", maxDiff(got, want))
			}
			small := make([]float32, V-1)
			_, got = run(true, small)
			if len(got) != V || !sameBits(got, want) {
				t.Fatalf("ForwardInto with a buffer too small: %d floats, same bits %v", len(got), sameBits(got, want))
			}
		})
	}
}
