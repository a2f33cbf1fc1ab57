package synth

import (
	"crypto/sha256"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/lowbit-ai/lowbit/checkpoint"
	"github.com/lowbit-ai/lowbit/format"
)

func TestWriteTinyEveryArch(t *testing.T) {
	for _, arch := range []checkpoint.Arch{checkpoint.Qwen3, checkpoint.Qwen3MoE, checkpoint.Qwen35, checkpoint.Qwen35MoE, checkpoint.Llama} {
		t.Run(arch.String(), func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "m")
			res, err := Write(dir, Options{Arch: arch, Size: Tiny, Seed: 1})
			if err != nil {
				t.Fatal(err)
			}
			cfg, err := checkpoint.ReadConfig(dir)
			if err != nil {
				t.Fatalf("ReadConfig: %v", err)
			}
			if cfg.Arch != arch {
				t.Errorf("arch = %v, want %v", cfg.Arch, arch)
			}
			m, err := checkpoint.OpenModel(dir)
			if err != nil {
				t.Fatalf("OpenModel: %v", err)
			}
			defer m.Close()
			inv := m.Inventory()
			if len(inv.Tensors) != res.Tensors {
				t.Errorf("tensors = %d, want %d", len(inv.Tensors), res.Tensors)
			}
			for _, name := range []string{"tokenizer.json", "tokenizer_config.json", "generation_config.json"} {
				if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
					t.Errorf("missing %s: %v", name, err)
				}
			}
			checkStatistics(t, m, inv)
		})
	}
}

// checkStatistics verifies the promised value distributions: linear weights
// with std about 1/sqrt(fan_in) in ordinary columns and heavy outlier
// columns, norm gains near their identity value.
func checkStatistics(t *testing.T, m *checkpoint.Model, inv *checkpoint.Inventory) {
	t.Helper()
	for _, e := range inv.Tensors {
		if e.DType != format.BF16 {
			t.Errorf("%s: dtype %v, want BF16", e.Name, e.DType)
			continue
		}
		tn, err := m.Tensor(e.Name)
		if err != nil {
			t.Fatal(err)
		}
		vals := make([]float64, len(tn.Data)/2)
		for i := range vals {
			vals[i] = float64(format.BF16ToFloat32(uint16(tn.Data[2*i]) | uint16(tn.Data[2*i+1])<<8))
			if math.IsNaN(vals[i]) || math.IsInf(vals[i], 0) {
				t.Fatalf("%s[%d] = %v", e.Name, i, vals[i])
			}
		}
		name := e.Name
		switch {
		case strings.HasSuffix(name, "norm.weight") && strings.Contains(name, "language_model") && !strings.Contains(name, "linear_attn"):
			checkMean(t, name, vals, 0) // zero-centered gains
		case strings.HasSuffix(name, "norm.weight"):
			checkMean(t, name, vals, 1)
		case strings.HasSuffix(name, "_proj.weight") || strings.HasSuffix(name, "_proj") || name == "lm_head.weight":
			checkLinear(t, name, vals, e.Shape[len(e.Shape)-1])
		}
	}
}

// checkMean requires the mean of gains drawn with std 0.05 within four
// standard errors of want.
func checkMean(t *testing.T, name string, vals []float64, want float64) {
	t.Helper()
	tol := 4 * 0.05 / math.Sqrt(float64(len(vals)))
	var s float64
	for _, v := range vals {
		s += v
	}
	if mean := s / float64(len(vals)); math.Abs(mean-want) > tol {
		t.Errorf("%s: mean %.4f, want %.2f±%.3f", name, mean, want, tol)
	}
}

// checkLinear requires the median column RMS near 1/sqrt(fan_in) and the
// largest column RMS at least 5 times the median: outliers are present.
func checkLinear(t *testing.T, name string, vals []float64, fanIn int64) {
	t.Helper()
	rows := int64(len(vals)) / fanIn
	if rows < 32 {
		return // too few rows for column statistics
	}
	colRMS := make([]float64, fanIn)
	for r := range rows {
		for c := range fanIn {
			v := vals[r*fanIn+c]
			colRMS[c] += v * v
		}
	}
	for c := range colRMS {
		colRMS[c] = math.Sqrt(colRMS[c] / float64(rows))
	}
	sorted := slices.Clone(colRMS)
	slices.Sort(sorted)
	median := sorted[len(sorted)/2]
	want := 1 / math.Sqrt(float64(fanIn))
	if median < 0.7*want || median > 1.4*want {
		t.Errorf("%s: median column RMS %.4g, want about %.4g", name, median, want)
	}
	if sorted[len(sorted)-1] < 5*median {
		t.Errorf("%s: largest column RMS %.4g is under 5x the median %.4g: no outlier channel", name, sorted[len(sorted)-1], median)
	}
}

// The same options must give the same bytes, whatever the shard size, and a
// different seed different bytes.
func TestDeterministic(t *testing.T) {
	sum := func(seed uint64, maxShard int64) (string, int) {
		dir := filepath.Join(t.TempDir(), "m")
		res, err := Write(dir, Options{Arch: checkpoint.Qwen3, Size: Tiny, Seed: seed, MaxShardBytes: maxShard})
		if err != nil {
			t.Fatal(err)
		}
		m, err := checkpoint.OpenModel(dir)
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		h := sha256.New()
		for _, e := range m.Inventory().Tensors {
			tn, err := m.Tensor(e.Name)
			if err != nil {
				t.Fatal(err)
			}
			fmt.Fprintf(h, "%s %v %v\n", e.Name, e.DType, e.Shape)
			h.Write(tn.Data)
		}
		return fmt.Sprintf("%x", h.Sum(nil)), res.Shards
	}
	a, shardsA := sum(7, 0)
	b, shardsB := sum(7, 4<<20)
	c, _ := sum(8, 0)
	if shardsA != 1 || shardsB < 2 {
		t.Fatalf("shards = %d and %d, want 1 and several", shardsA, shardsB)
	}
	if a != b {
		t.Errorf("same seed, different shard size: tensors differ")
	}
	if a == c {
		t.Errorf("seeds 7 and 8 gave identical tensors")
	}
}

func TestBadOptions(t *testing.T) {
	cases := []struct {
		name string
		arch checkpoint.Arch
		size string
		want string
	}{
		{"size of another arch", checkpoint.Qwen3, "qwen3-30b-a3b", "not one of architecture qwen3's"},
		{"unknown size", checkpoint.Llama, "huge", "not one of"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Write(t.TempDir(), Options{Arch: c.arch, Size: c.size})
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("Write = %v, want error containing %q", err, c.want)
			}
		})
	}
	t.Run("non-empty dir", func(t *testing.T) {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "x"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := Write(dir, Options{Arch: checkpoint.Qwen3, Size: Tiny}); err == nil || !strings.Contains(err.Error(), "not empty") {
			t.Errorf("Write into non-empty dir = %v, want error", err)
		}
	})
}

// Every full size must parse and plan, and its parameter count (without the
// vision tower and MTP head, which synth does not write) must match the
// model's published size.
func TestFullSizesPlan(t *testing.T) {
	want := map[string][2]float64{ // billions of parameters, tolerance
		"qwen3-0.6b":      {0.596, 0.01},
		"qwen3-8b":        {8.19, 0.05},
		"qwen3-30b-a3b":   {30.53, 0.1},
		"qwen3.5-27b":     {26.9, 0.6},
		"qwen3.6-35b-a3b": {34.7, 0.8},
		"minicpm5-2b":     {2.604, 0.01}, // 2.52B with its own 130560-row vocabulary
	}
	for _, s := range sizes {
		t.Run(s.name, func(t *testing.T) {
			raw, err := configJSON(s.arch, s.name)
			if err != nil {
				t.Fatal(err)
			}
			cfg, err := checkpoint.ParseConfig(raw)
			if err != nil {
				t.Fatal(err)
			}
			d, err := dimsOf(cfg)
			if err != nil {
				t.Fatal(err)
			}
			var n int64
			for _, tp := range plan(d) {
				n += tp.numElements()
			}
			got := float64(n) / 1e9
			w := want[s.name]
			t.Logf("%s: %.3fB parameters", s.name, got)
			if math.Abs(got-w[0]) > w[1] {
				t.Errorf("%s: %.3fB parameters, want %.3f±%.2f", s.name, got, w[0], w[1])
			}
		})
	}
}
