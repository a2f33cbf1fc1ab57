//go:build cgo

package cuda

import (
	"bytes"
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/lowbit-ai/lowbit/format"
	"github.com/lowbit-ai/lowbit/kernels"
)

// TestGemvBF16Terms: BF16 activations (Terms of one term). MatMulSharedBF16
// of x gives, bit for bit, MatMulShared (the three-term kernels) of x
// rounded to the nearest BF16 on the host, for T = 1 to 32: on
// lb_mma_gemv_bulk1 in blocks of 8, 5 and 4 warps and rings of 1 and 2, and
// on the three-term kernels reading the one-term buffer (mmaBulk1Groups 0),
// whose mid and lo terms must be zeros. So the one-term path computes
// exactly the float32-activation contract on BF16-rounded inputs.
func TestGemvBF16Terms(t *testing.T) {
	d := openOrSkip(t)
	defer func(groups, warps, ring int) {
		mmaBulk1Groups, mmaBulkWarps, mmaBulkRing = groups, warps, ring
	}(mmaBulk1Groups, mmaBulkWarps, mmaBulkRing)
	rng := rand.New(rand.NewPCG(11, 13))
	for _, c := range []struct {
		outs []int
		in   int
	}{
		{[]int{19}, 33}, {[]int{200, 72, 300}, 1040}, {[]int{4096, 1024, 1024}, 4096}, {[]int{384}, 12288},
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
			y, err := d.Alloc(4 * mmaGemvTokens * out)
			if err != nil {
				t.Fatal(err)
			}
			dws, ys = append(dws, dw), append(ys, y)
		}
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
			err := d.Run(func(k *K) error {
				for _, y := range ys {
					if err := k.Poison(y); err != nil {
						return err
					}
				}
				if bf16 {
					return k.MatMulSharedBF16(xin, T, ys, dws)
				}
				return k.MatMulShared(xin, T, ys, dws)
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
			mmaBulk1Groups, mmaBulkWarps, mmaBulkRing = 0, 0, 1
			want := run(xbd, T, false)
			for _, v := range []struct {
				name                string
				groups, warps, ring int
			}{
				{"three-term kernels on one term", 0, 0, 1},
				{"lb_mma_gemv_bulk1, 8 warps", mmaGemvTokens / 8, 8, 1 + T%2},
				{"lb_mma_gemv_bulk1, 5 warps", mmaGemvTokens / 8, 5, 1 + (T+1)%2},
				{"lb_mma_gemv_bulk1, 4 warps", mmaGemvTokens / 8, 4, 1 + T%2},
				{"lb_mma_gemv_bulk1, default shape", mmaGemvTokens / 8, 0, 1},
			} {
				if d.Major < 9 && v.groups > 0 {
					continue
				}
				mmaBulk1Groups, mmaBulkWarps, mmaBulkRing = v.groups, v.warps, v.ring
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
	vals := func(n int, scale float64) Buf {
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
		return b
	}
	x, w, gate, up := vals(T*D, 3), vals(D, 1), vals(T*D, 2), vals(T*D, 1)
	defer func() {
		for _, b := range []Buf{x, w, gate, up} {
			d.Free(b)
		}
	}()
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
		// (group, chunk) blocks of 3 terms × 32 lanes × 8 bytes.
		bad := 0
		for blk := 0; blk < len(f32)/768 && bad < 3; blk++ {
			hi := blk * 768
			if !bytes.Equal(f32[hi:hi+256], b16[hi:hi+256]) {
				t.Errorf("%s: block %d: the BF16 hi term differs from the float32 terms' hi", p.name, blk)
				bad++
			}
			if !bytes.Equal(b16[hi+256:hi+768], make([]byte, 512)) {
				t.Errorf("%s: block %d: the BF16 terms' mid and lo are not zeros", p.name, blk)
				bad++
			}
		}
		if bad == 0 {
			t.Logf("%s: %d blocks of terms checked", p.name, len(f32)/768)
		}
	}
}
