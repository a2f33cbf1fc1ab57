package calibrate

import (
	"bytes"
	"context"
	"errors"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lowbit-ai/lowbit/calibrate/stats"
	"github.com/lowbit-ai/lowbit/checkpoint"
	"github.com/lowbit-ai/lowbit/kernels/ref"
	"github.com/lowbit-ai/lowbit/runtime"
	"github.com/lowbit-ai/lowbit/synth"
	"github.com/lowbit-ai/lowbit/tokenizer"
)

// The tiny model and its tokenizer, made once for the package's tests
// (writing the model and loading Qwen3's tokenizer take about a second
// each). Tests must not change the shared model directory.
var shared struct {
	once sync.Once
	root string
	dir  string
	tok  *tokenizer.Tokenizer
	err  error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if shared.root != "" {
		os.RemoveAll(shared.root)
	}
	os.Exit(code)
}

// writeTiny writes synth's tiny Qwen3 (2 layers, hidden 64) into dir.
func writeTiny(t testing.TB, dir string) {
	t.Helper()
	if _, err := synth.Write(dir, synth.Options{Arch: checkpoint.Qwen3, Size: synth.Tiny, Seed: 1}); err != nil {
		t.Fatal(err)
	}
}

// tinyModel returns the shared tiny model's directory.
func tinyModel(t testing.TB) string {
	t.Helper()
	shared.once.Do(func() {
		if shared.root, shared.err = os.MkdirTemp("", "calibrate-test-"); shared.err != nil {
			return
		}
		shared.dir = filepath.Join(shared.root, "model")
		if _, shared.err = synth.Write(shared.dir, synth.Options{Arch: checkpoint.Qwen3, Size: synth.Tiny, Seed: 1}); shared.err != nil {
			return
		}
		shared.tok, shared.err = tokenizer.LoadDir(shared.dir)
	})
	if shared.err != nil {
		t.Fatal(shared.err)
	}
	return shared.dir
}

func load(t testing.TB, dir string) *runtime.Model {
	t.Helper()
	m, err := runtime.Load(dir, ref.Ops{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

// builtinSamples tokenizes the first n built-in documents with the Qwen3
// tokenizer every synthetic model carries.
func builtinSamples(t testing.TB, n, seqLen int) [][]int {
	t.Helper()
	tinyModel(t)
	docs, err := ReadDocuments(Builtin)
	if err != nil {
		t.Fatal(err)
	}
	s, err := Samples(docs, shared.tok.Encode, n, seqLen)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestRunMatchesDirect checks the written statistics against ones computed
// in the test from every observation of an independent forward.
func TestRunMatchesDirect(t *testing.T) {
	dir := tinyModel(t)
	m := load(t, dir)
	samples := builtinSamples(t, 5, 24)
	out := filepath.Join(t.TempDir(), "stats.safetensors")
	res, err := Run(context.Background(), m, samples, out, Options{Hessian: true, Dataset: "builtin", CreatedBy: "test"})
	if err != nil {
		t.Fatal(err)
	}
	if res.Passes != 1 || res.ResumedPass != 0 || res.ResumedSample != 0 {
		t.Errorf("result %+v", res)
	}
	if _, err := os.Stat(out + ".partial"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("work directory left behind: %v", err)
	}
	s, err := stats.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	cfg, _ := os.ReadFile(filepath.Join(dir, "config.json"))
	if err := s.CheckModel(cfg); err != nil {
		t.Error(err)
	}
	var tokens, longest int
	for _, x := range samples {
		tokens += len(x)
		longest = max(longest, len(x))
	}
	if meta := s.Meta(); meta.ModelType != "qwen3" || meta.Samples != 5 || meta.Tokens != int64(tokens) || meta.SeqLen != int64(longest) || meta.Dataset != "builtin" {
		t.Errorf("meta %+v", meta)
	}

	// Every observation, collected by an independent forward.
	type key struct {
		layer int
		p     runtime.ObservePoint
	}
	obs := map[key][][]float32{} // rows
	seq := m.NewSequence(0)
	for _, x := range samples {
		seq.Truncate(0)
		_, err := m.ForwardWith(seq, x, runtime.ForwardOptions{LastOnly: true, Observe: func(layer int, p runtime.ObservePoint, v []float32, T int) {
			w := len(v) / T
			for i := range T {
				obs[key{layer, p}] = append(obs[key{layer, p}], slices.Clone(v[i*w:(i+1)*w]))
			}
		}})
		if err != nil {
			t.Fatal(err)
		}
	}
	if got := len(s.Modules()); got != 2*7 {
		t.Errorf("%d linear modules, want 14", got)
	}
	for layer := range 2 {
		for j, mods := range siteModules {
			rows := obs[key{layer, []runtime.ObservePoint{runtime.ObserveAttnInput, runtime.ObserveOProjInput, runtime.ObserveMLPInput, runtime.ObserveDownInput}[j]}]
			for _, mod := range mods {
				checkLinear(t, s, prefix(layer)+mod, rows)
			}
		}
		attn := prefix(layer) + "self_attn"
		k, v, err := s.KVAbsMax(attn)
		if err != nil {
			t.Fatal(err)
		}
		heads, err := s.KHeadAbsMax(attn)
		if err != nil {
			t.Fatal(err)
		}
		wantHeads := make([]float32, 2) // tiny: 2 KV heads of 16
		var wantV float32
		for _, r := range obs[key{layer, runtime.ObserveKey}] {
			for i, x := range r {
				wantHeads[i/16] = max(wantHeads[i/16], float32(math.Abs(float64(x))))
			}
		}
		for _, r := range obs[key{layer, runtime.ObserveValue}] {
			for _, x := range r {
				wantV = max(wantV, float32(math.Abs(float64(x))))
			}
		}
		if !slices.Equal(heads, wantHeads) || k != slices.Max(wantHeads) || v != wantV {
			t.Errorf("%s: k heads %v k %v v %v, want %v %v %v", attn, heads, k, v, wantHeads, slices.Max(wantHeads), wantV)
		}
	}
}

func checkLinear(t *testing.T, s *stats.Stats, module string, rows [][]float32) {
	t.Helper()
	n := len(rows[0])
	amax, err := s.ChannelAbsMax(module)
	if err != nil {
		t.Fatal(err)
	}
	mean, _ := s.MeanAbs(module)
	h, err := s.Hessian(module)
	if err != nil {
		t.Fatal(err)
	}
	if len(amax) != n || h.N() != n || h.Tokens() != int64(len(rows)) {
		t.Fatalf("%s: %d channels, Hessian %d over %d tokens; want %d channels, %d tokens", module, len(amax), h.N(), h.Tokens(), n, len(rows))
	}
	for c := range n {
		var a float32
		var sum float64
		for _, r := range rows {
			a = max(a, float32(math.Abs(float64(r[c]))))
			sum += math.Abs(float64(r[c]))
		}
		if amax[c] != a || math.Abs(float64(mean[c])-sum/float64(len(rows))) > 1e-6*sum/float64(len(rows)) {
			t.Fatalf("%s channel %d: absmax %v mean %v, want %v %v", module, c, amax[c], mean[c], a, sum/float64(len(rows)))
		}
		for _, j := range []int{0, c, n - 1} {
			var want float64
			for _, r := range rows {
				want += float64(r[c]) * float64(r[j])
			}
			if got := float64(h.At(c, j)); math.Abs(got-want) > 1e-5*math.Abs(want)+1e-5 {
				t.Fatalf("%s: H[%d, %d] = %v, want %v", module, c, j, got, want)
			}
		}
	}
}

// reference runs an uninterrupted calibration and returns its file's bytes.
func reference(t *testing.T, m *runtime.Model, samples [][]int, opts Options) []byte {
	t.Helper()
	out := filepath.Join(t.TempDir(), "ref.safetensors")
	if _, err := Run(context.Background(), m, samples, out, opts); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestRunPasses checks that splitting the layers into passes (one layer
// per pass here) writes the same file as one pass.
func TestRunPasses(t *testing.T) {
	dir := tinyModel(t)
	m := load(t, dir)
	samples := builtinSamples(t, 4, 16)
	one := reference(t, m, samples, Options{Hessian: true})
	out := filepath.Join(t.TempDir(), "two.safetensors")
	res, err := Run(context.Background(), m, samples, out, Options{Hessian: true, HessianBudget: 1})
	if err != nil {
		t.Fatal(err)
	}
	if res.Passes != 2 || res.LayersPerPass != 1 {
		t.Errorf("passes %d of %d layers, want 2 of 1", res.Passes, res.LayersPerPass)
	}
	two, _ := os.ReadFile(out)
	if !bytes.Equal(one, two) {
		t.Error("two passes wrote a different file than one")
	}
}

// TestRunResume interrupts runs in several ways and checks that running
// again finishes with exactly the file of an uninterrupted run.
func TestRunResume(t *testing.T) {
	dir := tinyModel(t)
	m := load(t, dir)
	samples := builtinSamples(t, 6, 16)
	base := Options{Hessian: true, HessianBudget: 1} // two passes of one layer
	want := reference(t, m, samples, base)
	hour := time.Hour
	for _, c := range []struct {
		name        string
		stopAfter   int           // simulated kill after this many samples
		cancelAfter int           // context cancelled after this many samples
		every       time.Duration // checkpoint interval
		pass, from  int           // where the second run must resume
	}{
		{name: "killed in pass 1, saved every sample", stopAfter: 2, pass: 0, from: 2},
		{name: "killed in pass 2, saved every sample", stopAfter: 9, pass: 1, from: 3},
		{name: "killed without a save", stopAfter: 4, every: hour, pass: 0, from: 0},
		{name: "killed after pass 1 finished", stopAfter: 6, every: hour, pass: 1, from: 0},
		{name: "cancelled, saved on the way out", cancelAfter: 3, every: hour, pass: 0, from: 3},
	} {
		t.Run(c.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "s.safetensors")
			opts := base
			opts.CheckpointEvery = c.every
			opts.stopAfter = c.stopAfter
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			runs := 0
			if c.cancelAfter > 0 {
				opts.Progress = func(done, total int64) {
					if runs++; runs == c.cancelAfter+1 { // the first call reports the start
						cancel()
					}
				}
			}
			_, err := Run(ctx, m, samples, out, opts)
			if err == nil {
				t.Fatal("the interrupted run succeeded")
			}
			if c.cancelAfter > 0 && !errors.Is(err, ErrInterrupted) {
				t.Fatalf("cancelled run: %v, want ErrInterrupted", err)
			}
			if _, err := os.Stat(out); err == nil {
				t.Fatal("an interrupted run wrote the output")
			}
			opts = base
			res, err := Run(context.Background(), m, samples, out, opts)
			if err != nil {
				t.Fatal(err)
			}
			if res.ResumedPass != c.pass || res.ResumedSample != c.from {
				t.Errorf("resumed at pass %d sample %d, want %d %d", res.ResumedPass, res.ResumedSample, c.pass, c.from)
			}
			got, _ := os.ReadFile(out)
			if !bytes.Equal(got, want) {
				t.Error("the resumed run wrote a different file than an uninterrupted one")
			}
			if _, err := os.Stat(out + ".partial"); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("work directory left behind: %v", err)
			}
		})
	}
}

func TestRunBadResume(t *testing.T) {
	dir := tinyModel(t)
	m := load(t, dir)
	samples := builtinSamples(t, 4, 16)
	out := filepath.Join(t.TempDir(), "s.safetensors")
	if _, err := Run(context.Background(), m, samples, out, Options{stopAfter: 2}); err == nil {
		t.Fatal("no interruption")
	}
	// Other samples: the manifest does not match.
	_, err := Run(context.Background(), m, samples[:3], out, Options{})
	if !errors.Is(err, ErrState) || !strings.Contains(err.Error(), "samples") {
		t.Errorf("other samples: %v, want ErrState naming the samples", err)
	}
	// Hessians asked for now: the manifest does not match.
	if _, err := Run(context.Background(), m, samples, out, Options{Hessian: true}); !errors.Is(err, ErrState) {
		t.Errorf("hessian now: %v, want ErrState", err)
	}
	// A damaged partial file.
	partial := partialFile(out+".partial", 0)
	b, err := os.ReadFile(partial)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)-1] = 0xff // the last byte of v_absmax: now negative
	os.WriteFile(partial, b, 0o644)
	_, err = Run(context.Background(), m, samples, out, Options{})
	if !errors.Is(err, ErrState) || !strings.Contains(err.Error(), "pass-000.partial") {
		t.Errorf("damaged partial file: %v, want ErrState naming it", err)
	}
	os.WriteFile(partial, []byte("garbage"), 0o644)
	if _, err := Run(context.Background(), m, samples, out, Options{}); !errors.Is(err, ErrState) {
		t.Errorf("garbage partial file: %v, want ErrState", err)
	}
	// Deleting it redoes the pass.
	os.Remove(partial)
	if _, err := Run(context.Background(), m, samples, out, Options{}); err != nil {
		t.Errorf("after deleting the partial file: %v", err)
	}
}

// TestRunNonFinite poisons a norm weight of layer 1 with a NaN.
func TestRunNonFinite(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "model")
	writeTiny(t, dir)
	name := "model.layers.1.post_attention_layernorm.weight"
	ck, err := checkpoint.OpenModel(dir)
	if err != nil {
		t.Fatal(err)
	}
	var at int64
	var shard string
	for _, e := range ck.Inventory().Tensors {
		if e.Name == name {
			h, _ := checkpoint.ReadHeader(filepath.Join(dir, e.Shard))
			at, shard = h.DataStart+e.Begin+2*5, e.Shard // element 5
		}
	}
	ck.Close()
	f, err := os.OpenFile(filepath.Join(dir, shard), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteAt([]byte{0xc0, 0x7f}, at) // BF16 NaN
	f.Close()
	m := load(t, dir)
	samples := builtinSamples(t, 2, 8)
	_, err = Run(context.Background(), m, samples, filepath.Join(t.TempDir(), "s"), Options{})
	if err == nil || !strings.Contains(err.Error(), "sample 0, layer 1 mlp_input: token 0, channel 5 is NaN") {
		t.Errorf("err = %v", err)
	}
}

func TestRunRejects(t *testing.T) {
	dir := tinyModel(t)
	m := load(t, dir)
	tmp := t.TempDir()
	exists := filepath.Join(tmp, "exists")
	os.WriteFile(exists, nil, 0o644)
	for _, c := range []struct {
		name    string
		samples [][]int
		out     string
		want    string
	}{
		{"output exists", [][]int{{1}}, exists, "already exists"},
		{"no samples", nil, filepath.Join(tmp, "a"), "no samples"},
		{"empty sample", [][]int{{1}, {}}, filepath.Join(tmp, "b"), "sample 1 has no tokens"},
		{"bad id", [][]int{{1, 200000}}, filepath.Join(tmp, "c"), "outside the vocabulary"},
		{"too long", [][]int{make([]int, m.MaxPositions()+1)}, filepath.Join(tmp, "d"), "lower --seq-len"},
	} {
		if _, err := Run(context.Background(), m, c.samples, c.out, Options{}); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error containing %q", c.name, err, c.want)
		}
	}
}
