package quantize

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// Benchmarks of each quantizer on a 2048x4096 BF16 matrix (16 MiB, a
// mid-sized Qwen3 projection) of Gaussian weights with outlier columns;
// the MB/s column is BF16 input consumed per second on one core. Run: go test ./quantize -run=^$ -bench=. -benchtime=200ms
func benchMatrix(b *testing.B) Matrix {
	b.Helper()
	const rows, cols = 2048, 4096
	rng := rand.New(rand.NewPCG(42, 0))
	x := make([]float32, rows*cols)
	for i := range x {
		x[i] = float32(rng.NormFloat64()) * 0.02
	}
	for range 8 { // outlier input channels, as real projections have
		c, k := rng.IntN(cols), float32(10+rng.IntN(90))
		for r := range rows {
			x[r*cols+c] *= k
		}
	}
	m := refBF16(rows, cols, x)
	b.SetBytes(int64(len(m.BF16)))
	return m
}

func BenchmarkAbsMax(b *testing.B) {
	m := benchMatrix(b)
	for b.Loop() {
		m.AbsMax()
	}
}

func BenchmarkFP8(b *testing.B) {
	for _, f := range []struct {
		name string
		fn   func(*FP8Weight, Matrix) error
	}{
		{"CTFP8Channel", CTFP8Channel},
		{"CTFP8Tensor", CTFP8Tensor},
		{"CTFP8Block", CTFP8Block},
		{"ModelOptFP8Channel", ModelOptFP8Channel},
		{"ModelOptFP8Tensor", ModelOptFP8Tensor},
	} {
		b.Run(f.name, func(b *testing.B) {
			m := benchMatrix(b)
			var dst FP8Weight
			for b.Loop() {
				if err := f.fn(&dst, m); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkNVFP4(b *testing.B) {
	b.Run("CTNVFP4", func(b *testing.B) {
		m := benchMatrix(b)
		gs, err := CTNVFP4GlobalScale(m.AbsMax())
		if err != nil {
			b.Fatal(err)
		}
		var dst NVFP4Weight
		for b.Loop() {
			if err := CTNVFP4(&dst, m, gs); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("ModelOptNVFP4", func(b *testing.B) {
		m := benchMatrix(b)
		s2, err := ModelOptNVFP4WeightScale2(m.AbsMax())
		if err != nil {
			b.Fatal(err)
		}
		var dst NVFP4Weight
		for b.Loop() {
			if err := ModelOptNVFP4(&dst, m, s2); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// The reference loops, for comparison.
func BenchmarkReference(b *testing.B) {
	for _, f := range []struct {
		name string
		fn   func(Matrix) ([]byte, []byte)
	}{
		{"CTFP8Channel", refCTFP8Channel},
		{"CTNVFP4", func(m Matrix) ([]byte, []byte) { return refCTNVFP4(m, 1) }},
	} {
		b.Run(fmt.Sprint(f.name), func(b *testing.B) {
			m := benchMatrix(b)
			for b.Loop() {
				f.fn(m)
			}
		})
	}
}
