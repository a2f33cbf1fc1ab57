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

// TestGemvKernels: lb_mma_gemv_wide and lb_mma_gemv_bulk (each forced for
// every T; the bulk kernel in blocks of 8, 5 and 4 warps, rings of 1 and 2)
// give lb_mma_gemv's bits and write exactly its elements (the rest of y
// stays poisoned), for every T the GEMVs take, one to three weights a
// launch, inputs of 1 to 48 spans (split unevenly over the wide kernel's
// cluster of 8 blocks, some with none, and over the bulk kernel's warps)
// and rows off the 128-row blocks. The conformance suite checks the
// default kernels against kernels/ref and against each other (batch
// invariance across T = 1, 9, 32, 33).
func TestGemvKernels(t *testing.T) {
	d := openOrSkip(t)
	if d.Major < 9 {
		t.Skipf("lb_mma_gemv_wide and lb_mma_gemv_bulk need sm_90; %s", d.Arch)
	}
	defer func(from, groups, warps, ring int) {
		mmaWideFrom, mmaBulkGroups, mmaBulkWarps, mmaBulkRing = from, groups, warps, ring
	}(mmaWideFrom, mmaBulkGroups, mmaBulkWarps, mmaBulkRing)
	rng := rand.New(rand.NewPCG(7, 9))
	const guard = 64 // floats past T·out that neither kernel may write
	for _, c := range []struct {
		outs []int
		in   int
	}{
		{[]int{48}, 16}, {[]int{19}, 33}, {[]int{200, 72, 300}, 1040}, {[]int{1, 17, 129}, 2320},
		{[]int{130, 260}, 4112}, {[]int{4096, 1024, 1024}, 4096}, {[]int{384}, 12288},
	} {
		dws, ys := gemvWeights(t, d, rng, c.outs, c.in, guard)
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
		run := func(T, from, groups, warps, ring int) [][]byte {
			mmaWideFrom, mmaBulkGroups, mmaBulkWarps, mmaBulkRing = from, groups, warps, ring
			return poisonedRun(t, d, ys, func(k *K) error { return k.MatMulShared(xd, T, ys, dws) })
		}
		for T := 1; T <= mmaGemvTokens; T++ {
			old := run(T, mmaGemvTokens+1, 0, 0, 0)
			// lb_mma_gemv_bulk with blocks of 8, 5 (spans split unevenly)
			// and 4 warps, rings of 1 and 2, varying with T.
			for _, v := range []struct {
				kernel                    string
				from, groups, warps, ring int
			}{
				{"lb_mma_gemv_wide", 1, 0, 0, 0},
				{"lb_mma_gemv_bulk", mmaGemvTokens + 1, mmaGemvTokens / 8, 8, 1 + T%2},
				{"lb_mma_gemv_bulk", mmaGemvTokens + 1, mmaGemvTokens / 8, 5, 1 + (T+1)%2},
				{"lb_mma_gemv_bulk", mmaGemvTokens + 1, mmaGemvTokens / 8, 4, 1 + T%2},
			} {
				got := run(T, v.from, v.groups, v.warps, v.ring)
				for i, out := range c.outs {
					name := fmt.Sprintf("outs=%v/in=%d/T=%d/weight %d", c.outs, c.in, T, i)
					if bytes.Equal(old[i], got[i]) {
						continue
					}
					for e := 0; e < len(old[i])/4; e++ {
						o, w := binary.LittleEndian.Uint32(old[i][4*e:]), binary.LittleEndian.Uint32(got[i][4*e:])
						if o != w {
							t.Errorf("%s: y[t=%d,o=%d] = %#08x (%v) from %s (%d warps, ring %d), %#08x (%v) from lb_mma_gemv",
								name, e/out, e%out, w, math.Float32frombits(w), v.kernel, v.warps, v.ring, o, math.Float32frombits(o))
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

// TestBulkFirstLaunch48K: a device's first launch of lb_mma_gemv_bulk may
// take exactly 48 KB of dynamic shared memory beside its static mbarriers
// (16 tokens on Qwen3-8B's packed q, k and v: blocks of 4 warps, two token
// groups), which the driver refuses unless launch raises the kernel's
// limit first; it once failed there with CUDA_ERROR_INVALID_VALUE.
func TestBulkFirstLaunch48K(t *testing.T) {
	d := openOrSkip(t) // a fresh module: no limit raised yet
	if d.Major < 9 {
		t.Skipf("lb_mma_gemv_bulk needs sm_90; %s", d.Arch)
	}
	defer func(g, w, r int) { mmaBulkGroups, mmaBulkWarps, mmaBulkRing = g, w, r }(mmaBulkGroups, mmaBulkWarps, mmaBulkRing)
	mmaBulkGroups, mmaBulkWarps, mmaBulkRing = 2, 4, 1
	const in, T = 4096, 16
	if shared := 4*mmaSpan*512 + (in/16/mmaSpan)*2*512; shared != 48<<10 {
		t.Fatalf("the case takes %d bytes of dynamic shared memory, not 48 KB", shared)
	}
	outs := []int{4096, 1024, 1024}
	var ws []*Weight
	var ys []Buf
	for _, out := range outs {
		w, err := d.UploadWeight(&kernels.Weight{Format: kernels.WeightBF16, Out: out, In: in, Data: make([]byte, 2*out*in), Act: kernels.ActNone})
		if err != nil {
			t.Fatal(err)
		}
		y, err := d.Alloc(4 * T * out)
		if err != nil {
			t.Fatal(err)
		}
		ws, ys = append(ws, w), append(ys, y)
	}
	x, err := d.Alloc(4 * T * in)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Run(func(k *K) error { return k.MatMulShared(x, T, ys, ws) }); err != nil {
		t.Fatal(err)
	}
}

// TestBulkShape: lb_mma_gemv_bulk's block has mmaBulkWarps warps (by
// default 8, or 4 where that keeps the grid to one wave) but no more than
// the input's spans, and its ring no more spans than a warp takes nor than
// the kernel's bound. Runs without a GPU.
func TestBulkShape(t *testing.T) {
	defer func(w, r int) { mmaBulkWarps, mmaBulkRing = w, r }(mmaBulkWarps, mmaBulkRing)
	const sms = 132
	for _, c := range []struct{ setWarps, setRing, spans, blocks, warps, ring int }{
		{0, 1, 16, 256, 8, 1},  // 4096 × 4096: one wave of 8-warp blocks
		{0, 1, 16, 384, 4, 1},  // q, k, v of Qwen3-8B: one wave of 4-warp blocks
		{0, 1, 16, 1536, 8, 1}, // gate and up: many waves either way
		{0, 1, 48, 256, 8, 1},  // in = 12288
		{0, 1, 4, 192, 4, 1},   // in = 1024 (Qwen3-0.6B): a span a warp
		{0, 1, 1, 10, 1, 1},    // in ≤ 256
		{8, 1, 16, 384, 8, 1},
		{8, 2, 16, 256, 8, 2},
		{8, 2, 8, 256, 8, 1}, // one span a warp
		{4, 2, 12, 256, 4, 2},
		{16, 3, 64, 256, mmaBulkWarpsMax, mmaBulkRingMax},
	} {
		mmaBulkWarps, mmaBulkRing = c.setWarps, c.setRing
		if w, r := bulkShape(c.spans, c.blocks, sms); w != c.warps || r != c.ring {
			t.Errorf("bulkShape(%d spans, %d blocks) with %d warps, ring %d = %d warps, ring %d; want %d, %d",
				c.spans, c.blocks, c.setWarps, c.setRing, w, r, c.warps, c.ring)
		}
	}
	src := kernelSource(t)
	for name, v := range map[string]int{"MMA_BULK_WARPS": mmaBulkWarpsMax, "MMA_BULK_RING_MAX": mmaBulkRingMax} {
		if !strings.Contains(src, fmt.Sprintf("#define %s %d\n", name, v)) {
			t.Errorf("matmul_mma_bulk.cu does not define %s as %d", name, v)
		}
	}
}

// gemvWeights uploads random BF16 weights [out, in] for each of outs
// (normal, σ 0.05) and allocates an output for each of mmaGemvTokens rows
// and guard floats more.
func gemvWeights(t *testing.T, d *Device, rng *rand.Rand, outs []int, in, guard int) ([]*Weight, []Buf) {
	t.Helper()
	var dws []*Weight
	var ys []Buf
	for _, out := range outs {
		data := make([]byte, 2*out*in)
		for i := 0; i < out*in; i++ {
			binary.LittleEndian.PutUint16(data[2*i:], format.BF16FromFloat32(float32(rng.NormFloat64()*0.05)))
		}
		dw, err := d.UploadWeight(&kernels.Weight{Format: kernels.WeightBF16, Out: out, In: in, Data: data, Act: kernels.ActNone})
		if err != nil {
			t.Fatal(err)
		}
		y, err := d.Alloc(4 * (mmaGemvTokens*out + guard))
		if err != nil {
			t.Fatal(err)
		}
		dws, ys = append(dws, dw), append(ys, y)
	}
	return dws, ys
}

// poisonedRun poisons the outputs ys, runs f and returns what ys then hold.
func poisonedRun(t *testing.T, d *Device, ys []Buf, f func(k *K) error) [][]byte {
	t.Helper()
	err := d.Run(func(k *K) error {
		for _, y := range ys {
			if err := k.Poison(y); err != nil {
				return err
			}
		}
		return f(k)
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

// kernelSource returns the kernels' CUDA source.
func kernelSource(t *testing.T) string {
	src, err := Source()
	if err != nil {
		t.Fatal(err)
	}
	return src
}
