package runtime

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/lowbit-ai/lowbit/checkpoint"
	"github.com/lowbit-ai/lowbit/kernels"
	"github.com/lowbit-ai/lowbit/kernels/ref"
	"github.com/lowbit-ai/lowbit/quantize"
	"github.com/lowbit-ai/lowbit/synth"
)

// goldenDir holds the reference logits scripts/device_reference.sh makes
// with transformers (scripts/reference_logits.py).
const goldenDir = "../testdata/golden/logits"

// goldenStats are the calibration statistics the static variants were
// quantized with, written by the same run.
const goldenStats = goldenDir + "/qwen3-tiny-seed1.stats.safetensors"

// goldenVariants are the checkpoints of scripts/device_reference.sh, which
// the tests rebuild here from the same seed, flags and statistics: synth
// is deterministic, and so is quantize.
var goldenVariants = []struct {
	name   string
	arch   checkpoint.Arch
	scheme quantize.Scheme // 0: the BF16 model itself
	format quantize.Format
}{
	{"qwen3-tiny-seed1", checkpoint.Qwen3, 0, 0},
	{"llama-tiny-seed1", checkpoint.Llama, 0, 0},
	{"qwen3-tiny-seed1-nvfp4a16-ct", checkpoint.Qwen3, quantize.NVFP4A16, quantize.CompressedTensors},
	{"qwen3-tiny-seed1-fp8-dynamic-ct", checkpoint.Qwen3, quantize.FP8Dynamic, quantize.CompressedTensors},
	{"qwen3-tiny-seed1-fp8-dynamic-modelopt", checkpoint.Qwen3, quantize.FP8Dynamic, quantize.ModelOpt},
	{"qwen3-tiny-seed1-fp8-ct", checkpoint.Qwen3, quantize.FP8, quantize.CompressedTensors},
	{"qwen3-tiny-seed1-fp8-modelopt", checkpoint.Qwen3, quantize.FP8, quantize.ModelOpt},
	{"qwen3-tiny-seed1-nvfp4-ct", checkpoint.Qwen3, quantize.NVFP4, quantize.CompressedTensors},
	{"qwen3-tiny-seed1-nvfp4-modelopt", checkpoint.Qwen3, quantize.NVFP4, quantize.ModelOpt},
}

// golden is a file of scripts/reference_logits.py.
type golden struct {
	Name          string            `json:"name"`
	ConfigSHA256  string            `json:"config_sha256"`
	WeightsSHA256 map[string]string `json:"weights_sha256"`
	Prompt        []int             `json:"prompt"`
	Positions     []struct {
		IDs      []int     `json:"ids"`
		Logprobs []float64 `json:"logprobs"`
	} `json:"positions"`
	Greedy struct {
		Tokens  []int     `json:"tokens"`
		Top2Gap []float64 `json:"top2_gap"`
	} `json:"greedy"`
	Command string `json:"command"`
}

// Tolerances of the golden comparison. transformers and the runtime both
// compute in float32, in different orders: their log-probabilities differ
// by about 1e-5 (ref and cpu: 5e-5 at most), as long as no quantized
// activation sits on a rounding boundary; positions after one that does
// are not held to the tolerance (fragile_test.go).
const (
	goldenLogprobTol = 2e-2
	// nearTie: a greedy step whose reference top-2 gap is below this may
	// pick the other token (two log-probabilities each within the
	// tolerance); the comparison stops there.
	nearTie = 2 * goldenLogprobTol
)

// synthCache writes each tiny base model once per test binary.
var synthCache struct {
	sync.Mutex
	dir  string
	made map[checkpoint.Arch]string
}

func tinyModel(t *testing.T, arch checkpoint.Arch) string {
	synthCache.Lock()
	defer synthCache.Unlock()
	if d, ok := synthCache.made[arch]; ok {
		return d
	}
	if synthCache.dir == "" {
		dir, err := os.MkdirTemp("", "lowbit-runtime-golden-")
		if err != nil {
			t.Fatal(err)
		}
		synthCache.dir, synthCache.made = dir, map[checkpoint.Arch]string{}
	}
	d := filepath.Join(synthCache.dir, arch.String())
	if _, err := synth.Write(d, synth.Options{Arch: arch, Size: synth.Tiny, Seed: 1}); err != nil {
		t.Fatal(err)
	}
	synthCache.made[arch] = d
	return d
}

func TestMain(m *testing.M) {
	code := m.Run()
	if synthCache.dir != "" {
		os.RemoveAll(synthCache.dir)
	}
	os.Exit(code)
}

func readGolden(t *testing.T, name string) *golden {
	path := filepath.Join(goldenDir, name+".json")
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		t.Skipf("no %s: run scripts/device_reference.sh on the GPU machine and copy its output into %s", path, goldenDir)
	}
	if err != nil {
		t.Fatal(err)
	}
	var g golden
	if err := json.Unmarshal(data, &g); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return &g
}

// TestGoldenLogits compares the forward of every golden variant with
// transformers' float32 forward (with the same quantized numerics), on
// every backend: the log-softmax of the reference's top tokens at every
// prompt position within goldenLogprobTol, and the same greedy
// continuation.
func TestGoldenLogits(t *testing.T) {
	for _, v := range goldenVariants {
		t.Run(v.name, func(t *testing.T) {
			t.Parallel()
			g := readGolden(t, v.name)
			dir := tinyModel(t, v.arch)
			if v.scheme != 0 {
				q := filepath.Join(t.TempDir(), v.name)
				quantizeTo(t, dir, q, quantize.Options{Scheme: v.scheme, Format: v.format}, goldenStats)
				dir = q
			}
			checkSameCheckpoint(t, dir, g)
			for _, b := range backends {
				t.Run(b.name, func(t *testing.T) {
					ops := b.ops(t)
					if b.name == "ref" {
						ops = &cachedRef{w: map[*byte][]float32{}}
					}
					compareGolden(t, loadModel(t, dir, &fragileOps{Ops: ops}), g)
				})
			}
		})
	}
}

// checkSameCheckpoint fails unless dir holds the weights the golden file
// was made from. A different config.json is only noted: it may differ in
// the quantizer's version string alone, and any change of shapes or values
// changes the weights too.
func checkSameCheckpoint(t *testing.T, dir string, g *golden) {
	t.Helper()
	if got, _ := sha256File(filepath.Join(dir, "config.json")); got != g.ConfigSHA256 {
		t.Logf("config.json differs from the one %s.json was made from (sha256 %s, not %s)", g.Name, got, g.ConfigSHA256)
	}
	if len(g.WeightsSHA256) == 0 {
		t.Fatalf("%s.json lists no weight files", g.Name)
	}
	for f, want := range g.WeightsSHA256 {
		got, err := sha256File(filepath.Join(dir, f))
		if err != nil || got != want {
			t.Fatalf("%s of the locally built checkpoint (sha256 %s, %v) is not the one %s.json was made from (%s): synth or quantize changed; rerun scripts/device_reference.sh",
				f, got, err, g.Name, want)
		}
	}
}

func sha256File(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// compareGolden runs the golden prompt and greedy continuation through m,
// whose Ops are a *fragileOps, and compares them with g: strictly up to
// the first position (or step) that quantizes an activation on a rounding
// boundary (see fragile_test.go), and only logged after it.
func compareGolden(t *testing.T, m *Model, g *golden) {
	fo := m.Ops().(*fragileOps)
	V, T := m.VocabSize(), len(g.Prompt)
	seq := m.NewSequence(0)
	fo.reset(T)
	logits := forward(t, m, seq, g.Prompt)
	firm := slices.Index(fo.rows, true) // positions before it are compared
	if firm < 0 {
		firm = T
	}
	lp := make([]float32, len(logits))
	m.Ops().LogSoftmax(lp, logits, T, V)
	worst := [2]float64{} // before firm, from firm on
	worstAt := [2]string{}
	for pos, p := range g.Positions {
		k := 0
		if pos >= firm {
			k = 1
		}
		for i, id := range p.IDs {
			if d := math.Abs(float64(lp[pos*V+id]) - p.Logprobs[i]); d > worst[k] {
				worst[k], worstAt[k] = d, "position "+strconv.Itoa(pos)+" id "+strconv.Itoa(id)
			}
		}
	}
	t.Logf("max |Δ log-softmax| over the reference's top %d at positions 0-%d: %.3g (%s)", len(g.Positions[0].IDs), firm-1, worst[0], worstAt[0])
	if worst[0] > goldenLogprobTol {
		t.Errorf("max |Δ log-softmax| = %.3g at %s, want <= %g", worst[0], worstAt[0], goldenLogprobTol)
	}
	if firm < T {
		t.Logf("position %d quantizes an activation on a rounding boundary: positions %d-%d not held to the tolerance (max |Δ| %.3g at %s); greedy not compared",
			firm, firm, T-1, worst[1], worstAt[1])
		if firm < T/2 {
			t.Errorf("only %d of %d positions are free of activations on rounding boundaries: too few to compare; choose another prompt", firm, T)
		}
		return
	}
	last := logits[(T-1)*V:]
	var got []string
	for step, want := range g.Greedy.Tokens {
		tok := argmax(last)
		got = append(got, strconv.Itoa(tok))
		if tok != want {
			if g.Greedy.Top2Gap[step] < nearTie {
				t.Logf("greedy step %d: %d, reference %d, a near tie (gap %.2g): stopped comparing", step, tok, want, g.Greedy.Top2Gap[step])
				return
			}
			t.Errorf("greedy tokens %s, reference %v: step %d differs (reference top-2 gap %.3g)", strings.Join(got, " "), g.Greedy.Tokens, step, g.Greedy.Top2Gap[step])
			return
		}
		fo.reset(1)
		last = forward(t, m, seq, []int{tok})
		if fo.rows[0] {
			t.Logf("greedy step %d quantizes an activation on a rounding boundary: compared %d of %d tokens", step+1, step+1, len(g.Greedy.Tokens))
			return
		}
	}
}

// cachedRef is ref.Ops with the float32 copy of each BF16 weight kept
// between calls: ref.Ops dequantizes a weight on every MatMul, which for
// the tiny models' 151936-row lm_head is most of a decode step. The
// products are ref's for ActNone, bit for bit (TestCachedRef): the sum of
// float64 products in input order, rounded once.
type cachedRef struct {
	ref.Ops
	mu sync.Mutex
	w  map[*byte][]float32
}

func (c *cachedRef) MatMul(y, x []float32, T int, w *kernels.Weight) {
	if w.Format != kernels.WeightBF16 || w.Act != kernels.ActNone {
		c.Ops.MatMul(y, x, T, w)
		return
	}
	c.mu.Lock()
	wf, ok := c.w[&w.Data[0]]
	if !ok {
		wf = ref.Dequantize(w)
		c.w[&w.Data[0]] = wf
	}
	c.mu.Unlock()
	for t := range T {
		xr := x[t*w.In : (t+1)*w.In]
		for o := range w.Out {
			var sum float64
			for i, wv := range wf[o*w.In : (o+1)*w.In] {
				sum += float64(xr[i]) * float64(wv)
			}
			y[t*w.Out+o] = float32(sum)
		}
	}
}

func TestCachedRef(t *testing.T) {
	m := loadModel(t, small128.write(t), ref.Ops{})
	x := make([]float32, 3*128)
	for i := range x {
		x[i] = float32(math.Sin(float64(i)))
	}
	a, b := make([]float32, 3*384), make([]float32, 3*384)
	ref.Ops{}.MatMul(a, x, 3, &m.lmHead)
	c := &cachedRef{w: map[*byte][]float32{}}
	c.MatMul(b, x, 3, &m.lmHead)
	c.MatMul(b, x, 3, &m.lmHead)
	if !slices.Equal(a, b) {
		t.Error("cachedRef.MatMul differs from ref.Ops.MatMul")
	}
}
