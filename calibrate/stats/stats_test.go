package stats

import (
	"encoding/binary"
	"errors"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/lowbit-ai/lowbit/checkpoint"
	"github.com/lowbit-ai/lowbit/format"
)

var testConfig = []byte(`{"model_type": "qwen3", "hidden_size": 4}`)

func testMeta() Meta {
	return Meta{
		ModelType:    "qwen3",
		ConfigSHA256: ConfigSHA256(testConfig),
		Samples:      4,
		Tokens:       30,
		SeqLen:       8,
		Dataset:      "HuggingFaceH4/ultrachat_200k:train_sft",
		CreatedBy:    "lowbit test",
	}
}

// testHessian returns a symmetric n×n matrix with a positive diagonal.
func testHessian(n int) []float64 {
	h := make([]float64, n*n)
	for i := range n {
		for j := range n {
			h[i*n+j] = float64(i+1)*float64(j+1)/7 + 1e-9*float64(i*j)
		}
	}
	return h
}

func testLinears() []Linear {
	return []Linear{
		{Module: "model.layers.10.self_attn.q_proj", InputAbsMax: 3, ChannelAbsMax: []float32{1, 3, 2, 0.5}, MeanAbs: []float32{0.5, 1, 2, 0}},
		{Module: "model.layers.2.mlp.down_proj", InputAbsMax: 9.5, ChannelAbsMax: []float32{9.5, 1, 1}, MeanAbs: []float32{1, 0.25, 1},
			Hessian: HessianFromFloat64(testHessian(3)), HessianTokens: 30},
		{Module: "model.layers.2.mlp.experts.3.gate_proj", InputAbsMax: 0, ChannelAbsMax: []float32{0, 0}, MeanAbs: []float32{0, 0},
			Hessian: HessianFromFloat32([]float32{0, 0, 0, 0}), HessianTokens: 1},
	}
}

func testAttention() []Attention {
	return []Attention{
		{Module: "model.layers.2.self_attn", KAbsMax: 17.25, VAbsMax: 3, KHeadAbsMax: []float32{17.25, 4}},
		{Module: "model.layers.10.self_attn", KAbsMax: 1, VAbsMax: 2},
	}
}

func writeTest(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "stats.safetensors")
	if err := Write(path, testMeta(), testLinears(), testAttention(), WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	return path
}

func openTest(t *testing.T, path string) *Stats {
	t.Helper()
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestRoundTrip(t *testing.T) {
	path := writeTest(t)
	s := openTest(t, path)
	if s.Meta() != testMeta() {
		t.Errorf("Meta() = %+v, want %+v", s.Meta(), testMeta())
	}
	if s.Path() != path {
		t.Errorf("Path() = %q", s.Path())
	}
	wantModules := []string{"model.layers.2.mlp.down_proj", "model.layers.2.mlp.experts.3.gate_proj", "model.layers.10.self_attn.q_proj"}
	if got := s.Modules(); !slices.Equal(got, wantModules) {
		t.Errorf("Modules() = %q, want %q", got, wantModules)
	}
	if got, want := s.AttentionModules(), []string{"model.layers.2.self_attn", "model.layers.10.self_attn"}; !slices.Equal(got, want) {
		t.Errorf("AttentionModules() = %q, want %q", got, want)
	}
	for _, l := range testLinears() {
		if v, err := s.InputAbsMax(l.Module); err != nil || v != l.InputAbsMax {
			t.Errorf("InputAbsMax(%s) = %v, %v; want %v", l.Module, v, err, l.InputAbsMax)
		}
		if v, err := s.ChannelAbsMax(l.Module); err != nil || !slices.Equal(v, l.ChannelAbsMax) {
			t.Errorf("ChannelAbsMax(%s) = %v, %v; want %v", l.Module, v, err, l.ChannelAbsMax)
		}
		if v, err := s.MeanAbs(l.Module); err != nil || !slices.Equal(v, l.MeanAbs) {
			t.Errorf("MeanAbs(%s) = %v, %v; want %v", l.Module, v, err, l.MeanAbs)
		}
		if s.HasHessian(l.Module) != (l.Hessian != nil) {
			t.Errorf("HasHessian(%s) = %v", l.Module, s.HasHessian(l.Module))
		}
	}
	for _, a := range testAttention() {
		k, v, err := s.KVAbsMax(a.Module)
		if err != nil || k != a.KAbsMax || v != a.VAbsMax {
			t.Errorf("KVAbsMax(%s) = %v, %v, %v; want %v, %v", a.Module, k, v, err, a.KAbsMax, a.VAbsMax)
		}
		heads, err := s.KHeadAbsMax(a.Module)
		switch {
		case a.KHeadAbsMax == nil && !errors.Is(err, ErrMissing):
			t.Errorf("KHeadAbsMax(%s) = %v, %v; want ErrMissing", a.Module, heads, err)
		case a.KHeadAbsMax != nil && (err != nil || !slices.Equal(heads, a.KHeadAbsMax)):
			t.Errorf("KHeadAbsMax(%s) = %v, %v; want %v", a.Module, heads, err, a.KHeadAbsMax)
		}
	}

	h, err := s.Hessian("model.layers.2.mlp.down_proj")
	if err != nil {
		t.Fatal(err)
	}
	want := testHessian(3)
	if h.N() != 3 || h.Tokens() != 30 || h.Module() != "model.layers.2.mlp.down_proj" {
		t.Errorf("Hessian N=%d Tokens=%d Module=%q", h.N(), h.Tokens(), h.Module())
	}
	all := h.Float32()
	for i := range 3 {
		row := h.Row(i, nil)
		for j := range 3 {
			w := float32(want[i*3+j])
			if h.At(i, j) != w || row[j] != w || all[i*3+j] != w {
				t.Errorf("H[%d,%d]: At %v, Row %v, Float32 %v; want %v", i, j, h.At(i, j), row[j], all[i*3+j], w)
			}
		}
	}
	if _, err := s.Hessian("model.layers.2.mlp.down_proj"); err != nil { // cached check
		t.Error(err)
	}
}

// TestLayout checks that the small statistics come first and the Hessians
// last, and the metadata as written.
func TestLayout(t *testing.T) {
	h, err := checkpoint.ReadHeader(writeTest(t))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, ti := range h.Tensors {
		names = append(names, ti.Name)
	}
	want := []string{
		"model.layers.10.self_attn.q_proj.input_absmax",
		"model.layers.10.self_attn.q_proj.input_channel_absmax",
		"model.layers.10.self_attn.q_proj.input_mean_abs",
		"model.layers.2.mlp.down_proj.input_absmax",
		"model.layers.2.mlp.down_proj.input_channel_absmax",
		"model.layers.2.mlp.down_proj.input_mean_abs",
		"model.layers.2.mlp.down_proj.hessian_tokens",
		"model.layers.2.mlp.experts.3.gate_proj.input_absmax",
		"model.layers.2.mlp.experts.3.gate_proj.input_channel_absmax",
		"model.layers.2.mlp.experts.3.gate_proj.input_mean_abs",
		"model.layers.2.mlp.experts.3.gate_proj.hessian_tokens",
		"model.layers.2.self_attn.k_absmax",
		"model.layers.2.self_attn.v_absmax",
		"model.layers.2.self_attn.k_head_absmax",
		"model.layers.10.self_attn.k_absmax",
		"model.layers.10.self_attn.v_absmax",
		"model.layers.2.mlp.down_proj.hessian",
		"model.layers.2.mlp.experts.3.gate_proj.hessian",
	}
	if !slices.Equal(names, want) {
		t.Errorf("tensors in file order:\n%s\nwant\n%s", strings.Join(names, "\n"), strings.Join(want, "\n"))
	}
	wantMeta := map[string]string{
		"lowbit_stats_version": "1", "model_type": "qwen3", "config_sha256": ConfigSHA256(testConfig),
		"samples": "4", "tokens": "30", "seq_len": "8", "dataset": "HuggingFaceH4/ultrachat_200k:train_sft", "created_by": "lowbit test",
	}
	if len(h.Metadata) != len(wantMeta) {
		t.Errorf("metadata %v, want %v", h.Metadata, wantMeta)
	}
	for k, v := range wantMeta {
		if h.Metadata[k] != v {
			t.Errorf("metadata %s = %q, want %q", k, h.Metadata[k], v)
		}
	}
}

func TestHessianFromFloat64Rounds(t *testing.T) {
	const n = 70
	h := make([]float64, n*n)
	for i := range h {
		h[i] = 1 + float64(i)*1e-9 // not representable in float32
	}
	for i := range n {
		h[i*n+i] = float64(i) * 0.1
	}
	path := filepath.Join(t.TempDir(), "s.safetensors")
	ch := make([]float32, n)
	mean := make([]float32, n)
	for i := range ch {
		ch[i] = 2
		mean[i] = 1
	}
	l := Linear{Module: "m", InputAbsMax: 2, ChannelAbsMax: ch, MeanAbs: mean, Hessian: HessianFromFloat64(h), HessianTokens: 5}
	if err := Write(path, testMeta(), []Linear{l}, nil, WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	s := openTest(t, path)
	hv, err := s.Hessian("m")
	if err != nil {
		t.Fatal(err)
	}
	row := make([]float32, n)
	for i := range n {
		hv.Row(i, row)
		for j := range n {
			if want := float32(h[i*n+j]); row[j] != want {
				t.Fatalf("H[%d,%d] = %v, want %v", i, j, row[j], want)
			}
		}
	}
}

func TestProgress(t *testing.T) {
	var last, total int64
	opts := WriteOptions{Progress: func(w, tot int64) { last, total = w, tot }}
	if err := Write(filepath.Join(t.TempDir(), "s"), testMeta(), testLinears(), testAttention(), opts); err != nil {
		t.Fatal(err)
	}
	if total == 0 || last != total {
		t.Errorf("last progress %d of %d", last, total)
	}
}

func TestWriteRejects(t *testing.T) {
	nan := float32(math.NaN())
	inf := float32(math.Inf(1))
	good := func() Linear {
		return Linear{Module: "model.layers.0.mlp.up_proj", InputAbsMax: 2, ChannelAbsMax: []float32{2, 1}, MeanAbs: []float32{1, 1}}
	}
	goodAttn := func() Attention {
		return Attention{Module: "model.layers.0.self_attn", KAbsMax: 5, VAbsMax: 1, KHeadAbsMax: []float32{5, 1}}
	}
	tests := []struct {
		name   string
		meta   func(*Meta)
		linear func(*Linear)
		attn   func(*Attention)
		extra  bool // a second linear with the same module
		empty  bool
		want   string
	}{
		{name: "no model_type", meta: func(m *Meta) { m.ModelType = "" }, want: "model_type is empty"},
		{name: "bad sha", meta: func(m *Meta) { m.ConfigSHA256 = strings.ToUpper(m.ConfigSHA256) }, want: "64 lowercase hex"},
		{name: "short sha", meta: func(m *Meta) { m.ConfigSHA256 = "abc" }, want: "64 lowercase hex"},
		{name: "no samples", meta: func(m *Meta) { m.Samples = 0 }, want: "samples = 0"},
		{name: "no tokens", meta: func(m *Meta) { m.Tokens = 0 }, want: "tokens = 0"},
		{name: "no seq_len", meta: func(m *Meta) { m.SeqLen = -1 }, want: "seq_len = -1"},
		{name: "too many tokens", meta: func(m *Meta) { m.Tokens = 33 }, want: "more than samples × seq_len"},
		{name: "bad utf8", meta: func(m *Meta) { m.Dataset = "\xff" }, want: "not valid UTF-8"},
		{name: "nothing", empty: true, want: "no statistics to write"},
		{name: "duplicate", extra: true, want: "given twice"},
		{name: "bad module", linear: func(l *Linear) { l.Module = "model..x" }, want: "empty segment"},
		{name: "module chars", linear: func(l *Linear) { l.Module = "model.x-y" }, want: "character other than"},
		{name: "empty module", linear: func(l *Linear) { l.Module = "" }, want: "empty module name"},
		{name: "no channels", linear: func(l *Linear) { l.ChannelAbsMax, l.MeanAbs = nil, nil }, want: "input_channel_absmax is empty"},
		{name: "mean length", linear: func(l *Linear) { l.MeanAbs = []float32{1} }, want: "input_mean_abs has 1 elements"},
		{name: "nan absmax", linear: func(l *Linear) { l.InputAbsMax = nan }, want: "input_absmax is NaN"},
		{name: "negative absmax", linear: func(l *Linear) { l.InputAbsMax = -2 }, want: "input_absmax = -2 is negative"},
		{name: "inf channel", linear: func(l *Linear) { l.ChannelAbsMax[1] = inf }, want: "input_channel_absmax[1] is +Inf"},
		{name: "negative channel", linear: func(l *Linear) { l.ChannelAbsMax[1] = -1 }, want: "input_channel_absmax[1] = -1 is negative"},
		{name: "absmax not max", linear: func(l *Linear) { l.InputAbsMax = 3 }, want: "maximum over its 2 elements is 2 but input_absmax is 3"},
		{name: "nan mean", linear: func(l *Linear) { l.MeanAbs[0] = nan }, want: "input_mean_abs[0] is NaN"},
		{name: "mean above max", linear: func(l *Linear) { l.MeanAbs[1] = 1.5 }, want: "cannot exceed its maximum"},
		{name: "hessian tokens", linear: func(l *Linear) { l.Hessian = HessianFromFloat32(make([]float32, 4)) }, want: "hessian_tokens = 0, want at least 1"},
		{name: "tokens without hessian", linear: func(l *Linear) { l.HessianTokens = 3 }, want: "without a Hessian"},
		{name: "hessian size", linear: func(l *Linear) { l.Hessian, l.HessianTokens = HessianFromFloat32(make([]float32, 3)), 1 }, want: "holds 3 elements, want 2 × 2"},
		{name: "hessian nan", linear: func(l *Linear) { l.Hessian, l.HessianTokens = HessianFromFloat32([]float32{1, 0, nan, 1}), 1 }, want: "hessian[1, 0] is NaN"},
		{name: "hessian diagonal", linear: func(l *Linear) { l.Hessian, l.HessianTokens = HessianFromFloat32([]float32{1, 0, 0, -1}), 1 }, want: "hessian[1, 1] = -1: a diagonal element"},
		{name: "hessian source error", linear: func(l *Linear) {
			l.Hessian, l.HessianTokens = func(int, []float32) error { return io.ErrUnexpectedEOF }, 1
		}, want: "hessian row 0: unexpected EOF"},
		{name: "attn nan", attn: func(a *Attention) { a.VAbsMax = nan }, want: "v_absmax is NaN"},
		{name: "attn negative", attn: func(a *Attention) { a.KAbsMax = -1 }, want: "k_absmax = -1 is negative"},
		{name: "attn heads", attn: func(a *Attention) { a.KHeadAbsMax = []float32{} }, want: "k_head_absmax is empty"},
		{name: "attn heads max", attn: func(a *Attention) { a.KHeadAbsMax = []float32{4, 1} }, want: "but k_absmax is 5"},
		{name: "attn same module", attn: func(a *Attention) { a.Module = "model.layers.0.mlp.up_proj" }, want: "given twice"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "stats.safetensors")
			// An old file must survive a failed write.
			if err := os.WriteFile(path, []byte("old"), 0o644); err != nil {
				t.Fatal(err)
			}
			m, l, a := testMeta(), good(), goodAttn()
			if tc.meta != nil {
				tc.meta(&m)
			}
			if tc.linear != nil {
				tc.linear(&l)
			}
			if tc.attn != nil {
				tc.attn(&a)
			}
			ls, as := []Linear{l}, []Attention{a}
			if tc.extra {
				ls = append(ls, good())
			}
			if tc.empty {
				ls, as = nil, nil
			}
			err := Write(path, m, ls, as, WriteOptions{})
			if err == nil {
				t.Fatal("no error")
			}
			if !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), path) {
				t.Errorf("error %q, want it to name %s and contain %q", err, path, tc.want)
			}
			if tc.name != "hessian source error" && !errors.Is(err, ErrInvalid) {
				t.Errorf("error %q does not wrap ErrInvalid", err)
			}
			if b, _ := os.ReadFile(path); string(b) != "old" {
				t.Errorf("the old file was replaced")
			}
			if entries, _ := os.ReadDir(dir); len(entries) != 1 {
				t.Errorf("left behind: %v", entries)
			}
		})
	}
}

func TestMissing(t *testing.T) {
	path := writeTest(t)
	s := openTest(t, path)
	tests := []struct {
		name string
		call func() error
		want string
	}{
		{"InputAbsMax", func() error { _, err := s.InputAbsMax("model.layers.3.mlp.down_proj"); return err }, "for model.layers.3.mlp.down_proj: the statistics file"},
		{"ChannelAbsMax", func() error { _, err := s.ChannelAbsMax("nope"); return err }, "for nope:"},
		{"MeanAbs", func() error { _, err := s.MeanAbs("nope"); return err }, "for nope:"},
		{"attention as linear", func() error { _, err := s.InputAbsMax("model.layers.2.self_attn"); return err }, "KV-cache statistics for this attention module"},
		{"Hessian", func() error { _, err := s.Hessian("model.layers.10.self_attn.q_proj"); return err }, "q_proj.hessian: the statistics file " + path + " was made for qwen3"},
		{"KVAbsMax", func() error { _, _, err := s.KVAbsMax("model.layers.3.self_attn"); return err }, "for model.layers.3.self_attn:"},
		{"KHeadAbsMax", func() error { _, err := s.KHeadAbsMax("model.layers.10.self_attn"); return err }, "k_head_absmax"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			if !errors.Is(err, ErrMissing) {
				t.Fatalf("error %v does not wrap ErrMissing", err)
			}
			for _, w := range []string{tc.want, "no calibration statistics", path, "run lowbit calibrate", "ultrachat"} {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

func TestCheckModel(t *testing.T) {
	s := openTest(t, writeTest(t))
	if err := s.CheckModel(testConfig); err != nil {
		t.Errorf("same config: %v", err)
	}
	other := []byte(`{"model_type": "qwen3_moe", "hidden_size": 4}`)
	err := s.CheckModel(other)
	if !errors.Is(err, ErrWrongModel) {
		t.Fatalf("error %v does not wrap ErrWrongModel", err)
	}
	for _, w := range []string{"statistics are for another model", "made for qwen3, config sha256 " + ConfigSHA256(testConfig)[:12], "this model is qwen3_moe, config sha256 " + ConfigSHA256(other)[:12], "rerun lowbit calibrate"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q does not contain %q", err, w)
		}
	}
	// Reformatting the same config is a different config, by design.
	if err := s.CheckModel(append(testConfig, '\n')); !errors.Is(err, ErrWrongModel) {
		t.Errorf("reformatted config: %v", err)
	}
	if err := s.CheckModel([]byte("not json")); !errors.Is(err, ErrWrongModel) || !strings.Contains(err.Error(), "unknown model_type") {
		t.Errorf("not json: %v", err)
	}
}

func TestClosed(t *testing.T) {
	s, err := Open(writeTest(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if _, err := s.InputAbsMax("model.layers.2.mlp.down_proj"); !errors.Is(err, checkpoint.ErrClosed) {
		t.Errorf("InputAbsMax after Close: %v", err)
	}
	if _, err := s.Hessian("model.layers.2.mlp.down_proj"); !errors.Is(err, checkpoint.ErrClosed) {
		t.Errorf("Hessian after Close: %v", err)
	}
	if _, _, err := s.KVAbsMax("model.layers.2.self_attn"); !errors.Is(err, checkpoint.ErrClosed) {
		t.Errorf("KVAbsMax after Close: %v", err)
	}
}

// rawTensor is a tensor of a hand-made file.
type rawTensor struct {
	name  string
	dtype format.DType
	shape []int64
	f32   []float32 // F32 data
	i64   int64     // I64 data of shape [1]
}

func f32t(name string, v ...float32) rawTensor {
	return rawTensor{name: name, dtype: format.F32, shape: []int64{int64(len(v))}, f32: v}
}

// writeRaw writes tensors with metadata md as a safetensors file, bypassing
// Write's checks, and returns its path.
func writeRaw(t *testing.T, md map[string]string, ts []rawTensor) string {
	t.Helper()
	dir := t.TempDir()
	specs := make([]checkpoint.TensorSpec, len(ts))
	for i, x := range ts {
		specs[i] = checkpoint.TensorSpec{Name: x.name, DType: x.dtype, Shape: x.shape}
	}
	fill := func(i int, w io.Writer) error {
		x := ts[i]
		if x.dtype == format.I64 {
			var b [8]byte
			binary.LittleEndian.PutUint64(b[:], uint64(x.i64))
			_, err := w.Write(b[:])
			return err
		}
		n := int64(1)
		for _, d := range x.shape {
			n *= d
		}
		b := make([]byte, n*int64(x.dtype.Size()))
		if x.dtype == format.F32 {
			format.EncodeF32(b, x.f32)
		}
		_, err := w.Write(b)
		return err
	}
	if _, err := checkpoint.WriteTensors(dir, specs, fill, checkpoint.WriteOptions{Metadata: md}); err != nil {
		t.Fatal(err)
	}
	return filepath.Join(dir, checkpoint.SingleFileName)
}

func goodRawMeta() map[string]string { return testMeta().encode() }

func goodRawLinear(m string) []rawTensor {
	return []rawTensor{f32t(m+".input_absmax", 2), f32t(m+".input_channel_absmax", 2, 1), f32t(m+".input_mean_abs", 1, 1)}
}

func TestOpenRejects(t *testing.T) {
	const m = "model.layers.0.mlp.down_proj"
	const a = "model.layers.0.self_attn"
	withMeta := func(k, v string) map[string]string {
		md := goodRawMeta()
		if v == "" {
			delete(md, k)
		} else {
			md[k] = v
		}
		return md
	}
	hess := func(v ...float32) rawTensor {
		return rawTensor{name: m + ".hessian", dtype: format.F32, shape: []int64{2, 2}, f32: v}
	}
	tokens := rawTensor{name: m + ".hessian_tokens", dtype: format.I64, shape: []int64{1}, i64: 4}
	tests := []struct {
		name    string
		md      map[string]string
		tensors []rawTensor
		is      error
		want    string
	}{
		{"no version", withMeta(keyVersion, ""), goodRawLinear(m), ErrVersion, "not a lowbit calibration statistics file"},
		{"version 2", withMeta(keyVersion, "2"), goodRawLinear(m), ErrVersion, `format version "2"`},
		{"no metadata", nil, goodRawLinear(m), ErrVersion, "no lowbit_stats_version"},
		{"no model_type", withMeta(keyModelType, ""), goodRawLinear(m), ErrInvalid, "no model_type"},
		{"no tokens", withMeta(keyTokens, ""), goodRawLinear(m), ErrInvalid, "no tokens"},
		{"plus sign", withMeta(keySamples, "+4"), goodRawLinear(m), ErrInvalid, `samples = "+4"`},
		{"leading zero", withMeta(keySeqLen, "08"), goodRawLinear(m), ErrInvalid, `seq_len = "08"`},
		{"negative", withMeta(keyTokens, "-1"), goodRawLinear(m), ErrInvalid, "tokens = -1"},
		{"bad sha", withMeta(keyConfigSHA256, "xyz"), goodRawLinear(m), ErrInvalid, "64 lowercase hex"},
		{"empty", goodRawMeta(), nil, ErrInvalid, "holds no statistics"},
		{"unknown statistic", goodRawMeta(), append(goodRawLinear(m), f32t(m+".output_absmax", 1)), ErrInvalid, `unknown statistic "output_absmax"`},
		{"no dot", goodRawMeta(), []rawTensor{f32t("absmax", 1)}, ErrInvalid, "not MODULE.STATISTIC"},
		{"bad module", goodRawMeta(), []rawTensor{f32t("a..input_absmax", 1)}, ErrInvalid, "empty segment"},
		{"wrong dtype", goodRawMeta(), []rawTensor{f32t(m+".input_absmax", 2), f32t(m+".input_channel_absmax", 2, 1),
			{name: m + ".input_mean_abs", dtype: format.BF16, shape: []int64{2}}}, ErrInvalid, "input_mean_abs is BF16, want F32"},
		{"missing absmax", goodRawMeta(), goodRawLinear(m)[1:], ErrInvalid, "has no input_absmax"},
		{"missing channel", goodRawMeta(), []rawTensor{f32t(m+".input_absmax", 2)}, ErrInvalid, "has no input_channel_absmax"},
		{"missing mean", goodRawMeta(), goodRawLinear(m)[:2], ErrInvalid, "has no input_mean_abs"},
		{"absmax shape", goodRawMeta(), []rawTensor{f32t(m+".input_absmax", 2, 2), f32t(m+".input_channel_absmax", 2, 1), f32t(m+".input_mean_abs", 1, 1)}, ErrInvalid, "input_absmax has shape [2], want [1]"},
		{"mean shape", goodRawMeta(), []rawTensor{f32t(m+".input_absmax", 2), f32t(m+".input_channel_absmax", 2, 1), f32t(m+".input_mean_abs", 1, 1, 1)}, ErrInvalid, "input_mean_abs has shape [3], want [2]"},
		{"channel rank", goodRawMeta(), []rawTensor{f32t(m+".input_absmax", 2), {name: m + ".input_channel_absmax", dtype: format.F32, shape: []int64{1, 2}, f32: []float32{2, 1}}, f32t(m+".input_mean_abs", 1, 1)}, ErrInvalid, "want [n] with n >= 1"},
		{"hessian shape", goodRawMeta(), append(goodRawLinear(m), rawTensor{name: m + ".hessian", dtype: format.F32, shape: []int64{2, 3}, f32: make([]float32, 6)}, tokens), ErrInvalid, "hessian has shape [2 3], want [2 2]"},
		{"hessian without tokens", goodRawMeta(), append(goodRawLinear(m), hess(1, 0, 0, 1)), ErrInvalid, "without the other"},
		{"tokens without hessian", goodRawMeta(), append(goodRawLinear(m), tokens), ErrInvalid, "without the other"},
		{"zero tokens", goodRawMeta(), append(goodRawLinear(m), hess(1, 0, 0, 1), rawTensor{name: m + ".hessian_tokens", dtype: format.I64, shape: []int64{1}}), ErrInvalid, "hessian_tokens = 0"},
		{"both kinds", goodRawMeta(), append(goodRawLinear(m), f32t(m+".k_absmax", 1)), ErrInvalid, "both linear and attention"},
		{"nan channel", goodRawMeta(), []rawTensor{f32t(m+".input_absmax", 2), f32t(m+".input_channel_absmax", 2, float32(math.NaN())), f32t(m+".input_mean_abs", 1, 1)}, ErrInvalid, m + ".input_channel_absmax[1] is NaN"},
		{"negative absmax", goodRawMeta(), []rawTensor{f32t(m+".input_absmax", -2), f32t(m+".input_channel_absmax", 2, 1), f32t(m+".input_mean_abs", 1, 1)}, ErrInvalid, m + ".input_absmax = -2 is negative"},
		{"missing v", goodRawMeta(), []rawTensor{f32t(a+".k_absmax", 1)}, ErrInvalid, "has no v_absmax"},
		{"k shape", goodRawMeta(), []rawTensor{f32t(a+".k_absmax", 1, 1), f32t(a+".v_absmax", 1)}, ErrInvalid, "k_absmax has shape [2], want [1]"},
		{"inf v", goodRawMeta(), []rawTensor{f32t(a+".k_absmax", 1), f32t(a+".v_absmax", float32(math.Inf(-1)))}, ErrInvalid, a + ".v_absmax is -Inf"},
		{"heads", goodRawMeta(), []rawTensor{f32t(a+".k_absmax", 1), f32t(a+".v_absmax", 1), f32t(a+".k_head_absmax", 1, 2)}, ErrInvalid, "maximum over its 2 elements is 2 but k_absmax is 1"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := writeRaw(t, tc.md, tc.tensors)
			s, err := Open(path)
			if err == nil {
				s.Close()
				t.Fatal("no error")
			}
			if !errors.Is(err, tc.is) {
				t.Errorf("error %q does not wrap %v", err, tc.is)
			}
			if !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), path) {
				t.Errorf("error %q, want it to name the file and contain %q", err, tc.want)
			}
		})
	}
}

// TestHessianChecked: bad Hessian values are found on access, not by Open.
func TestHessianChecked(t *testing.T) {
	const m = "model.layers.0.mlp.down_proj"
	tokens := rawTensor{name: m + ".hessian_tokens", dtype: format.I64, shape: []int64{1}, i64: 4}
	for _, tc := range []struct {
		h    []float32
		want string
	}{
		{[]float32{1, 0, float32(math.Inf(1)), 1}, m + ".hessian[1, 0] is +Inf"},
		{[]float32{-1, 0, 0, 1}, m + ".hessian[0, 0] = -1: a diagonal element"},
	} {
		path := writeRaw(t, goodRawMeta(), append(goodRawLinear(m), rawTensor{name: m + ".hessian", dtype: format.F32, shape: []int64{2, 2}, f32: tc.h}, tokens))
		s := openTest(t, path)
		for range 2 { // the cached result is reported too
			_, err := s.Hessian(m)
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), path) {
				t.Errorf("Hessian: %v, want ErrInvalid with %q", err, tc.want)
			}
		}
	}
}

func TestOpenNotSafetensors(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x")
	if err := os.WriteFile(path, []byte("hello, world"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(path); !errors.Is(err, checkpoint.ErrCorrupt) {
		t.Errorf("Open: %v, want checkpoint.ErrCorrupt", err)
	}
	if _, err := Open(filepath.Join(t.TempDir(), "absent")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Open: %v, want os.ErrNotExist", err)
	}
}

func TestWriteReplacesAtomically(t *testing.T) {
	path := writeTest(t)
	l := testLinears()[:1]
	l[0].Module = "model.layers.0.self_attn.o_proj"
	if err := Write(path, testMeta(), l, nil, WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	s := openTest(t, path)
	if got := s.Modules(); !slices.Equal(got, []string{"model.layers.0.self_attn.o_proj"}) {
		t.Errorf("Modules() = %q", got)
	}
	if entries, _ := os.ReadDir(filepath.Dir(path)); len(entries) != 1 {
		t.Errorf("left behind: %v", entries)
	}
	// A directory in the way is an error, not a silent success.
	dir := filepath.Join(t.TempDir(), "d")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := Write(dir, testMeta(), l, nil, WriteOptions{}); err == nil {
		t.Error("writing over a directory succeeded")
	}
}
