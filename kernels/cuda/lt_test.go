//go:build cgo

package cuda

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/lowbit-ai/lowbit/format"
)

// ltCase uploads a random BF16 weight [out, in] (its Rows only) and x
// [T, in] float32; it returns them with the host values.
func ltCase(t *testing.T, d *Device, out, in, T int, seed uint64) (*Weight, Buf, []uint16, []float32) {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 1))
	w := make([]uint16, out*in)
	for i := range w {
		w[i] = format.BF16FromFloat32(float32(rng.NormFloat64() * 0.05))
	}
	x := make([]float32, T*in)
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	rows, err := d.Alloc(RowsBytes(out, in))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Free(rows) })
	wb := make([]byte, 2*len(w))
	for i, v := range w {
		binary.LittleEndian.PutUint16(wb[2*i:], v)
	}
	if err := d.Upload(rows, wb); err != nil {
		t.Fatal(err)
	}
	xd, err := d.Alloc(4 * len(x))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Free(xd) })
	if err := d.Upload(xd, asBytes(x, len(x))); err != nil {
		t.Fatal(err)
	}
	return &Weight{Out: out, In: in, Rows: rows}, xd, w, x
}

// ltRun converts x's T rows to BF16 and runs MatMulLt; it returns y's bytes.
func ltRun(t *testing.T, d *Device, w *Weight, x Buf, T int) []byte {
	t.Helper()
	xb, err := d.Alloc(2 * T * w.In)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Free(xb)
	y, err := d.Alloc(4 * T * w.Out)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Free(y)
	err = d.Run(func(k *K) error {
		if err := k.Poison(y); err != nil {
			return err
		}
		if err := k.ToBF16(xb, x, T*w.In); err != nil {
			return err
		}
		return k.MatMulLt(y, xb, T, w)
	})
	if errors.Is(err, ErrNoCuBLASLt) {
		t.Skipf("no cuBLASLt: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 4*T*w.Out)
	if err := d.Download(got, y); err != nil {
		t.Fatal(err)
	}
	return got
}

// TestMatMulLt: every output against the float64 sum of BF16(x)·w, within
// the worst case of float32 summation in any order: in·2⁻²⁴·Σ|x·w| (each
// product is exact in float32; each of the in − 1 additions rounds by at
// most 2⁻²⁴ of a partial sum bounded by Σ|x·w|). A transposed operand or a
// wrong leading dimension misses by orders of magnitude more.
func TestMatMulLt(t *testing.T) {
	d := openOrSkip(t)
	for _, c := range []struct{ out, in, T int }{{64, 64, 1}, {256, 512, 37}, {1024, 384, 300}, {200, 136, 5}} {
		w, x, wh, xh := ltCase(t, d, c.out, c.in, c.T, uint64(c.out*c.in+c.T))
		got := ltRun(t, d, w, x, c.T)
		bad := 0
		for tk := range c.T {
			for o := range c.out {
				var sum, abs float64
				for i := range c.in {
					xv := float64(format.BF16ToFloat32(format.BF16FromFloat32(xh[tk*c.in+i])))
					p := xv * float64(format.BF16ToFloat32(wh[o*c.in+i]))
					sum += p
					abs += math.Abs(p)
				}
				v := float64(math.Float32frombits(binary.LittleEndian.Uint32(got[4*(tk*c.out+o):])))
				if math.Abs(v-sum) > float64(c.in)*0x1p-24*abs || math.IsNaN(v) {
					if bad++; bad <= 5 {
						t.Errorf("%dx%d T=%d: y[%d,%d] = %g, want %g (Σ|x·w| %g)", c.out, c.in, c.T, tk, o, v, sum, abs)
					}
				}
			}
		}
	}
}

// TestMatMulLtRows: a row's result has the same bits whatever the number
// of rows beside it (the algorithm is pinned per weight shape).
func TestMatMulLtRows(t *testing.T) {
	d := openOrSkip(t)
	const out, in, T = 1024, 1024, 700
	w, x, _, _ := ltCase(t, d, out, in, T, 7)
	all := ltRun(t, d, w, x, T)
	for _, n := range []int{1, 2, 7, 64, 129, 511} {
		part := ltRun(t, d, w, x, n)
		if !bytes.Equal(part, all[:4*n*out]) {
			t.Errorf("the first %d rows alone differ from the same rows among %d", n, T)
		}
	}
}

// TestBF16Producers: AddRMSNormBF16 and SiLUMulBF16 give, for their first
// nb rows, the bits ToBF16 makes of AddRMSNorm's and SiLUMul's float32
// output, and for the rest (and the residual) that output's own bits.
func TestBF16Producers(t *testing.T) {
	d := openOrSkip(t)
	const T, D = 37, 1000
	rng := rand.New(rand.NewPCG(3, 4))
	vals := func(n int, s float64) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(rng.NormFloat64() * s)
		}
		return v
	}
	buf := func(v []float32) Buf {
		b, err := d.Alloc(4 * len(v))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Free(b) })
		if err := d.Upload(b, asBytes(v, len(v))); err != nil {
			t.Fatal(err)
		}
		return b
	}
	get := func(b Buf, n int) []byte {
		out := make([]byte, n)
		if err := d.Download(out, b); err != nil {
			t.Fatal(err)
		}
		return out
	}
	x0, gate := vals(T*D, 1), vals(T*D, 3)
	h, w, up := buf(vals(T*D, 1)), buf(vals(D, 0.5)), buf(vals(T*D, 1))
	for _, nb := range []int{0, 1, 16, T} {
		for _, zc := range []bool{false, true} {
			// The reference: float32 outputs, then ToBF16 of the first nb rows.
			xr, yr, ybr := buf(x0), buf(make([]float32, T*D)), buf(make([]float32, T*D))
			xf, yf := buf(x0), buf(make([]float32, T*D))
			yb := buf(make([]float32, T*D))
			gr, gbr, gf, gbf := buf(gate), buf(make([]float32, T*D)), buf(gate), buf(make([]float32, T*D))
			err := d.Run(func(k *K) error {
				if err := k.AddRMSNorm(xr, h, yr, w, T, D, 1e-6, zc); err != nil {
					return err
				}
				if nb > 0 { // ToBF16 of nothing is no launch
					if err := k.ToBF16(ybr, yr, nb*D); err != nil {
						return err
					}
				}
				if err := k.AddRMSNormBF16(xf, h, yf, yb, w, T, D, nb, 1e-6, zc); err != nil {
					return err
				}
				if err := k.SiLUMul(gr, gr, up, T*D); err != nil {
					return err
				}
				if nb > 0 { // ToBF16 of nothing is no launch
					if err := k.ToBF16(gbr, gr, nb*D); err != nil {
						return err
					}
				}
				return k.SiLUMulBF16(gf, gbf, gf, up, T*D, nb*D)
			})
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range []struct {
				what      string
				got, want Buf
				from, n   int // bytes
			}{
				{"norm BF16 rows", yb, ybr, 0, 2 * nb * D},
				{"norm float32 rows", yf, yr, 4 * nb * D, 4 * T * D},
				{"residual", xf, xr, 0, 4 * T * D},
				{"silu BF16 rows", gbf, gbr, 0, 2 * nb * D},
				{"silu float32 rows", gf, gr, 4 * nb * D, 4 * T * D},
			} {
				if g, want := get(c.got, 4*T*D)[c.from:c.n], get(c.want, 4*T*D)[c.from:c.n]; !bytes.Equal(g, want) {
					t.Errorf("nb=%d zero-centered=%v: %s differ from the float32 kernel's (then ToBF16)", nb, zc, c.what)
				}
			}
		}
	}
}
