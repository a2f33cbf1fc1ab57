//go:build cgo

package cuda

import (
	"bytes"
	"math/rand/v2"
	"testing"
)

// TestResidualInGemv: a decode step's fused residual path gives the bits
// of the unfused one: MatMulTermsAdd (lb_mma_gemv_bulk with acc: y +=
// w·x) those of MatMulTerms into h then Add, and RMSNormTerms (each row
// over several blocks) those of AddRMSNormTerms without h, for one and
// three terms, token counts the bulk GEMV takes, and widths on and off the
// 16-column chunks. Skips without a GPU.
func TestResidualInGemv(t *testing.T) {
	d := openOrSkip(t)
	rng := rand.New(rand.NewPCG(23, 29))
	upload := func(n int, scale float64) Buf { return normalBuf(t, d, rng, n, scale) }
	download := func(b Buf) []byte {
		out := make([]byte, b.Bytes())
		if err := d.Download(out, b); err != nil {
			t.Fatal(err)
		}
		return out
	}
	for _, c := range []struct{ T, out, in int }{{1, 4096, 4096}, {1, 1024, 3072}, {3, 1000, 1040}, {8, 4096, 12288}} {
		for _, nt := range []int{1, 3} {
			ws, _ := gemvWeights(t, d, rng, []int{c.out}, c.in, 0)
			x, resid := upload(c.T*c.in, 1), upload(c.T*c.out, 2)
			h, y := upload(c.T*c.out, 0), upload(c.T*c.out, 0)
			var added bool
			err := d.Run(func(k *K) error {
				tm, err := k.termsFor(c.T, c.in, nt)
				if err != nil {
					return err
				}
				if err := k.Split(tm, x); err != nil {
					return err
				}
				// The unfused path: h = w·x, y = resid + h; then the fused: resid += w·x.
				if err := k.MatMulTerms(tm, []Buf{h}, ws); err != nil {
					return err
				}
				if err := k.Add(y, resid, h, c.T*c.out); err != nil {
					return err
				}
				if err := spinBefore(k); err != nil {
					return err
				}
				added, err = k.MatMulTermsAdd(tm, resid, ws[0], Buf{})
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
			if !added {
				t.Errorf("%d tokens, %dx%d, %d terms: MatMulTermsAdd did not run", c.T, c.out, c.in, nt)
				continue
			}
			if got, want := download(resid), download(y); !bytes.Equal(got, want) {
				t.Errorf("%d tokens, %dx%d, %d terms: y += w·x differs from Add after MatMulTerms (%s)", c.T, c.out, c.in, nt, firstDiff(got, want))
			}
			// The norm of the new residual, both ways.
			w := upload(c.out, 1)
			norm := func(slices bool) []byte {
				var tm Terms
				err := d.Run(func(k *K) error {
					var err error
					if tm, err = k.termsFor(c.T, c.out, nt); err != nil {
						return err
					}
					if err := k.Poison(tm.buf); err != nil {
						return err
					}
					if slices {
						return k.RMSNormTerms(resid, tm, w, c.out, 1e-6, false)
					}
					return k.AddRMSNormTerms(resid, Buf{}, tm, w, c.out, 1e-6, false)
				})
				if err != nil {
					t.Fatal(err)
				}
				return download(tm.buf.Slice(0, tm.groups*((c.out+15)/16)*3*32*8))
			}
			got, want := norm(true), norm(false)
			// (group, chunk) blocks of 3 terms × 32 lanes × 8 bytes; lanes of
			// tokens past T are written by neither.
			nc, bad := (c.out+15)/16, 0
			for blk := 0; blk < len(want)/768 && bad < 3; blk++ {
				for lane := range 32 {
					if 8*(blk/nc)+lane/4 >= c.T {
						continue
					}
					for term := range 3 {
						at := blk*768 + term*256 + lane*8
						if !bytes.Equal(got[at:at+8], want[at:at+8]) {
							t.Errorf("%d tokens, width %d, %d terms: RMSNormTerms differs from AddRMSNormTerms at block %d, lane %d, term %d",
								c.T, c.out, nt, blk, lane, term)
							bad++
						}
					}
				}
			}
		}
	}
}

// normalBuf uploads n float32s drawn from N(0, scale²), freed when the
// test ends.
func normalBuf(t *testing.T, d *Device, rng *rand.Rand, n int, scale float64) Buf {
	t.Helper()
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(rng.NormFloat64() * scale)
	}
	b, err := d.Alloc(4 * n)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Upload(b, asBytes(v, n)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Free(b) })
	return b
}
