//go:build cgo

package cuda

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"
)

// TestDecodeMLP: DecodeMLP (lb_decode_mlp) gives, bit for bit, the
// residual stream, the next layer's q/k/v outputs (through the terms it
// writes) and the RMS tile sums of the five launches it replaces:
// MatMulTermsAdd (o), RMSNormTerms, MatMulSiLUTerms, MatMulTermsAdd
// (down), RMSNormTerms. Shapes of Qwen3-8B and -0.6B, widths that leave
// partial spans and tiles, 1 to 8 tokens, the norm's 1 + w gain; grids
// capped at a few blocks, so that each block takes several row tiles and
// norm slices; grids where blocks have no tile of a GEMV (they arrive at
// its barrier at once). Each case runs three times: as is, with the norm
// before the gate/up copies (decodeMLPNormFirst), and without HOLD1
// (lb_decode_mlp_nohold); the later launches also find the barrier
// counters the first returned to zero, or their barriers open early.
func TestDecodeMLP(t *testing.T) {
	d := openOrSkip(t)
	if d.Major < 9 {
		t.Skip("lb_decode_mlp needs sm_90")
	}
	defer func(b int, first bool, name string) {
		decodeMLPBlocks, decodeMLPNormFirst, decodeMLPKernel = b, first, name
	}(decodeMLPBlocks, decodeMLPNormFirst, decodeMLPKernel)
	rng := rand.New(rand.NewPCG(61, 67))
	const (
		toNext = iota // the next layer's input norm
		toSums        // the RMS tile sums
		toNone        // the last layer
	)
	for _, c := range []struct {
		T, D, inter, ina, blocks, next int
		zc                             bool
	}{
		{1, 4096, 12288, 4096, 0, toNext, false},
		{2, 1024, 3072, 2048, 0, toSums, false},
		{3, 800, 1000, 272, 7, toNext, true},
		{8, 256, 512, 512, 64, toNone, false},
		{5, 512, 1536, 1024, 1, toSums, true},
	} {
		name := fmt.Sprintf("T=%d/D=%d/inter=%d/in=%d/blocks=%d/next=%d", c.T, c.D, c.inter, c.ina, c.blocks, c.next)
		ws, _ := gemvWeights(t, d, rng, []int{c.D}, c.ina, 0)
		gu, _ := gemvWeights(t, d, rng, []int{c.inter, c.inter}, c.D, 0)
		down, _ := gemvWeights(t, d, rng, []int{c.D}, c.inter, 0)
		wq, ys := gemvWeights(t, d, rng, []int{48}, c.D, 0)
		xa := normalBuf(t, d, rng, c.T*c.ina, 1)
		post, nextw := normalBuf(t, d, rng, c.D, 1), normalBuf(t, d, rng, c.D, 1)
		x0 := make([]float32, c.T*c.D)
		for i := range x0 {
			x0[i] = float32(rng.NormFloat64() * 2)
		}
		x := upload32(t, d, x0)
		step := MLPStep{O: ws[0], Gate: gu[0], Up: gu[1], Down: down[0], PostNorm: post, Eps: 1e-6, ZeroCentered: c.zc}
		if c.next == toNext {
			step.NextNorm = nextw
		}
		// path runs the layer's second half from x0, fused or not, and
		// returns x, the sums and the next q/k/v GEMV's output.
		path := func(fused bool) (xs, sums, qkv []byte) {
			if err := d.Upload(x, asBytes(x0, len(x0))); err != nil {
				t.Fatal(err)
			}
			var sb Buf
			out := poisonedRun(t, d, ys, func(k *K) error {
				att, err := k.TermsBF16For(c.T, c.ina)
				if err != nil {
					return err
				}
				if err := k.Split(att, xa); err != nil {
					return err
				}
				if c.next == toSums {
					if sb, err = k.RMSSumsFor(c.T, c.D); err != nil {
						return err
					}
					if err := k.Poison(sb); err != nil {
						return err
					}
				}
				if fused {
					next, ran, err := k.DecodeMLP(att, x, step, sb)
					if !ran || err != nil {
						return fmt.Errorf("DecodeMLP ran %v: %v", ran, err)
					}
					if c.next == toNext {
						return k.MatMulTerms(next, ys, wq)
					}
					return nil
				}
				if added, err := k.MatMulTermsAdd(att, x, step.O, Buf{}); !added || err != nil {
					return fmt.Errorf("MatMulTermsAdd (o) ran %v: %v", added, err)
				}
				tn, err := k.TermsBF16For(c.T, c.D)
				if err != nil {
					return err
				}
				if err := k.RMSNormTerms(x, tn, post, c.D, 1e-6, c.zc); err != nil {
					return err
				}
				tm, err := k.SiLUTermsFor(c.T, c.inter)
				if err != nil {
					return err
				}
				if ran, err := k.MatMulSiLUTerms(tn, tm, step.Gate, step.Up); !ran || err != nil {
					return fmt.Errorf("MatMulSiLUTerms ran %v: %v", ran, err)
				}
				if added, err := k.MatMulTermsAdd(tm, x, step.Down, sb); !added || err != nil {
					return fmt.Errorf("MatMulTermsAdd (down) ran %v: %v", added, err)
				}
				if c.next != toNext {
					return nil
				}
				if err := k.RMSNormTerms(x, tn, nextw, c.D, 1e-6, c.zc); err != nil {
					return err
				}
				return k.MatMulTerms(tn, ys, wq)
			})
			xs = make([]byte, 4*c.T*c.D)
			if err := d.Download(xs, x); err != nil {
				t.Fatal(err)
			}
			if sb.Bytes() > 0 {
				sums = make([]byte, sb.Bytes())
				if err := d.Download(sums, sb); err != nil {
					t.Fatal(err)
				}
			}
			return xs, sums, out[0][:4*c.T*48]
		}
		decodeMLPBlocks = 0
		wantX, wantSums, wantQKV := path(false)
		decodeMLPBlocks = c.blocks
		for run := range 3 {
			decodeMLPNormFirst, decodeMLPKernel = run == 1, map[bool]string{false: "lb_decode_mlp", true: "lb_decode_mlp_nohold"}[run == 2]
			gotX, gotSums, gotQKV := path(true)
			if !bytes.Equal(gotX, wantX) {
				t.Errorf("%s, run %d: x differs from the five launches' (%s)", name, run, firstDiff(gotX, wantX))
			}
			if !bytes.Equal(gotSums, wantSums) {
				t.Errorf("%s, run %d: the RMS tile sums differ (%s)", name, run, firstDiff(gotSums, wantSums))
			}
			if c.next == toNext && !bytes.Equal(gotQKV, wantQKV) {
				t.Errorf("%s, run %d: the next GEMV's output on DecodeMLP's terms differs (%s)", name, run, firstDiff(gotQKV, wantQKV))
			}
		}
		for _, w := range [][]*Weight{ws, gu, down, wq} {
			for _, dw := range w {
				d.Free(dw.Data)
			}
		}
	}
	// What it declines, and what is an error.
	ws, _ := gemvWeights(t, d, rng, []int{64, 128, 128, 64}, 64, 0)
	o, gate, up, down := ws[0], ws[1], ws[2], ws[3]
	down2, _ := gemvWeights(t, d, rng, []int{64}, 128, 0)
	x := normalBuf(t, d, rng, 9*64, 1)
	err := d.Run(func(k *K) error {
		ok := MLPStep{O: o, Gate: gate, Up: up, Down: down2[0], PostNorm: x, Eps: 1e-6}
		nine, err := k.TermsBF16For(9, 64)
		if err != nil {
			return err
		}
		if _, ran, err := k.DecodeMLP(nine, x, ok, Buf{}); ran || err != nil {
			return fmt.Errorf("9 tokens: ran %v, %v; want it to decline", ran, err)
		}
		three, err := k.TermsFor(1, 64)
		if err != nil {
			return err
		}
		if _, ran, err := k.DecodeMLP(three, x, ok, Buf{}); ran || err != nil {
			return fmt.Errorf("three-term activations: ran %v, %v; want it to decline", ran, err)
		}
		one, err := k.TermsBF16For(1, 64)
		if err != nil {
			return err
		}
		bad := ok
		bad.Down = down // 64 x 64 after a gate of 128
		if _, ran, err := k.DecodeMLP(one, x, bad, Buf{}); ran || err == nil {
			return fmt.Errorf("a down projection of the wrong width: ran %v, %v; want an error", ran, err)
		}
		both := ok
		both.NextNorm = x
		if _, ran, err := k.DecodeMLP(one, x, both, x); ran || err == nil {
			return fmt.Errorf("both the next norm and the sums: ran %v, %v; want an error", ran, err)
		}
		return nil
	})
	if err != nil {
		t.Error(err)
	}
}
