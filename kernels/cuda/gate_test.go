//go:build cgo

package cuda

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"
)

// TestGemvGates: a decode-like chain (a norm into BF16 terms, then a GEMV
// that adds into the residual, layer after layer: the norms let the next
// GEMV launch early and each GEMV's gate waits for the one before) gives
// the bits of the same chain with the gates off, run eagerly and as a
// replayed graph, and no gate opens on its time limit. A gate whose count
// can never be reached opens on its limit, counted, with the same bits.
// Skips without a GPU; the gates need programmatic dependent launch.
func TestGemvGates(t *testing.T) {
	d := openOrSkip(t)
	if !d.pdl {
		t.Skip("no programmatic dependent launch: the gates are off")
	}
	const D, layers = 2048, 6
	rng := rand.New(rand.NewPCG(31, 37))
	// Layers alternate a one-wave and a several-wave GEMV (32768 rows:
	// 2,048 row tiles), as a step's o and gate-up projections do.
	var ws []*Weight
	for l := range layers {
		out := D
		if l%2 == 1 {
			out = 16 * D
		}
		w, _ := gemvWeights(t, d, rng, []int{out}, D, 0)
		ws = append(ws, w[0])
	}
	x0 := normalBuf(t, d, rng, 16*D, 1)
	x, norm := normalBuf(t, d, rng, 16*D, 0), normalBuf(t, d, rng, D, 1)
	// chain runs the layers on x's first D elements (the several-wave
	// GEMVs add their first D rows' sums, the rest into x's tail); hook,
	// if set, runs before the GEMV of layer 3.
	chain := func(k *K, hook func(k *K)) error {
		if err := k.Copy(x, x0); err != nil {
			return err
		}
		for l, w := range ws {
			tm, err := k.termsFor(1, D, 1)
			if err != nil {
				return err
			}
			if err := k.RMSNormTerms(x, tm, norm, D, 1e-6, false); err != nil {
				return err
			}
			if l == 3 && hook != nil {
				hook(k)
			}
			y := x.F32(0, D)
			if w.Out > D {
				y = x.F32(0, w.Out)
			}
			if ok, err := k.MatMulTermsAdd(tm, y, w); err != nil {
				return err
			} else if !ok {
				return fmt.Errorf("layer %d: MatMulTermsAdd did not run lb_mma_gemv_bulk1", l)
			}
		}
		return nil
	}
	result := func() []byte {
		out := make([]byte, 4*16*D)
		if err := d.Download(out, x); err != nil {
			t.Fatal(err)
		}
		return out
	}
	timeouts := func() int {
		n, err := d.GateTimeouts()
		if err != nil {
			t.Fatal(err)
		}
		return n
	}

	t.Setenv("LOWBIT_GEMV_GATE", "0")
	if err := d.Run(func(k *K) error { return chain(k, nil) }); err != nil {
		t.Fatal(err)
	}
	want := result()
	t.Setenv("LOWBIT_GEMV_GATE", "")
	if err := d.Run(func(k *K) error { return chain(k, nil) }); err != nil {
		t.Fatal(err)
	}
	if got := result(); !bytes.Equal(got, want) {
		t.Fatalf("gated chain, eager: %s", firstDiff(got, want))
	}
	g, err := d.Capture(func(k *K) error { return chain(k, nil) })
	if err != nil {
		t.Fatal(err)
	}
	defer d.Destroy(g)
	for r := range 4 {
		if err := d.Run(func(k *K) error { return k.Launch(g) }); err != nil {
			t.Fatal(err)
		}
		if got := result(); !bytes.Equal(got, want) {
			t.Fatalf("gated chain, replay %d: %s", r, firstDiff(got, want))
		}
	}
	if n := timeouts(); n != 0 {
		t.Errorf("%d gates opened on their time limit in chains built to open them by count", n)
	}

	// Layer 3's gate waits for more warps than layer 2 has: each of its
	// blocks opens on the limit.
	if err := d.Run(func(k *K) error { return chain(k, func(k *K) { k.prevWarps = 1 << 30 }) }); err != nil {
		t.Fatal(err)
	}
	if got := result(); !bytes.Equal(got, want) {
		t.Fatalf("a gate opened on its limit: %s", firstDiff(got, want))
	}
	if n := timeouts(); n == 0 {
		t.Errorf("a gate that could not open by count did not count a timeout")
	} else {
		t.Logf("a gate that could not open by count: %d blocks opened on the limit", n)
	}
}
