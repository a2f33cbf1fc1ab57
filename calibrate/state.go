package calibrate

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"

	"github.com/lowbit-ai/lowbit/checkpoint"
	"github.com/lowbit-ai/lowbit/format"
)

// The work directory of a run holds what survives an interruption:
//
//	manifest.json                  what the run is (model, samples, passes); a resumed run must match it
//	pass-NNN.safetensors           the statistics of a finished pass, in the calibrate/stats format
//	pass-NNN.partial.safetensors   the running pass's accumulators after its first k samples
//
// Every file is written to a temporary name and renamed, so each is either
// absent or complete. A resumed run skips finished passes and continues the
// running one from its partial file.

// ErrState is wrapped by the errors of a work directory that cannot be
// resumed: another run's manifest, or a damaged partial file.
var ErrState = errors.New("calibrate: cannot resume")

const manifestVersion = 1

// manifest identifies a run. Two runs with equal manifests compute the same
// statistics, so one may finish what the other started.
type manifest struct {
	Version       int    `json:"version"`
	ConfigSHA256  string `json:"config_sha256"`
	SamplesSHA256 string `json:"samples_sha256"`
	Samples       int    `json:"samples"`
	Tokens        int64  `json:"tokens"`
	SeqLen        int    `json:"seq_len"`
	Dataset       string `json:"dataset"`
	Hessian       bool   `json:"hessian"`
	Layers        int    `json:"layers"`
	LayersPerPass int    `json:"layers_per_pass"`
}

const manifestName = "manifest.json"

func passFile(dir string, p int) string {
	return filepath.Join(dir, fmt.Sprintf("pass-%03d.safetensors", p))
}

func partialFile(dir string, p int) string {
	return filepath.Join(dir, fmt.Sprintf("pass-%03d.partial.safetensors", p))
}

// openWorkDir creates dir with want's manifest, or checks that an existing
// one describes the same run (layers_per_pass aside, which it returns: a
// resumed run keeps the passes it started with). resumed reports whether a
// manifest was there.
func openWorkDir(dir string, want manifest) (layersPerPass int, resumed bool, err error) {
	b, err := os.ReadFile(filepath.Join(dir, manifestName))
	if errors.Is(err, os.ErrNotExist) {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return 0, false, fmt.Errorf("calibrate: %w", err)
		}
		js, err := json.MarshalIndent(want, "", "  ")
		if err != nil {
			return 0, false, err
		}
		if err := checkpoint.WriteFileAtomic(filepath.Join(dir, manifestName), append(js, '\n'), 0o644); err != nil {
			return 0, false, fmt.Errorf("calibrate: %w", err)
		}
		return want.LayersPerPass, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("calibrate: %w", err)
	}
	var got manifest
	if err := json.Unmarshal(b, &got); err != nil {
		return 0, false, fmt.Errorf("%w: %s: %v; delete %s to start over", ErrState, filepath.Join(dir, manifestName), err, dir)
	}
	if got.LayersPerPass < 1 || got.LayersPerPass > max(got.Layers, 1) {
		return 0, false, fmt.Errorf("%w: %s: layers_per_pass %d of %d layers; delete %s to start over", ErrState, filepath.Join(dir, manifestName), got.LayersPerPass, got.Layers, dir)
	}
	w := want
	w.LayersPerPass = got.LayersPerPass
	if got != w {
		return 0, false, fmt.Errorf("%w: %s holds a run with other settings (%s); rerun with the same model, data, --samples, --seq-len and --hessian, or delete %s to start over",
			ErrState, dir, manifestDiff(got, w), dir)
	}
	return got.LayersPerPass, true, nil
}

// manifestDiff names the first fields in which two manifests differ.
func manifestDiff(got, want manifest) string {
	var d []string
	add := func(name string, a, b any) {
		if a != b {
			d = append(d, fmt.Sprintf("%s %v, now %v", name, a, b))
		}
	}
	add("format version", got.Version, want.Version)
	add("model config sha256", got.ConfigSHA256, want.ConfigSHA256)
	add("samples sha256", got.SamplesSHA256, want.SamplesSHA256)
	add("samples", got.Samples, want.Samples)
	add("tokens", got.Tokens, want.Tokens)
	add("seq_len", got.SeqLen, want.SeqLen)
	add("dataset", got.Dataset, want.Dataset)
	add("hessian", got.Hessian, want.Hessian)
	add("layers", got.Layers, want.Layers)
	if len(d) > 3 {
		d = d[:3]
	}
	return fmt.Sprint(d)
}

// Partial files hold, per layer L of the pass, per site S:
//
//	layers.L.S.absmax    F32 [n]
//	layers.L.S.sum_abs   F64 [n]
//	layers.L.S.hessian   F64 [n, n]   with Hessians (the upper triangle is what counts)
//	layers.L.k_head_absmax F32 [kv_heads]
//	layers.L.v_absmax      F32 [1]
//
// and the metadata next_sample (samples folded in) and tokens (their tokens).

func stateName(layer int, parts ...string) string {
	s := "layers." + strconv.Itoa(layer)
	for _, p := range parts {
		s += "." + p
	}
	return s
}

// tensorFill is one tensor of a partial file.
type tensorFill struct {
	spec checkpoint.TensorSpec
	fill func(w io.Writer) error
}

func stateTensors(layers []*layerStats) []tensorFill {
	var ts []tensorFill
	add := func(name string, d format.DType, shape []int64, fill func(w io.Writer) error) {
		ts = append(ts, tensorFill{checkpoint.TensorSpec{Name: name, DType: d, Shape: shape}, fill})
	}
	for _, l := range layers {
		for j, s := range l.sites {
			n := int64(s.n)
			add(stateName(l.index, siteNames[j], "absmax"), format.F32, []int64{n}, f32Writer(s.absmax))
			add(stateName(l.index, siteNames[j], "sum_abs"), format.F64, []int64{n}, f64Writer(s.sumAbs))
			if s.h != nil {
				add(stateName(l.index, siteNames[j], "hessian"), format.F64, []int64{n, n}, f64Writer(s.h))
			}
		}
		add(stateName(l.index, "k_head_absmax"), format.F32, []int64{int64(len(l.kv.kHead))}, f32Writer(l.kv.kHead))
		add(stateName(l.index, "v_absmax"), format.F32, []int64{1}, f32Writer([]float32{l.kv.v}))
	}
	return ts
}

func f32Writer(v []float32) func(w io.Writer) error {
	return func(w io.Writer) error {
		b := make([]byte, 4*len(v))
		format.EncodeF32(b, v)
		_, err := w.Write(b)
		return err
	}
}

// f64Writer writes v in pieces, so that a Hessian needs no second copy.
func f64Writer(v []float64) func(w io.Writer) error {
	return func(w io.Writer) error {
		buf := make([]byte, 8*min(len(v), 1<<16))
		for len(v) > 0 {
			n := min(len(v), len(buf)/8)
			for i, x := range v[:n] {
				binary.LittleEndian.PutUint64(buf[8*i:], math.Float64bits(x))
			}
			if _, err := w.Write(buf[:8*n]); err != nil {
				return err
			}
			v = v[n:]
		}
		return nil
	}
}

// writeSafetensors writes one safetensors file at path, atomically.
func writeSafetensors(path string, ts []tensorFill, metadata map[string]string) error {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	tmp, err := os.MkdirTemp(dir, "."+base+".tmp-*")
	if err != nil {
		return fmt.Errorf("calibrate: %w", err)
	}
	defer os.RemoveAll(tmp)
	specs := make([]checkpoint.TensorSpec, len(ts))
	for i, t := range ts {
		specs[i] = t.spec
	}
	_, err = checkpoint.WriteTensors(tmp, specs, func(i int, w io.Writer) error { return ts[i].fill(w) },
		checkpoint.WriteOptions{MaxShardBytes: math.MaxInt64, Metadata: metadata})
	if err != nil {
		return fmt.Errorf("calibrate: %w", err)
	}
	if err := os.Rename(filepath.Join(tmp, checkpoint.SingleFileName), path); err != nil {
		return fmt.Errorf("calibrate: %w", err)
	}
	return nil
}

// savePartial writes the accumulators of a pass after next samples.
func savePartial(path string, layers []*layerStats, next int, tokens int64) error {
	return writeSafetensors(path, stateTensors(layers), map[string]string{
		"next_sample": strconv.Itoa(next),
		"tokens":      strconv.FormatInt(tokens, 10),
	})
}

// loadPartial reads a partial file into layers (fresh accumulators of the
// pass, which fix the expected names, dtypes and shapes) and returns how
// many samples and tokens it holds. Every value is checked; prefixTokens
// gives the tokens of the first k samples, which must match.
func loadPartial(path string, layers []*layerStats, samples int, prefixTokens func(k int) int64) (next int, tokens int64, err error) {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s: %s; delete this file to redo its pass from the start", ErrState, path, fmt.Sprintf(format, args...))
	}
	f, err := checkpoint.OpenFile(path)
	if err != nil {
		return 0, 0, bad("%v", err)
	}
	defer f.Close()
	h := f.Header()
	next, err = strconv.Atoi(h.Metadata["next_sample"])
	if err != nil || next < 1 || next > samples {
		return 0, 0, bad("next_sample %q is not in [1, %d]", h.Metadata["next_sample"], samples)
	}
	tokens, err = strconv.ParseInt(h.Metadata["tokens"], 10, 64)
	if err != nil || tokens != prefixTokens(next) {
		return 0, 0, bad("tokens %q, want %d for the first %d samples", h.Metadata["tokens"], prefixTokens(next), next)
	}
	want := stateTensors(layers)
	if len(h.Tensors) != len(want) {
		return 0, 0, bad("%d tensors, want %d", len(h.Tensors), len(want))
	}
	for _, w := range want {
		t, err := f.Tensor(w.spec.Name)
		if err != nil {
			return 0, 0, bad("%v", err)
		}
		if t.Info.DType != w.spec.DType || !slices.Equal(t.Info.Shape, w.spec.Shape) {
			return 0, 0, bad("tensor %s is %s %v, want %s %v", w.spec.Name, t.Info.DType, t.Info.Shape, w.spec.DType, w.spec.Shape)
		}
	}
	for _, l := range layers {
		for j, s := range l.sites {
			get := func(part string) []byte {
				t, _ := f.Tensor(stateName(l.index, siteNames[j], part))
				return t.Data
			}
			if err := readF32(s.absmax, get("absmax")); err != nil {
				return 0, 0, bad("%s: %v", stateName(l.index, siteNames[j], "absmax"), err)
			}
			if err := readF64(s.sumAbs, get("sum_abs"), true); err != nil {
				return 0, 0, bad("%s: %v", stateName(l.index, siteNames[j], "sum_abs"), err)
			}
			if s.h != nil {
				if err := readF64(s.h, get("hessian"), false); err != nil {
					return 0, 0, bad("%s: %v", stateName(l.index, siteNames[j], "hessian"), err)
				}
			}
			s.tokens = tokens
		}
		t, _ := f.Tensor(stateName(l.index, "k_head_absmax"))
		if err := readF32(l.kv.kHead, t.Data); err != nil {
			return 0, 0, bad("%s: %v", stateName(l.index, "k_head_absmax"), err)
		}
		t, _ = f.Tensor(stateName(l.index, "v_absmax"))
		v := []float32{0}
		if err := readF32(v, t.Data); err != nil {
			return 0, 0, bad("%s: %v", stateName(l.index, "v_absmax"), err)
		}
		l.kv.v = v[0]
	}
	return next, tokens, nil
}

// readF32 decodes maxima of |x|: finite and non-negative.
func readF32(dst []float32, b []byte) error {
	format.DecodeF32(dst, b)
	for i, v := range dst {
		if !(v >= 0) || math.IsInf(float64(v), 0) {
			return fmt.Errorf("element %d is %v", i, v)
		}
	}
	return nil
}

// readF64 decodes finite float64s, non-negative when nonNeg.
func readF64(dst []float64, b []byte, nonNeg bool) error {
	for i := range dst {
		v := math.Float64frombits(binary.LittleEndian.Uint64(b[8*i:]))
		if math.IsNaN(v) || math.IsInf(v, 0) || (nonNeg && v < 0) {
			return fmt.Errorf("element %d is %v", i, v)
		}
		dst[i] = v
	}
	return nil
}
