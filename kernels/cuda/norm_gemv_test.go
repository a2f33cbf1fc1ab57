//go:build cgo

package cuda

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"
)

// TestNormInGemv: MatMulNorm (lb_mma_gemv_bulk1_norm, each block
// normalizing its input rows) gives the bits of RMSNormTerms into BF16
// terms then MatMulTerms, and MatMulNormSiLU also those of SiLUMulTerms
// after; for 1 to 4 tokens, one and three weights a launch, blocks of 4
// and 5 and 8 warps, widths on and off the 16-column chunks, plain and
// zero-centered gains. Five tokens are declined. Skips without a GPU.
func TestNormInGemv(t *testing.T) {
	d := openOrSkip(t)
	if d.Major < 9 {
		t.Skipf("lb_mma_gemv_bulk1_norm needs sm_90; %s", d.Arch)
	}
	rng := rand.New(rand.NewPCG(41, 43))
	download := func(b Buf) []byte {
		out := make([]byte, b.Bytes())
		if err := d.Download(out, b); err != nil {
			t.Fatal(err)
		}
		return out
	}
	for _, c := range []struct {
		T, D int
		outs []int
		silu bool
	}{
		{1, 4096, []int{4096, 1024, 1024}, false}, // 384 row tiles: blocks of 4 warps
		{4, 4096, []int{4096}, false},
		{2, 1040, []int{1000, 200}, false},
		{1, 4096, []int{12288, 12288}, true},
		{3, 1024, []int{3072, 3072}, true},
		{5, 1024, []int{1024}, false},
	} {
		for _, zc := range []bool{false, true} {
			what := fmt.Sprintf("%d tokens, width %d, outputs %v, zero-centered %v", c.T, c.D, c.outs, zc)
			ws, _ := gemvWeights(t, d, rng, c.outs, c.D, 0)
			x, gains := normalBuf(t, d, rng, c.T*c.D, 3), normalBuf(t, d, rng, c.D, 1)
			var fused, want []Buf
			for _, out := range c.outs {
				fused = append(fused, normalBuf(t, d, rng, c.T*out, 0))
				want = append(want, normalBuf(t, d, rng, c.T*out, 0))
			}
			n := Norm{X: x, W: gains, T: c.T, D: c.D, Eps: 1e-6, ZeroCentered: zc}
			nc := (c.outs[0] + 15) / 16 // the SiLU terms' column chunks
			size := (c.T + 7) / 8 * nc * 3 * 32 * 8
			own, err := d.Alloc(size)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { d.Free(own) })
			var silu Terms
			var ok bool
			err = d.Run(func(k *K) error {
				var err error
				if c.silu {
					silu, ok, err = k.MatMulNormSiLU(n, fused[0], fused[1], ws[0], ws[1])
				} else {
					ok, err = k.MatMulNorm(n, fused, ws)
				}
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
			if ok != (c.T <= mmaNormTokens) {
				t.Errorf("%s: fused %v", what, ok)
			}
			if !ok {
				continue
			}
			err = d.Run(func(k *K) error {
				tm, err := k.termsFor(c.T, c.D, 1)
				if err != nil {
					return err
				}
				if err := k.RMSNormTerms(x, tm, gains, c.D, 1e-6, zc); err != nil {
					return err
				}
				if err := k.MatMulTerms(tm, want, ws); err != nil {
					return err
				}
				if !c.silu {
					return nil
				}
				return k.SiLUMulTerms(Terms{own, c.T, c.outs[0], (c.T + 7) / 8, 1}, want[0], want[1], c.outs[0])
			})
			if err != nil {
				t.Fatal(err)
			}
			for i := range c.outs {
				if got, want := download(fused[i]), download(want[i]); !bytes.Equal(got, want) {
					t.Errorf("%s: output %d differs from RMSNormTerms then MatMulTerms (%s)", what, i, firstDiff(got, want))
				}
			}
			if c.silu {
				compareTerms(t, what+": the SiLU terms against SiLUMulTerms's", download(silu.buf.Slice(0, size)), download(own), nc, c.T)
			}
		}
	}
}
