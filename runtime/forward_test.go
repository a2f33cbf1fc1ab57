package runtime

import (
	"errors"
	"math"
	"slices"
	"testing"

	"github.com/lowbit-ai/lowbit/kernels"
	"github.com/lowbit-ai/lowbit/kernels/ref"
)

// testTokens is a prompt for the small models (vocab 384).
var testTokens = []int{1, 17, 300, 42, 42, 7, 383, 0, 128, 99, 5, 250}

func loadModel(t testing.TB, dir string, ops kernels.Ops) *Model {
	t.Helper()
	m, err := Load(dir, ops)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

func forward(t testing.TB, m *Model, seq *Sequence, tokens []int) []float32 {
	t.Helper()
	logits, err := m.Forward(seq, tokens)
	if err != nil {
		t.Fatal(err)
	}
	return logits
}

// maxDiff returns max |a[i]-b[i]|.
func maxDiff(a, b []float32) float64 {
	var d float64
	for i := range a {
		d = max(d, math.Abs(float64(a[i])-float64(b[i])))
	}
	return d
}

func TestForwardMatchesNaive(t *testing.T) {
	llama, tied := small128, small128
	llama.arch = "llama"
	tied.tied = true
	for _, tt := range []struct {
		name string
		spec smallSpec
	}{{"qwen3", small128}, {"llama", llama}, {"tied", tied}} {
		dir := tt.spec.write(t)
		want := naiveForward(t, dir, testTokens)
		for _, b := range backends {
			t.Run(tt.name+"/"+b.name, func(t *testing.T) {
				m := loadModel(t, dir, b.ops(t))
				got := forward(t, m, m.NewSequence(0), testTokens)
				V := m.VocabSize()
				var worst, scale float64
				for tok := range testTokens {
					for i, w := range want[tok] {
						worst = max(worst, math.Abs(float64(got[tok*V+i])-w))
						scale = max(scale, math.Abs(w))
					}
				}
				t.Logf("max |Δ logit| = %.3g (logits up to %.3g)", worst, scale)
				if worst > 1e-4*max(scale, 1) {
					t.Errorf("max |Δ logit| = %.3g vs the float64 forward, want <= %.3g", worst, 1e-4*max(scale, 1))
				}
			})
		}
	}
}

// TestKVCache checks that a prefill of N tokens followed by M decode steps
// gives the logits of one prefill of N+M tokens (within 1e-4), and more
// generally that how the tokens are split into forwards changes nothing
// (batch invariance): with the reference kernels, bit for bit.
func TestKVCache(t *testing.T) {
	dir := small128.write(t)
	for _, b := range backends {
		m := loadModel(t, dir, b.ops(t))
		want := forward(t, m, m.NewSequence(0), testTokens)
		for _, tt := range []struct {
			name   string
			chunks []int
		}{
			{"prefill 8 + decode 4", []int{8, 1, 1, 1, 1}},
			{"prefill 1 + decode 11", []int{1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}},
			{"chunks 3 5 4", []int{3, 5, 4}},
			{"chunks 11 1", []int{11, 1}},
		} {
			t.Run(b.name+"/"+tt.name, func(t *testing.T) {
				seq := m.NewSequence(0)
				var got []float32
				i := 0
				for _, n := range tt.chunks {
					got = append(got, forward(t, m, seq, testTokens[i:i+n])...)
					i += n
				}
				if seq.Len() != len(testTokens) {
					t.Fatalf("Len = %d, want %d", seq.Len(), len(testTokens))
				}
				d := maxDiff(got, want)
				t.Logf("max |Δ logit| = %.3g vs one prefill", d)
				if d > 1e-4 {
					t.Errorf("max |Δ logit| = %.3g vs one prefill, want <= 1e-4", d)
				}
				if b.exact && d != 0 {
					t.Errorf("max |Δ logit| = %.3g: the %s kernels should be batch invariant bit for bit", d, b.name)
				}
				last := forward(t, m, m.NewSequence(0), testTokens[:len(testTokens)-1])
				if d := maxDiff(last, want[:len(last)]); d > 1e-4 || (b.exact && d != 0) {
					t.Errorf("a shorter prefill changed the logits of earlier tokens by %.3g", d)
				}
			})
		}
	}
}

func TestForwardOptions(t *testing.T) {
	m := loadModel(t, small128.write(t), ref.Ops{})
	V, D := m.VocabSize(), 128
	all := forward(t, m, m.NewSequence(0), testTokens)
	var layers []int
	last, err := m.ForwardWith(m.NewSequence(0), testTokens, ForwardOptions{
		LastOnly: true,
		Hook: func(layer int, hidden []float32) {
			layers = append(layers, layer)
			if len(hidden) != len(testTokens)*D {
				t.Errorf("hook of layer %d: %d values, want %d", layer, len(hidden), len(testTokens)*D)
			}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(last, all[(len(testTokens)-1)*V:]) {
		t.Error("LastOnly logits differ from the last row of all logits")
	}
	if !slices.Equal(layers, []int{0, 1}) {
		t.Errorf("hook called for layers %v, want [0 1]", layers)
	}
}

// TestSequenceKV: a Sequence of each KV cache type, decoded a token at a
// time across two growths (16, 32, then 64 positions, each a copy of the
// cache so far), gives the logits of ForwardBatch on a pool of that type
// allocated at full length, bit for bit; an unknown type is an error.
func TestSequenceKV(t *testing.T) {
	m := loadModel(t, small128.write(t), ref.Ops{})
	toks := make([]int, 40)
	for i := range toks {
		toks[i] = (i*131 + 7) % m.VocabSize()
	}
	for _, dt := range []kernels.KVDType{kernels.KVFloat32, kernels.KVBF16, kernels.KVFP8} {
		seq, err := m.NewSequenceKV(0, dt)
		if err != nil {
			t.Fatal(err)
		}
		pool, err := m.NewKVPool(1, 64, dt)
		if err != nil {
			t.Fatal(err)
		}
		for i, tok := range toks {
			got, err := m.Forward(seq, []int{tok})
			if err != nil {
				t.Fatal(err)
			}
			want, err := m.ForwardBatch(pool, []BatchEntry{{Blocks: []int32{0}, Start: i, Tokens: []int{tok}, Logits: 1}}, nil)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, want) {
				t.Fatalf("%v: position %d: the sequence's logits differ from a full-length pool's (max |Δ| %.3g)", dt, i, maxDiff(got, want))
			}
		}
	}
	if _, err := m.NewSequenceKV(0, kernels.KVDType(99)); err == nil {
		t.Error("NewSequenceKV of an unknown dtype succeeded")
	}
}

func TestSequenceLimit(t *testing.T) {
	m := loadModel(t, small128.write(t), ref.Ops{})
	V := m.VocabSize()
	if got := m.NewSequence(0).Limit(); got != 64 {
		t.Errorf("default limit %d, want max_position_embeddings 64", got)
	}
	if got := m.NewSequence(1000).Limit(); got != 64 {
		t.Errorf("limit 1000 gives %d, want it capped at 64", got)
	}
	seq := m.NewSequence(10)
	first := forward(t, m, seq, testTokens[:8])
	if _, err := m.Forward(seq, testTokens[8:11]); !errors.Is(err, ErrSequenceFull) {
		t.Errorf("Forward past the limit: %v, want ErrSequenceFull", err)
	}
	if seq.Len() != 8 {
		t.Errorf("a failed Forward changed Len to %d", seq.Len())
	}
	forward(t, m, seq, testTokens[8:10])
	seq.Truncate(3)
	again := forward(t, m, seq, testTokens[3:8])
	if !slices.Equal(again, first[3*V:]) {
		t.Error("logits after Truncate(3) differ from the first run")
	}
	if _, err := m.Forward(seq, []int{V}); err == nil {
		t.Error("Forward of an id outside the vocabulary succeeded")
	}
	if _, err := m.Forward(seq, nil); err == nil {
		t.Error("Forward of no tokens succeeded")
	}
	other := loadModel(t, small128.write(t), ref.Ops{})
	if _, err := other.Forward(seq, []int{1}); err == nil {
		t.Error("Forward of another model's sequence succeeded")
	}
}
