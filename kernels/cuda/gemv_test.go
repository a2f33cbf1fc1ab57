//go:build cgo

package cuda

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/lowbit-ai/lowbit/format"
	"github.com/lowbit-ai/lowbit/kernels"
)

// TestGemvKernels: lb_mma_gemv_wide and the lb_mma_gemv_bulk variants (each
// forced for every T) give lb_mma_gemv's bits and write exactly its elements (the rest
// of y stays poisoned), for every T the GEMVs take, one to three weights a
// launch, inputs of 1 to 48 spans (split unevenly over the wide kernel's
// cluster of 8 blocks, some with none; over the bulk kernel's warps and
// rings of 1 to 4 slots, some warps with none) and rows off the 128-row
// blocks. The conformance suite checks lb_mma_gemv
// and lb_mma_gemm against kernels/ref and against each other (batch
// invariance across T = 1, 9, 32, 33).
func TestGemvKernels(t *testing.T) {
	d := openOrSkip(t)
	if d.Major < 9 {
		t.Skipf("lb_mma_gemv_wide and lb_mma_gemv_bulk need sm_90; %s", d.Arch)
	}
	defer func(from, groups, ring, ahead int, kernel string) {
		mmaWideFrom, mmaBulkGroups, mmaBulkRing, mmaBulkAhead, mmaBulkKernel = from, groups, ring, ahead, kernel
	}(mmaWideFrom, mmaBulkGroups, mmaBulkRing, mmaBulkAhead, mmaBulkKernel)
	rng := rand.New(rand.NewPCG(7, 9))
	const guard = 64 // floats past T·out that neither kernel may write
	for _, c := range []struct {
		outs []int
		in   int
	}{
		{[]int{48}, 16}, {[]int{19}, 33}, {[]int{200, 72, 300}, 1040}, {[]int{1, 17, 129}, 2320},
		{[]int{130, 260}, 4112}, {[]int{4096, 1024, 1024}, 4096}, {[]int{384}, 12288},
	} {
		var dws []*Weight
		var ys []Buf
		for _, out := range c.outs {
			data := make([]byte, 2*out*c.in)
			for i := 0; i < out*c.in; i++ {
				binary.LittleEndian.PutUint16(data[2*i:], format.BF16FromFloat32(float32(rng.NormFloat64()*0.05)))
			}
			dw, err := d.UploadWeight(&kernels.Weight{Format: kernels.WeightBF16, Out: out, In: c.in, Data: data, Act: kernels.ActNone})
			if err != nil {
				t.Fatal(err)
			}
			y, err := d.Alloc(4 * (mmaGemvTokens*out + guard))
			if err != nil {
				t.Fatal(err)
			}
			dws, ys = append(dws, dw), append(ys, y)
		}
		// Rows of different magnitudes, a few large values, some zeros.
		x := make([]float32, mmaGemvTokens*c.in)
		for tk := range mmaGemvTokens {
			mag := math.Exp2(float64(rng.IntN(13) - 6))
			for i := range c.in {
				v := float32(rng.NormFloat64() * mag)
				switch rng.IntN(64) {
				case 0:
					v *= 1024
				case 1:
					v = 0
				}
				x[tk*c.in+i] = v
			}
		}
		xd, err := d.Alloc(4 * len(x))
		if err != nil {
			t.Fatal(err)
		}
		if err := d.Upload(xd, asBytes(x, len(x))); err != nil {
			t.Fatal(err)
		}
		run := func(T, from, groups, ring, ahead int, kernel string) [][]byte {
			mmaWideFrom, mmaBulkGroups, mmaBulkRing, mmaBulkAhead, mmaBulkKernel = from, groups, ring, ahead, kernel
			err := d.Run(func(k *K) error {
				for _, y := range ys {
					if err := k.Poison(y); err != nil {
						return err
					}
				}
				return k.MatMulShared(xd, T, ys, dws)
			})
			if err != nil {
				t.Fatal(err)
			}
			got := make([][]byte, len(ys))
			for i, y := range ys {
				got[i] = make([]byte, y.Bytes())
				if err := d.Download(got[i], y); err != nil {
					t.Fatal(err)
				}
			}
			return got
		}
		for T := 1; T <= mmaGemvTokens; T++ {
			old := run(T, mmaGemvTokens+1, 0, 0, 0, "")
			// Each bulk variant at a ring of 1 to 4 and 0 to 2 spans of
			// terms prefetched, varying with T.
			for _, v := range []struct {
				kernel                    string
				from, groups, ring, ahead int
			}{
				{"lb_mma_gemv_wide", 1, 0, 0, 0},
				{"lb_mma_gemv_bulk", mmaGemvTokens + 1, mmaGemvTokens / 8, 1 + T%mmaBulkRingMax, T % 3},
				{"lb_mma_gemv_bulk3", mmaGemvTokens + 1, mmaGemvTokens / 8, 1 + (T+1)%mmaBulkRingMax, (T + 1) % 3},
				{"lb_mma_gemv_bulk4", mmaGemvTokens + 1, mmaGemvTokens / 8, 1 + (T+2)%mmaBulkRingMax, (T + 2) % 3},
			} {
				got := run(T, v.from, v.groups, v.ring, v.ahead, v.kernel)
				for i, out := range c.outs {
					name := fmt.Sprintf("outs=%v/in=%d/T=%d/weight %d", c.outs, c.in, T, i)
					if bytes.Equal(old[i], got[i]) {
						continue
					}
					for e := 0; e < len(old[i])/4; e++ {
						o, w := binary.LittleEndian.Uint32(old[i][4*e:]), binary.LittleEndian.Uint32(got[i][4*e:])
						if o != w {
							t.Errorf("%s: y[t=%d,o=%d] = %#08x (%v) from %s (ring %d, ahead %d), %#08x (%v) from lb_mma_gemv",
								name, e/out, e%out, w, math.Float32frombits(w), v.kernel, v.ring, v.ahead, o, math.Float32frombits(o))
							break
						}
					}
				}
			}
		}
		for i := range dws {
			d.Free(dws[i].Data)
			d.Free(ys[i])
		}
		d.Free(xd)
	}
}

// TestBulkRing: lb_mma_gemv_bulk's ring on the Qwen3 shapes leaves room
// for two blocks an SM (spans·512 bytes of sums beside 32 KB of slots a
// ring step), and a ring is never deeper than a warp's spans or the
// kernel's bound. Runs without a GPU.
func TestBulkRing(t *testing.T) {
	defer func(r int) { mmaBulkRing = r }(mmaBulkRing)
	for _, c := range []struct{ set, spans, blocks, want int }{
		{0, 16, 2, 3},  // in = 4096: 96 KB + 8 KB a block
		{0, 48, 2, 2},  // in = 12288: 96 + 24 KB would leave one block an SM
		{0, 12, 2, 3},  // in = 3072 (Qwen3-0.6B's down projection)
		{0, 4, 2, 1},   // in = 1024: one span a warp
		{0, 1, 2, 1},   // in ≤ 256: three warps without spans
		{0, 200, 2, 1}, // 100 KB of sums: one block an SM whatever the ring
		{0, 16, 3, 2},  // three blocks of 64 + 8 KB
		{0, 16, 4, 1},  // four of 32 + 8 KB
		{4, 16, 2, 4},
		{4, 8, 2, 2},
		{9, 64, 2, mmaBulkRingMax},
	} {
		mmaBulkRing = c.set
		if got := bulkRing(c.spans, c.blocks); got != c.want {
			t.Errorf("bulkRing(%d spans, %d blocks) with mmaBulkRing %d = %d, want %d", c.spans, c.blocks, c.set, got, c.want)
		}
	}
	for name := range mmaBulkBlocks {
		if !strings.Contains(kernelSource(t), `extern "C" __global__ void __launch_bounds__(128, `+
			fmt.Sprint(mmaBulkBlocks[name])+") "+name+"(") {
			t.Errorf("%s: no kernel of %d blocks an SM in matmul_mma_bulk.cu", name, mmaBulkBlocks[name])
		}
	}
}

// kernelSource returns the kernels' CUDA source.
func kernelSource(t *testing.T) string {
	src, err := Source()
	if err != nil {
		t.Fatal(err)
	}
	return src
}
