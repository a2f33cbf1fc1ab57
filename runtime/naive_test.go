package runtime

import (
	"fmt"
	"math"
	"testing"

	"github.com/lowbit-ai/lowbit/checkpoint"
	"github.com/lowbit-ai/lowbit/format"
)

// naiveForward is a second, independent forward of a BF16 Qwen3 or Llama
// checkpoint, written from the transformers modeling code in float64 with
// plain loops: it reads the tensors itself and shares nothing with the
// runtime but the checkpoint reader. It returns the logits of every token.
func naiveForward(t testing.TB, dir string, tokens []int) [][]float64 {
	t.Helper()
	cfg, err := checkpoint.ReadConfig(dir)
	if err != nil {
		t.Fatal(err)
	}
	ck, err := checkpoint.OpenModel(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	get := func(name string) []float64 {
		tn, err := ck.Tensor(name)
		if err != nil {
			t.Fatal(err)
		}
		f := make([]float32, tn.Info.NumElements())
		format.DecodeFloat32s(tn.Info.DType, f, tn.Data)
		out := make([]float64, len(f))
		for i, v := range f {
			out[i] = float64(v)
		}
		return out
	}
	c := cfg.Text
	D, H, KVH, Dh := c.HiddenSize, c.NumAttentionHeads, c.NumKeyValueHeads, c.HeadDim
	eps := c.RMSNormEps
	rms := func(x, w []float64) []float64 {
		var ss float64
		for _, v := range x {
			ss += v * v
		}
		r := 1 / math.Sqrt(ss/float64(len(x))+eps)
		y := make([]float64, len(x))
		for i := range x {
			y[i] = x[i] * r * w[i]
		}
		return y
	}
	linear := func(w []float64, x []float64) []float64 { // w [out, in]
		in := len(x)
		y := make([]float64, len(w)/in)
		for o := range y {
			for i, v := range x {
				y[o] += w[o*in+i] * v
			}
		}
		return y
	}
	rope := func(x []float64, pos int) { // one head, NeoX rotate_half
		half := Dh / 2
		for j := range half {
			a := float64(pos) * math.Pow(c.RoPE.Theta, -float64(2*j)/float64(Dh))
			x1, x2 := x[j], x[j+half]
			x[j], x[j+half] = x1*math.Cos(a)-x2*math.Sin(a), x2*math.Cos(a)+x1*math.Sin(a)
		}
	}
	emb := get("model.embed_tokens.weight")
	xs := make([][]float64, len(tokens))
	for t, id := range tokens {
		xs[t] = append([]float64(nil), emb[id*D:(id+1)*D]...)
	}
	for l := range c.NumHiddenLayers {
		p := fmt.Sprintf("model.layers.%d.", l)
		wq, wk, wv, wo := get(p+"self_attn.q_proj.weight"), get(p+"self_attn.k_proj.weight"), get(p+"self_attn.v_proj.weight"), get(p+"self_attn.o_proj.weight")
		var qn, kn []float64
		if cfg.Arch == checkpoint.Qwen3 {
			qn, kn = get(p+"self_attn.q_norm.weight"), get(p+"self_attn.k_norm.weight")
		}
		ks, vs := make([][]float64, len(tokens)), make([][]float64, len(tokens))
		qs := make([][]float64, len(tokens))
		for t, x := range xs {
			h := rms(x, get(p+"input_layernorm.weight"))
			qs[t], ks[t], vs[t] = linear(wq, h), linear(wk, h), linear(wv, h)
			for hd := range H {
				q := qs[t][hd*Dh : (hd+1)*Dh]
				if qn != nil {
					copy(q, rms(q, qn))
				}
				rope(q, t)
			}
			for hd := range KVH {
				k := ks[t][hd*Dh : (hd+1)*Dh]
				if kn != nil {
					copy(k, rms(k, kn))
				}
				rope(k, t)
			}
		}
		for t := range xs {
			att := make([]float64, H*Dh)
			for hd := range H {
				kh := hd / (H / KVH)
				q := qs[t][hd*Dh : (hd+1)*Dh]
				w := make([]float64, t+1)
				m := math.Inf(-1)
				for p := range w {
					for d := range Dh {
						w[p] += q[d] * ks[p][kh*Dh+d]
					}
					w[p] /= math.Sqrt(float64(Dh))
					m = max(m, w[p])
				}
				var sum float64
				for p := range w {
					w[p] = math.Exp(w[p] - m)
					sum += w[p]
				}
				for p := range w {
					for d := range Dh {
						att[hd*Dh+d] += w[p] / sum * vs[p][kh*Dh+d]
					}
				}
			}
			for i, v := range linear(wo, att) {
				xs[t][i] += v
			}
		}
		wg, wu, wd := get(p+"mlp.gate_proj.weight"), get(p+"mlp.up_proj.weight"), get(p+"mlp.down_proj.weight")
		for t, x := range xs {
			h := rms(x, get(p+"post_attention_layernorm.weight"))
			g, u := linear(wg, h), linear(wu, h)
			for i := range g {
				g[i] = g[i] / (1 + math.Exp(-g[i])) * u[i]
			}
			for i, v := range linear(wd, g) {
				xs[t][i] += v
			}
		}
	}
	head := "lm_head.weight"
	if c.TieWordEmbeddings {
		head = "model.embed_tokens.weight"
	}
	wh, norm := get(head), get("model.norm.weight")
	logits := make([][]float64, len(tokens))
	for t, x := range xs {
		logits[t] = linear(wh, rms(x, norm))
	}
	return logits
}
