package quantize

import (
	"context"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lowbit-ai/lowbit/calibrate/stats"
	"github.com/lowbit-ai/lowbit/checkpoint"
	"github.com/lowbit-ai/lowbit/format"
)

// writeStats writes statistics for every linear module and attention layer
// of a plan made without them, with absmax values drawn from the module
// name so that they differ.
func writeStats(t *testing.T, m *tinyModel) string {
	t.Helper()
	p, err := NewPlan(m.inv, m.cfgJSON, Options{Scheme: NVFP4A16, Format: CompressedTensors, QuantizeLinearAttn: true, KVCacheFP8: true, KVScaleOne: true})
	if err != nil {
		t.Fatal(err)
	}
	var lins []stats.Linear
	for _, mod := range p.Quantized {
		cols := 0
		for _, o := range p.Outputs {
			if o.Name == mod+".weight_packed" {
				cols = int(o.Shape[1]) * 2
			}
		}
		amax := float32(1 + len(mod)%7)
		ch := make([]float32, cols)
		mean := make([]float32, cols)
		for i := range ch {
			ch[i] = amax * float32(i+1) / float32(cols)
			mean[i] = ch[i] / 4
		}
		lins = append(lins, stats.Linear{Module: mod, InputAbsMax: amax, ChannelAbsMax: ch, MeanAbs: mean})
	}
	var attn []stats.Attention
	for _, o := range p.Outputs {
		if mod, ok := strings.CutSuffix(o.Name, ".k_scale"); ok {
			attn = append(attn, stats.Attention{Module: mod, KAbsMax: 300, VAbsMax: 5})
		}
	}
	path := filepath.Join(t.TempDir(), "stats.safetensors")
	meta := stats.Meta{ModelType: "x", ConfigSHA256: stats.ConfigSHA256(m.cfgJSON), Samples: 1, Tokens: 1, SeqLen: 1, Dataset: "test", CreatedBy: "test"}
	if err := stats.Write(path, meta, lins, attn, stats.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestWriteEverySchemeAndFormat quantizes tiny models and reads the result
// back: the config parses to the scheme asked for, every output has the
// planned dtype and shape, unquantized tensors are byte-identical to the
// source, and dequantized weights are close to the source (NMSE within the
// scheme's expected error).
func TestWriteEverySchemeAndFormat(t *testing.T) {
	cases := []struct {
		arch   checkpoint.Arch
		scheme Scheme
		format Format
		kv     bool
	}{
		{checkpoint.Qwen3, FP8Dynamic, CompressedTensors, false},
		{checkpoint.Qwen3, FP8, CompressedTensors, true},
		{checkpoint.Qwen3, NVFP4, CompressedTensors, true},
		{checkpoint.Qwen3, NVFP4A16, CompressedTensors, false},
		{checkpoint.Qwen3, FP8, ModelOpt, true},
		{checkpoint.Qwen3, FP8Dynamic, ModelOpt, false},
		{checkpoint.Qwen3, NVFP4, ModelOpt, false},
		{checkpoint.Qwen3MoE, NVFP4, CompressedTensors, false},
		{checkpoint.Qwen35MoE, NVFP4A16, CompressedTensors, true},
		{checkpoint.Qwen35, FP8Dynamic, CompressedTensors, false},
		{checkpoint.Llama, NVFP4, ModelOpt, true},
		{checkpoint.Qwen35MoE, FP8Dynamic, CompressedTensors, false},
	}
	for _, c := range cases {
		name := c.arch.String() + "/" + c.scheme.String() + "/" + c.format.String()
		t.Run(name, func(t *testing.T) {
			m := tiny(t, c.arch)
			opts := Options{Scheme: c.scheme, Format: c.format, KVCacheFP8: c.kv}
			if c.scheme.StaticInputs() || c.kv {
				s, err := stats.Open(writeStats(t, m))
				if err != nil {
					t.Fatal(err)
				}
				defer s.Close()
				opts.Stats = s
			}
			p, err := NewPlan(m.inv, m.cfgJSON, opts)
			if err != nil {
				t.Fatal(err)
			}
			src, err := checkpoint.OpenModel(m.dir)
			if err != nil {
				t.Fatal(err)
			}
			defer src.Close()
			out := filepath.Join(t.TempDir(), "q")
			if err := Write(context.Background(), src, p, out, WriteOptions{Workers: 2, InFlightBytes: 1 << 20}); err != nil {
				t.Fatal(err)
			}
			q, err := checkpoint.ReadQuantConfig(out)
			if err != nil {
				t.Fatal(err)
			}
			wantKV := checkpoint.KVCacheAuto
			if c.kv {
				wantKV = checkpoint.KVCacheFP8
			}
			if q == nil || q.Scheme != c.scheme.Preset() || q.KVCacheDType != wantKV {
				t.Fatalf("written quantization %+v, want %s with %s KV cache", q, c.scheme.Preset(), wantKV)
			}
			checkOutputs(t, src, p, out)
		})
	}
}

func checkOutputs(t *testing.T, src *checkpoint.Model, p *Plan, out string) {
	t.Helper()
	dst, err := checkpoint.OpenModel(out)
	if err != nil {
		t.Fatal(err)
	}
	defer dst.Close()
	if got := len(dst.Tensors()); got != len(p.Outputs) {
		t.Fatalf("%d tensors written, plan has %d", got, len(p.Outputs))
	}
	for i, o := range p.Outputs {
		got, err := dst.Tensor(o.Name)
		if err != nil {
			t.Fatal(err)
		}
		if got.Info.DType != o.DType || !equalShape(got.Info.Shape, o.Shape) {
			t.Errorf("%s: %v %v, planned %v %v", o.Name, got.Info.DType, got.Info.Shape, o.DType, o.Shape)
		}
		if p.Actions[i].How != "copy" {
			continue
		}
		s, err := src.Tensor(p.Actions[i].Source)
		if err != nil {
			t.Fatal(err)
		}
		if string(s.Data) != string(got.Data) {
			t.Errorf("%s: copied tensor differs from the source", o.Name)
		}
	}
	for _, mod := range p.Quantized {
		nmse := dequantNMSE(t, src, dst, p, mod)
		limit := 2e-3 // E4M3: relative rounding error up to 2^-4, NMSE about 1.3e-3
		if p.Opts.Scheme.FP4() {
			limit = 3e-2 // E2M1 in groups of 16 with E4M3 scales: about 1e-2 on Gaussian rows
		}
		if !(nmse < limit) {
			t.Errorf("%s: NMSE %.3g, want under %g", mod, nmse, limit)
		}
	}
}

func equalShape(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// dequantNMSE dequantizes a written module the way the loaders read it
// (independently of the quantizer's code, from format's decoders) and
// returns ||deq - src||² / ||src||².
func dequantNMSE(t *testing.T, src, dst *checkpoint.Model, p *Plan, mod string) float64 {
	t.Helper()
	var srcMat matrix
	for _, u := range p.units {
		for _, m := range u.Members {
			if m.Module == mod {
				srcMat = m.Src
			}
		}
	}
	st, err := src.Tensor(srcMat.Tensor)
	if err != nil {
		t.Fatal(err)
	}
	w := st.Data[srcMat.Offset : srcMat.Offset+srcMat.bytes()]
	rows, cols := srcMat.Rows, srcMat.Cols
	get := func(suffix string) []byte {
		tn, err := dst.Tensor(mod + "." + suffix)
		if err != nil {
			t.Fatal(err)
		}
		return tn.Data
	}
	f32 := func(b []byte, i int) float64 {
		return float64(math.Float32frombits(uint32(b[4*i]) | uint32(b[4*i+1])<<8 | uint32(b[4*i+2])<<16 | uint32(b[4*i+3])<<24))
	}
	bf := func(b []byte, i int) float64 {
		return float64(format.BF16ToFloat32(uint16(b[2*i]) | uint16(b[2*i+1])<<8))
	}
	deq := make([]float64, rows*cols)
	ct := p.Opts.Format != ModelOpt
	switch p.Opts.Scheme {
	case FP8Dynamic, FP8, FP8Block:
		q, s := get("weight"), get("weight_scale")
		for r := range rows {
			for c := range cols {
				var scale float64
				switch {
				case p.Opts.Scheme == FP8Block:
					scale = bf(s, (r/128)*ceilDiv(cols, 128)+c/128)
				case p.Opts.Scheme == FP8Dynamic && ct:
					scale = bf(s, r)
				case p.Opts.Scheme == FP8Dynamic:
					scale = f32(s, r)
				case ct:
					scale = bf(s, 0)
				default:
					scale = f32(s, 0)
				}
				deq[r*cols+c] = float64(format.E4M3ToFloat32(q[r*cols+c])) * scale
			}
		}
	default:
		packedName, g2 := "weight_packed", "weight_global_scale"
		if !ct {
			packedName, g2 = "weight", "weight_scale_2"
		}
		q, s, g := get(packedName), get("weight_scale"), f32(get(g2), 0)
		if ct {
			g = 1 / g // CT stores the multiplier; loaders invert it
		}
		for r := range rows {
			for c := range cols {
				b := q[(r*cols+c)/2]
				code := b & 0xF
				if c%2 == 1 {
					code = b >> 4
				}
				scale := float64(format.E4M3ToFloat32(s[r*(cols/16)+c/16])) * g
				deq[r*cols+c] = float64(format.E2M1ToFloat32(code)) * scale
			}
		}
	}
	var num, den float64
	for i := range deq {
		x := bf(w, i)
		num += (deq[i] - x) * (deq[i] - x)
		den += x * x
	}
	return num / den
}

// A cancelled run (a kill, a Ctrl-C) must leave nothing that looks like a
// checkpoint: no index and no model.safetensors.
func TestWriteCancelled(t *testing.T) {
	m := tiny(t, checkpoint.Qwen3MoE)
	p, err := NewPlan(m.inv, m.cfgJSON, Options{Scheme: NVFP4A16, Format: CompressedTensors})
	if err != nil {
		t.Fatal(err)
	}
	src, err := checkpoint.OpenModel(m.dir)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	ctx, cancel := context.WithCancel(context.Background())
	out := filepath.Join(t.TempDir(), "q")
	err = Write(ctx, src, p, out, WriteOptions{Progress: func(written, total int64) {
		if written > total/3 {
			cancel()
		}
	}, MaxShardBytes: 1 << 20})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Write = %v, want context.Canceled", err)
	}
	entries, _ := os.ReadDir(out)
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".safetensors") || e.Name() == checkpoint.IndexFileName {
			t.Errorf("a cancelled run left %s", e.Name())
		}
	}
	if _, err := checkpoint.OpenModel(out); err == nil {
		t.Errorf("OpenModel accepts the directory of a cancelled run")
	}
}

func TestWriteRefusesNonEmptyDir(t *testing.T) {
	m := tiny(t, checkpoint.Qwen3)
	p, err := NewPlan(m.inv, m.cfgJSON, Options{Scheme: FP8Dynamic, Format: CompressedTensors})
	if err != nil {
		t.Fatal(err)
	}
	src, err := checkpoint.OpenModel(m.dir)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	if err := Write(context.Background(), src, p, m.dir, WriteOptions{}); err == nil || !strings.Contains(err.Error(), "not empty") {
		t.Errorf("Write into the source directory = %v, want a not-empty error", err)
	}
}
