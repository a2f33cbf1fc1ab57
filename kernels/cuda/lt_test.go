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
