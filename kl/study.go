package kl

import (
	"math"
	"slices"
)

// StudyRow is the error of the top-k estimators at one k against the exact
// full-vocabulary KL, over the same positions.
type StudyRow struct {
	K         int     `json:"k"`
	Positions int     `json:"positions"`
	KL        float64 `json:"kl"`       // mean exact KL
	Coverage  float64 `json:"coverage"` // mean P mass of the listed tokens
	Union     EstErr  `json:"union_tail"`
	Lower     EstErr  `json:"lower_bound"`
	Delta     EstErr  `json:"delta_ll"` // does not depend on k
}

// EstErr is one estimator's error over a set of positions.
type EstErr struct {
	Mean float64 `json:"mean"`
	// Bias is (Mean − mean KL) / mean KL: the error of the mean that a
	// report would show.
	Bias float64 `json:"rel_bias"`
	// MAE is the mean over positions of |estimate − KL|.
	MAE float64 `json:"mae"`
}

// study accumulates StudyRows.
type study struct {
	ks   []int
	n    int
	kl   float64
	sums []studySums
}

type studySums struct {
	cov                              float64
	union, lower, delta              float64
	absUnion, absLower, absDeltaDiff float64
}

func newStudy(ks []int) *study {
	return &study{ks: ks, sums: make([]studySums, len(ks))}
}

// add records one position: its exact KL and its Estimates at each of ks.
func (s *study) add(kl float64, es []Estimates) {
	s.n++
	s.kl += kl
	for i, e := range es {
		t := &s.sums[i]
		t.cov += e.Coverage
		t.union += e.Union
		t.lower += e.Lower
		t.delta += e.Delta
		t.absUnion += math.Abs(e.Union - kl)
		t.absLower += math.Abs(e.Lower - kl)
		t.absDeltaDiff += math.Abs(e.Delta - kl)
	}
}

func (s *study) rows() []StudyRow {
	if s.n == 0 {
		return nil
	}
	n := float64(s.n)
	mkl := s.kl / n
	errOf := func(sum, abs float64) EstErr {
		m := sum / n
		b := math.NaN()
		if mkl > 0 {
			b = (m - mkl) / mkl
		}
		return EstErr{Mean: m, Bias: b, MAE: abs / n}
	}
	var out []StudyRow
	for i, k := range s.ks {
		t := s.sums[i]
		out = append(out, StudyRow{K: k, Positions: s.n, KL: mkl, Coverage: t.cov / n,
			Union: errOf(t.union, t.absUnion), Lower: errOf(t.lower, t.absLower), Delta: errOf(t.delta, t.absDeltaDiff)})
	}
	return out
}

// studyKs returns the sorted distinct k of the study, k included.
func studyKs(k int, more []int) []int {
	ks := append([]int{k}, more...)
	slices.Sort(ks)
	return slices.Compact(ks)
}
