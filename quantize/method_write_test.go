package quantize

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lowbit-ai/lowbit/calibrate/stats"
	"github.com/lowbit-ai/lowbit/checkpoint"
)

// writeHessianStats writes statistics with Hessians for every linear
// module of m (from correlated random inputs of each module's width;
// modules that share an input share its Hessian) and returns them opened.
// drop leaves the named module's Hessian out.
func writeHessianStats(t *testing.T, m *tinyModel, drop string) *stats.Stats {
	t.Helper()
	p, err := NewPlan(m.inv, m.cfgJSON, Options{Scheme: FP8Dynamic, Format: CompressedTensors})
	if err != nil {
		t.Fatal(err)
	}
	var lins []stats.Linear
	for _, u := range p.units {
		for _, mem := range u.Members {
			n := mem.Src.Cols
			const T = 256
			x := correlatedInputs(uint64(len(u.Group)+n), T, n)
			ch, mean := make([]float32, n), make([]float32, n)
			var amax float32
			for j := range ch {
				ch[j] = 1 + float32(j%3)
				mean[j] = 0.5
				amax = max(amax, ch[j])
			}
			l := stats.Linear{Module: mem.Module, InputAbsMax: amax, ChannelAbsMax: ch, MeanAbs: mean}
			if mem.Module != drop {
				l.Hessian, l.HessianTokens = stats.HessianFromFloat64(gram(x, T, n)), T
			}
			lins = append(lins, l)
		}
	}
	path := filepath.Join(t.TempDir(), "stats.safetensors")
	meta := stats.Meta{ModelType: "qwen3", ConfigSHA256: stats.ConfigSHA256(m.cfgJSON), Samples: 1, Tokens: 256, SeqLen: 256}
	if err := stats.Write(path, meta, lins, nil, stats.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	s, err := stats.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// TestWriteMethods writes the tiny Qwen3 with each method and checks the
// checkpoint as TestWriteEverySchemeAndFormat does (planned tensors,
// copies unchanged, dequantized weights close to the source); MSE and
// GPTQ keep RTN's scale tensors' shapes and the config.
func TestWriteMethods(t *testing.T) {
	m := tiny(t, checkpoint.Qwen3)
	s := writeHessianStats(t, m, "")
	for _, c := range []struct {
		scheme Scheme
		format Format
		method Method
	}{
		{NVFP4A16, CompressedTensors, MSE}, {NVFP4A16, CompressedTensors, GPTQ},
		{FP8Dynamic, CompressedTensors, MSE}, {FP8Dynamic, ModelOpt, GPTQ},
		{NVFP4, ModelOpt, GPTQ},
	} {
		t.Run(c.scheme.String()+"/"+c.format.String()+"/"+c.method.String(), func(t *testing.T) {
			p, err := NewPlan(m.inv, m.cfgJSON, Options{Scheme: c.scheme, Format: c.format, Method: c.method, Stats: s})
			if err != nil {
				t.Fatal(err)
			}
			for _, a := range p.Actions {
				if a.How != "copy" && a.How != c.scheme.String()+"+"+c.method.String() {
					t.Fatalf("action %q for %s", a.How, a.Output.Name)
				}
			}
			src, err := checkpoint.OpenModel(m.dir)
			if err != nil {
				t.Fatal(err)
			}
			defer src.Close()
			out := filepath.Join(t.TempDir(), "q")
			var warned []string
			if err := Write(context.Background(), src, p, out, WriteOptions{Workers: 2, Warn: func(s string) { warned = append(warned, s) }}); err != nil {
				t.Fatal(err)
			}
			if len(warned) > 0 {
				t.Errorf("warnings: %q", warned)
			}
			if c.method == MSE {
				checkOutputs(t, src, p, out)
				return
			}
			// GPTQ trades weight error for output error, so the weights
			// may sit farther from the source than RTN's limits allow.
			dst, err := checkpoint.OpenModel(out)
			if err != nil {
				t.Fatal(err)
			}
			defer dst.Close()
			for _, o := range p.Outputs {
				got, err := dst.Tensor(o.Name)
				if err != nil {
					t.Fatal(err)
				}
				if got.Info.DType != o.DType || !equalShape(got.Info.Shape, o.Shape) {
					t.Errorf("%s: %v %v, planned %v %v", o.Name, got.Info.DType, got.Info.Shape, o.DType, o.Shape)
				}
			}
			limit := 6e-3
			if c.scheme.FP4() {
				limit = 0.1
			}
			for _, mod := range p.Quantized {
				if nmse := dequantNMSE(t, src, dst, p, mod); !(nmse < limit) {
					t.Errorf("%s: weight NMSE %.3g, want under %g", mod, nmse, limit)
				}
			}
		})
	}
}

func TestPlanMethodErrors(t *testing.T) {
	m := tiny(t, checkpoint.Qwen3)
	plan := func(o Options) error {
		o.Scheme, o.Format = NVFP4A16, CompressedTensors
		_, err := NewPlan(m.inv, m.cfgJSON, o)
		return err
	}
	if err := plan(Options{Method: GPTQ}); err == nil || !strings.Contains(err.Error(), "calibrate --hessian") {
		t.Errorf("GPTQ without statistics: %v", err)
	}
	noH := writeHessianStats(t, m, "model.layers.1.mlp.down_proj")
	if err := plan(Options{Method: GPTQ, Stats: noH}); err == nil || !strings.Contains(err.Error(), "no Hessian for model.layers.1.mlp.down_proj") {
		t.Errorf("a missing Hessian: %v", err)
	}
	if err := plan(Options{Method: MSE}); err != nil {
		t.Errorf("MSE needs no statistics: %v", err)
	}
	if err := plan(Options{Method: MSE, Stats: noH}); err != nil {
		t.Errorf("MSE with statistics: %v", err)
	}
	for _, s := range []string{"rtn", "MSE", "gptq"} {
		if _, err := ParseMethod(s); err != nil {
			t.Error(err)
		}
	}
	if _, err := ParseMethod("awq"); err == nil {
		t.Error("ParseMethod(awq) succeeded")
	}
}
