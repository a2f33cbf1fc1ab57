//go:build cgo

package cuda

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/lowbit-ai/lowbit/format"
)

// TestGemvBF16Terms: BF16 activations (Terms of one term). MatMulSharedBF16
// of x gives, bit for bit, MatMulShared (the three-term kernels) of x
// rounded to the nearest BF16 on the host, for T = 1 to 32: on
// lb_mma_gemv_bulk1 in blocks of 8, 5 and 4 warps and rings of 1 and 2, and
// on lb_mma_gemv_tiles1 (2 and 4 row tiles a block; warps as many as fit,
// or 3: the spans split unevenly; rings of 1 and 2), and on the three-term
// kernels reading the one-term buffer (mmaBulk1Groups 0), whose mid and lo
// terms must be zeros. So the one-term path computes exactly the
// float32-activation contract on BF16-rounded inputs.
func TestGemvBF16Terms(t *testing.T) {
	d := openOrSkip(t)
	defer func(groups, warps, ring, from, spans, mt, tw, tr int) {
		mmaBulk1Groups, mmaBulkWarps, mmaBulkRing = groups, warps, ring
		mmaTiles1From, mmaTiles1Spans, mmaTiles1MT, mmaTiles1Warps, mmaTiles1Ring = from, spans, mt, tw, tr
	}(mmaBulk1Groups, mmaBulkWarps, mmaBulkRing, mmaTiles1From, mmaTiles1Spans, mmaTiles1MT, mmaTiles1Warps, mmaTiles1Ring)
	mmaTiles1Spans = 0
	rng := rand.New(rand.NewPCG(11, 13))
	for _, c := range []struct {
		outs []int
		in   int
	}{
		{[]int{19}, 33}, {[]int{200, 72, 300}, 1040}, {[]int{4096, 1024, 1024}, 4096}, {[]int{384}, 12288},
	} {
		dws, ys := gemvWeights(t, d, rng, c.outs, c.in, 0)
		x, xb := make([]float32, mmaGemvTokens*c.in), make([]float32, mmaGemvTokens*c.in)
		for tk := range mmaGemvTokens {
			mag := math.Exp2(float64(rng.IntN(13) - 6))
			for i := range c.in {
				v := float32(rng.NormFloat64() * mag)
				if rng.IntN(64) == 0 {
					v = 0
				}
				x[tk*c.in+i] = v
				xb[tk*c.in+i] = format.BF16ToFloat32(format.BF16FromFloat32(v))
			}
		}
		upload := func(v []float32) Buf {
			b, err := d.Alloc(4 * len(v))
			if err != nil {
				t.Fatal(err)
			}
			if err := d.Upload(b, asBytes(v, len(v))); err != nil {
				t.Fatal(err)
			}
			return b
		}
		xd, xbd := upload(x), upload(xb)
		run := func(xin Buf, T int, bf16 bool) [][]byte {
			return poisonedRun(t, d, ys, func(k *K) error {
				if bf16 {
					return k.MatMulSharedBF16(xin, T, ys, dws)
				}
				return k.MatMulShared(xin, T, ys, dws)
			})
		}
		never := mmaGemvTokens + 1
		for T := 1; T <= mmaGemvTokens; T++ {
			mmaBulk1Groups, mmaBulkWarps, mmaBulkRing, mmaTiles1From = 0, 0, 1, never
			want := run(xbd, T, false)
			for _, v := range []struct {
				name                string
				groups, warps, ring int
				from, mt            int // lb_mma_gemv_tiles1 from T = from, mt tiles a block
			}{
				{"three-term kernels on one term", 0, 0, 1, never, 2},
				{"lb_mma_gemv_bulk1, 8 warps", mmaGemvTokens / 8, 8, 1 + T%2, never, 2},
				{"lb_mma_gemv_bulk1, 5 warps", mmaGemvTokens / 8, 5, 1 + (T+1)%2, never, 2},
				{"lb_mma_gemv_bulk1, 4 warps", mmaGemvTokens / 8, 4, 1 + T%2, never, 2},
				{"lb_mma_gemv_bulk1, default shape", mmaGemvTokens / 8, 0, 1, never, 2},
				{"lb_mma_gemv_tiles1_m2, warps that fit", 0, 0, 1 + T%2, 1, 2},
				{"lb_mma_gemv_tiles1_m2, 3 warps", 0, 3, 1 + (T+1)%2, 1, 2},
				{"lb_mma_gemv_tiles1_m4, warps that fit", 0, 0, 1 + (T+1)%2, 1, 4},
				{"lb_mma_gemv_tiles1_m4, 3 warps", 0, 3, 1 + T%2, 1, 4},
			} {
				if d.Major < 9 && (v.groups > 0 || v.from <= mmaGemvTokens) {
					continue
				}
				mmaBulk1Groups, mmaBulkWarps, mmaBulkRing = v.groups, v.warps, v.ring
				mmaTiles1From, mmaTiles1MT, mmaTiles1Warps, mmaTiles1Ring = v.from, v.mt, v.warps, v.ring
				got := run(xd, T, true)
				for i, out := range c.outs {
					if bytes.Equal(want[i][:4*T*out], got[i][:4*T*out]) {
						continue
					}
					for e := 0; e < T*out; e++ {
						o, w := binary.LittleEndian.Uint32(want[i][4*e:]), binary.LittleEndian.Uint32(got[i][4*e:])
						if o != w {
							t.Errorf("outs=%v/in=%d/T=%d/weight %d: y[t=%d,o=%d] = %#08x (%v) from %s (ring %d), %#08x (%v) from the three-term kernels on BF16-rounded x",
								c.outs, c.in, T, i, e/out, e%out, w, math.Float32frombits(w), v.name, v.ring, o, math.Float32frombits(o))
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
		d.Free(xbd)
	}
}

// TestTermsBF16Producers: AddRMSNormTerms, SiLUMulTerms and Split into
// BF16 terms write each value's hi term as they write it into float32
// terms (the round to nearest BF16) and zeros for mid and lo.
func TestTermsBF16Producers(t *testing.T) {
	d := openOrSkip(t)
	rng := rand.New(rand.NewPCG(17, 19))
	const T, D = 11, 1000 // D off the 16-column chunks: padding columns too
	vals := func(n int, scale float64) Buf { return normalBuf(t, d, rng, n, scale) }
	x, w, gate, up := vals(T*D, 3), vals(D, 1), vals(T*D, 2), vals(T*D, 1)
	for _, p := range []struct {
		name    string
		produce func(k *K, tm Terms) error
	}{
		{"AddRMSNormTerms", func(k *K, tm Terms) error { return k.AddRMSNormTerms(x, Buf{}, tm, w, D, 1e-6, false) }},
		{"SiLUMulTerms", func(k *K, tm Terms) error { return k.SiLUMulTerms(tm, gate, up, D) }},
		{"Split", func(k *K, tm Terms) error { return k.Split(tm, up) }},
	} {
		terms := func(bf16 bool) []byte {
			var tm Terms
			err := d.Run(func(k *K) error {
				var err error
				if tm, err = k.TermsFor(T, D); bf16 {
					tm, err = k.TermsBF16For(T, D)
				}
				if err != nil {
					return err
				}
				if err := k.Poison(tm.buf); err != nil {
					return err
				}
				return p.produce(k, tm)
			})
			if err != nil {
				t.Fatal(err)
			}
			out := make([]byte, tm.groups*((D+15)/16)*3*32*8)
			if err := d.Download(out, tm.buf.Slice(0, len(out))); err != nil {
				t.Fatal(err)
			}
			return out
		}
		f32, b16 := terms(false), terms(true)
		// (group, chunk) blocks of 3 terms × 32 lanes × 8 bytes; lane 4g + q
		// of group n holds token 8n + g (past T: not written by every
		// producer, and read by no kernel).
		nc, bad := (D+15)/16, 0
		for blk := 0; blk < len(f32)/768 && bad < 3; blk++ {
			for lane := range 32 {
				if 8*(blk/nc)+lane/4 >= T {
					continue
				}
				at := func(term int) int { return blk*768 + term*256 + lane*8 }
				if !bytes.Equal(f32[at(0):at(0)+8], b16[at(0):at(0)+8]) {
					t.Errorf("%s: block %d, lane %d: the BF16 hi term differs from the float32 terms' hi", p.name, blk, lane)
					bad++
				}
				if !bytes.Equal(b16[at(1):at(1)+8], make([]byte, 8)) || !bytes.Equal(b16[at(2):at(2)+8], make([]byte, 8)) {
					t.Errorf("%s: block %d, lane %d: the BF16 terms' mid and lo are not zeros", p.name, blk, lane)
					bad++
				}
			}
		}
		if bad == 0 {
			t.Logf("%s: %d blocks of terms checked", p.name, len(f32)/768)
		}
	}
}

// TestGemvSiLU: lb_mma_gemv_bulk1_silu (MatMulSiLUTerms) writes the bits
// of MatMulTerms into gate and up followed by SiLUMulTerms, for 1 to 8
// tokens, inputs of one to several spans, and outputs on and off the
// 16-row tiles; with more than 8 tokens it declines. Skips without a GPU.
func TestGemvSiLU(t *testing.T) {
	d := openOrSkip(t)
	rng := rand.New(rand.NewPCG(47, 53))
	for _, c := range []struct{ T, out, in int }{{1, 3072, 1024}, {1, 1000, 4096}, {3, 512, 272}, {8, 2048, 12288}, {5, 24, 64}} {
		ws, _ := gemvWeights(t, d, rng, []int{c.out, c.out}, c.in, 0)
		x := normalBuf(t, d, rng, c.T*c.in, 1)
		g, u := normalBuf(t, d, rng, c.T*c.out, 0), normalBuf(t, d, rng, c.T*c.out, 0)
		// terms runs the fused or the unfused path from x and returns the
		// down projection's input terms.
		terms := func(fused bool) []byte {
			var out Terms
			err := d.Run(func(k *K) error {
				in, err := k.TermsBF16For(c.T, c.in)
				if err != nil {
					return err
				}
				if err := k.Split(in, x); err != nil {
					return err
				}
				if fused {
					if out, err = k.SiLUTermsFor(c.T, c.out); err != nil {
						return err
					}
					if err := k.Poison(out.buf); err != nil {
						return err
					}
					// Behind a kernel that outlasts the fused kernel's early
					// copies, as in a decode step (spinBefore).
					if err := spinBefore(k); err != nil {
						return err
					}
					ok, err := k.MatMulSiLUTerms(in, out, ws[0], ws[1])
					if err == nil && !ok {
						err = fmt.Errorf("MatMulSiLUTerms did not run")
					}
					return err
				}
				if err := k.MatMulTerms(in, []Buf{g, u}, ws); err != nil {
					return err
				}
				if out, err = k.TermsBF16For(c.T, c.out); err != nil {
					return err
				}
				if err := k.Poison(out.buf); err != nil {
					return err
				}
				return k.SiLUMulTerms(out, g, u, c.out)
			})
			if err != nil {
				t.Fatalf("%d tokens, %dx%d, fused %v: %v", c.T, c.out, c.in, fused, err)
			}
			b := make([]byte, ((c.out+15)/16)*3*32*8)
			if err := d.Download(b, out.buf.Slice(0, len(b))); err != nil {
				t.Fatal(err)
			}
			return b
		}
		sameSiLUTerms(t, fmt.Sprintf("%d tokens, %dx%d", c.T, c.out, c.in), terms(true), terms(false), c.T)
	}
	ws, _ := gemvWeights(t, d, rng, []int{32, 32}, 64, 0)
	err := d.Run(func(k *K) error {
		in, err := k.TermsBF16For(9, 64)
		if err != nil {
			return err
		}
		out, err := k.SiLUTermsFor(9, 32)
		if err != nil {
			return err
		}
		if ok, err := k.MatMulSiLUTerms(in, out, ws[0], ws[1]); ok || err != nil {
			return fmt.Errorf("9 tokens: MatMulSiLUTerms ran %v, %v; want it to decline", ok, err)
		}
		return nil
	})
	if err != nil {
		t.Error(err)
	}
}

// sameSiLUTerms reports the first few differences between the down
// projection's input terms got (a fused path's) and want, for T tokens:
// (chunk) blocks of 3 terms × 32 lanes × 8 bytes, lane 4g + q holding
// token g (lanes of tokens past T: written by neither).
func sameSiLUTerms(t *testing.T, name string, got, want []byte, T int) {
	t.Helper()
	bad := 0
	for blk := 0; blk < len(want)/768 && bad < 3; blk++ {
		for lane := range 4 * T {
			for term := range 3 {
				at := blk*768 + term*256 + lane*8
				if !bytes.Equal(got[at:at+8], want[at:at+8]) {
					t.Errorf("%s: chunk %d, lane %d, term %d: fused %x, unfused %x", name, blk, lane, term, got[at:at+8], want[at:at+8])
					bad++
				}
			}
		}
	}
}

// TestTiles1Shape: lb_mma_gemv_tiles1's blocks take as many warps as fit a
// block's shared memory (up to 8, no more than the spans) or as asked, and
// say when nothing fits. Runs without a GPU.
func TestTiles1Shape(t *testing.T) {
	for _, c := range []struct {
		mt, warps, ring, groups, spans int
		wantWarps, wantShared          int
		ok                             bool
	}{
		{2, 0, 1, 4, 16, 8, 8*2*8192 + 9*4*2*512, true},
		{2, 0, 2, 4, 16, 6, 6*2*2*8192 + 7*4*2*512, true},
		{4, 0, 1, 4, 48, 5, 5*4*8192 + 6*4*4*512, true},
		{4, 3, 1, 2, 16, 3, 3*4*8192 + 4*2*4*512, true},
		{2, 0, 1, 4, 3, 3, 3*2*8192 + 4*4*2*512, true}, // in ≤ 768: a span a warp
		{4, 8, 2, 4, 16, 8, 8*2*4*8192 + 9*4*4*512, false},
		{3, 0, 1, 4, 16, 0, 0, false},
	} {
		w, sh, ok := tiles1Shape(c.mt, c.warps, c.ring, c.groups, c.spans)
		if w != c.wantWarps || sh != c.wantShared || ok != c.ok {
			t.Errorf("tiles1Shape(mt %d, warps %d, ring %d, groups %d, spans %d) = %d warps, %d bytes, %v; want %d, %d, %v",
				c.mt, c.warps, c.ring, c.groups, c.spans, w, sh, ok, c.wantWarps, c.wantShared, c.ok)
		}
	}
}

// spinBefore launches lb_spin for 30 µs: the kernel launched next becomes
// resident at once and is released only after its early work (weight
// copies, the first span taken into registers, loads of values the kernel
// before does not write) has all landed.
func spinBefore(k *K) error {
	return k.d.launch("lb_spin", [3]int{1, 1, 1}, [3]int{32, 1, 1}, 0, i64Arg(30000))
}
