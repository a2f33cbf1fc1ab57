package runtime

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/lowbit-ai/lowbit/calibrate/stats"
	"github.com/lowbit-ai/lowbit/checkpoint"
	"github.com/lowbit-ai/lowbit/kernels"
	"github.com/lowbit-ai/lowbit/kernels/ref"
	"github.com/lowbit-ai/lowbit/quantize"
)

// recordingOps records, for every weight, the per-channel absmax and mean
// |x| of the inputs MatMul multiplies it with: the statistics calibration
// collects.
type recordingOps struct {
	kernels.Ops
	seen map[*kernels.Weight]*inputStats
}

type inputStats struct {
	amax []float32
	sum  []float64
	n    int
}

func (r *recordingOps) MatMul(y, x []float32, T int, w *kernels.Weight) {
	s := r.seen[w]
	if s == nil {
		s = &inputStats{amax: make([]float32, w.In), sum: make([]float64, w.In)}
		r.seen[w] = s
	}
	for t := range T {
		for i, v := range x[t*w.In : (t+1)*w.In] {
			a := float32(math.Abs(float64(v)))
			s.amax[i] = max(s.amax[i], a)
			s.sum[i] += float64(a)
		}
	}
	s.n += T
	r.Ops.MatMul(y, x, T, w)
}

// writeStats runs tokens through the BF16 model in dir and writes the
// calibration statistics of its linear layers to path.
func writeStats(t testing.TB, dir string, tokens []int, path string) {
	t.Helper()
	rec := &recordingOps{Ops: ref.Ops{}, seen: map[*kernels.Weight]*inputStats{}}
	m := loadModel(t, dir, rec)
	forward(t, m, m.NewSequence(0), tokens)
	var linears []stats.Linear
	for i := range m.layers {
		ly := &m.layers[i]
		for _, l := range []struct {
			name string
			w    *kernels.Weight
		}{{"self_attn.q_proj", &ly.q}, {"self_attn.k_proj", &ly.k}, {"self_attn.v_proj", &ly.v}, {"self_attn.o_proj", &ly.o},
			{"mlp.gate_proj", &ly.gate}, {"mlp.up_proj", &ly.up}, {"mlp.down_proj", &ly.down}} {
			s := rec.seen[l.w]
			st := stats.Linear{Module: layerName(i) + l.name, ChannelAbsMax: s.amax, MeanAbs: make([]float32, len(s.amax))}
			for c, a := range s.amax {
				st.InputAbsMax = max(st.InputAbsMax, a)
				st.MeanAbs[c] = min(float32(s.sum[c]/float64(s.n)), a)
			}
			linears = append(linears, st)
		}
	}
	cfg, err := os.ReadFile(filepath.Join(dir, checkpoint.ConfigFileName))
	if err != nil {
		t.Fatal(err)
	}
	meta := stats.Meta{ModelType: m.Config().ModelType, ConfigSHA256: stats.ConfigSHA256(cfg), Samples: 1,
		Tokens: int64(len(tokens)), SeqLen: int64(len(tokens)), Dataset: "runtime test prompt", CreatedBy: "runtime tests"}
	if err := stats.Write(path, meta, linears, nil, stats.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
}

func layerName(i int) string { return "model.layers." + strconv.Itoa(i) + "." }

// quantizeTo writes the quantization of the BF16 checkpoint src to dst with
// the quantize package, as lowbit quantize does.
func quantizeTo(t testing.TB, src, dst string, opts quantize.Options, statsPath string) {
	t.Helper()
	if statsPath != "" && opts.Scheme.StaticInputs() {
		s, err := stats.Open(statsPath)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		opts.Stats = s
	}
	ck, err := checkpoint.OpenModel(src)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	cfg, err := os.ReadFile(filepath.Join(src, checkpoint.ConfigFileName))
	if err != nil {
		t.Fatal(err)
	}
	plan, err := quantize.NewPlan(ck.Inventory(), cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := quantize.Write(context.Background(), ck, plan, dst, quantize.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
}

// diffOps runs every MatMul on other kernels too, with the same inputs,
// and records the largest difference relative to the largest |y|.
type diffOps struct {
	kernels.Ops
	other kernels.Ops
	worst float64
}

func (d *diffOps) MatMul(y, x []float32, T int, w *kernels.Weight) {
	d.Ops.MatMul(y, x, T, w)
	o := make([]float32, len(y))
	d.other.MatMul(o, x, T, w)
	var scale float64
	for _, v := range y {
		scale = max(scale, math.Abs(float64(v)))
	}
	d.worst = max(d.worst, maxDiff(y, o)/max(scale, 1e-30))
}

// logSoftmax returns the log-softmax of logits [T, V].
func logSoftmax(logits []float32, V int) []float32 {
	out := make([]float32, len(logits))
	ref.Ops{}.LogSoftmax(out, logits, len(logits)/V, V)
	return out
}

// meanKL returns the mean over rows of KL(p‖q) for logits [T, V].
func meanKL(p, q []float32, V int) float64 {
	T := len(p) / V
	lp, lq := make([]float32, len(p)), make([]float32, len(q))
	ref.Ops{}.LogSoftmax(lp, p, T, V)
	ref.Ops{}.LogSoftmax(lq, q, T, V)
	var kl float64
	for i := range lp {
		kl += math.Exp(float64(lp[i])) * float64(lp[i]-lq[i])
	}
	return kl / float64(T)
}

// TestQuantizedVariants quantizes a small model with every scheme and
// format, loads each and checks the bound numerics and the distance of its
// logits from the BF16 model's.
func TestQuantizedVariants(t *testing.T) {
	src := small128.write(t)
	statsPath := filepath.Join(t.TempDir(), "stats.safetensors")
	writeStats(t, src, testTokens, statsPath)
	bf16 := loadModel(t, src, ref.Ops{})
	want := forward(t, bf16, bf16.NewSequence(0), testTokens)
	ct, mo := quantize.CompressedTensors, quantize.ModelOpt
	tests := []struct {
		scheme quantize.Scheme
		format quantize.Format
		wf     kernels.WeightFormat
		act    kernels.ActQuant
		// maxKL bounds the mean KL(BF16 ‖ quantized) over the prompt: about
		// twice what this random model gives (2.3e-3 for FP8, 1.5e-2 for
		// NVFP4A16, 3e-2 for NVFP4); a wrong scale gives KL above 1.
		maxKL float64
	}{
		{quantize.FP8Dynamic, ct, kernels.WeightFP8Channel, kernels.ActFP8Token, 5e-3},
		{quantize.FP8Dynamic, mo, kernels.WeightFP8Channel, kernels.ActFP8Token, 5e-3},
		{quantize.FP8, ct, kernels.WeightFP8Tensor, kernels.ActFP8Tensor, 5e-3},
		{quantize.FP8, mo, kernels.WeightFP8Tensor, kernels.ActFP8Tensor, 5e-3},
		{quantize.FP8Block, ct, kernels.WeightFP8Block, kernels.ActFP8Group128, 5e-3},
		{quantize.NVFP4A16, ct, kernels.WeightNVFP4, kernels.ActNone, 5e-2},
		{quantize.NVFP4, ct, kernels.WeightNVFP4, kernels.ActNVFP4, 1e-1},
		{quantize.NVFP4, mo, kernels.WeightNVFP4, kernels.ActNVFP4, 1e-1},
	}
	for _, tt := range tests {
		t.Run(tt.scheme.String()+"-"+tt.format.String(), func(t *testing.T) {
			dst := filepath.Join(t.TempDir(), "q")
			quantizeTo(t, src, dst, quantize.Options{Scheme: tt.scheme, Format: tt.format}, statsPath)
			m := loadModel(t, dst, ref.Ops{})
			for _, w := range []*kernels.Weight{&m.layers[0].q, &m.layers[1].down} {
				if w.Format != tt.wf || w.Act != tt.act {
					t.Errorf("bound as %v with %v activations, want %v with %v", w.Format, w.Act, tt.wf, tt.act)
				}
			}
			if m.lmHead.Format != kernels.WeightBF16 {
				t.Errorf("lm_head bound as %v, want bf16", m.lmHead.Format)
			}
			got := forward(t, m, m.NewSequence(0), testTokens)
			kl := meanKL(want, got, m.VocabSize())
			t.Logf("mean KL(BF16 ‖ %s) = %.3g", tt.scheme, kl)
			if kl > tt.maxKL || math.IsNaN(kl) {
				t.Errorf("mean KL(BF16 ‖ %s) = %.3g, want <= %.3g", tt.scheme, kl, tt.maxKL)
			}
			// The other kernels implement the same quantized numerics: each
			// of their products, on the activations of the reference
			// forward. (Whole forwards are not compared: a last-bit
			// difference upstream of an activation on a rounding boundary
			// moves its code, see fragile_test.go.)
			for _, b := range backends[1:] {
				d := &diffOps{Ops: ref.Ops{}, other: b.ops(t)}
				m := loadModel(t, dst, d)
				forward(t, m, m.NewSequence(0), testTokens)
				t.Logf("%s: largest |Δ| of a product vs ref, relative to the product's largest value: %.3g", b.name, d.worst)
				if d.worst > 1e-4 {
					t.Errorf("%s: a product differs from ref by %.3g of its largest value, want <= 1e-4", b.name, d.worst)
				}
			}
		})
	}
}

func TestKVCacheScalesNote(t *testing.T) {
	src := small128.write(t)
	dst := filepath.Join(t.TempDir(), "q")
	quantizeTo(t, src, dst, quantize.Options{Scheme: quantize.FP8Dynamic, Format: quantize.CompressedTensors, KVCacheFP8: true, KVScaleOne: true}, "")
	m := loadModel(t, dst, ref.Ops{})
	if len(m.Notes()) != 1 || !strings.Contains(m.Notes()[0], "FP8 KV cache") {
		t.Errorf("Notes = %q, want one about the FP8 KV cache", m.Notes())
	}
	if m.layers[1].kScale != 1 || m.layers[1].vScale != 1 {
		t.Errorf("k/v scales %v, %v, want 1 (--kv-scale-one)", m.layers[1].kScale, m.layers[1].vScale)
	}
}

// TestReduceFused checks the per-tensor values the members of a fused
// layer share, as vLLM's loaders reduce them.
func TestReduceFused(t *testing.T) {
	nv := func(act kernels.ActQuant, global, input float32) linear {
		return linear{w: kernels.Weight{Format: kernels.WeightNVFP4, Act: act}, globalRaw: global, inputRaw: input}
	}
	fp8 := func(input float32) linear {
		return linear{w: kernels.Weight{Format: kernels.WeightFP8Tensor, Act: kernels.ActFP8Tensor}, inputRaw: input}
	}
	ct, mo := scheme{name: checkpoint.SchemeNVFP4}, scheme{name: checkpoint.SchemeNVFP4, modelOpt: true}
	tests := []struct {
		name          string
		s             scheme
		ls            []linear
		global, input float32
		wantErr       bool
	}{
		// compressed-tensors stores multipliers: 1/max(weight_global_scale).
		{"ct nvfp4", ct, []linear{nv(kernels.ActNVFP4, 2, 3), nv(kernels.ActNVFP4, 4, 5)}, 0.25, 5, false},
		// ModelOpt: max(weight_scale_2); G = 1/max(input_scale).
		{"modelopt nvfp4", mo, []linear{nv(kernels.ActNVFP4, 2, 0.5), nv(kernels.ActNVFP4, 4, 0.25)}, 4, 2, false},
		{"ct nvfp4a16", ct, []linear{nv(kernels.ActNone, 8, 0), nv(kernels.ActNone, 2, 0), nv(kernels.ActNone, 4, 0)}, 0.125, 0, false},
		{"fp8 static", scheme{name: checkpoint.SchemeFP8}, []linear{fp8(0.1), fp8(0.2)}, 0, 0.2, false},
		{"mixed formats", ct, []linear{nv(kernels.ActNVFP4, 2, 3), fp8(0.1)}, 0, 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := &binder{used: map[string]bool{}}
			ptrs := make([]*linear, len(tt.ls))
			for i := range tt.ls {
				ptrs[i] = &tt.ls[i]
			}
			b.reduceFused(tt.s, "g", ptrs...)
			if (len(b.errs) > 0) != tt.wantErr {
				t.Fatalf("errors %v, want error %v", b.errs, tt.wantErr)
			}
			if tt.wantErr {
				return
			}
			for i, l := range tt.ls {
				if l.w.GlobalScale != tt.global || l.w.InputScale != tt.input {
					t.Errorf("member %d: GlobalScale %v, InputScale %v; want %v, %v", i, l.w.GlobalScale, l.w.InputScale, tt.global, tt.input)
				}
			}
		})
	}
}
