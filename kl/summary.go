package kl

import (
	"math"
	"math/rand/v2"
	"slices"

	"gonum.org/v1/gonum/stat"
)

// Summary describes one per-token quantity over the scored positions.
type Summary struct {
	Mean float64 `json:"mean"`
	// Lo and Hi bound the mean's 95% bootstrap interval (percentile
	// method); see CI for what was resampled.
	Lo  float64 `json:"ci95_lo"`
	Hi  float64 `json:"ci95_hi"`
	P50 float64 `json:"p50"`
	P90 float64 `json:"p90"`
	P99 float64 `json:"p99"`
	Max float64 `json:"max"`
}

// Bootstrap resampling units.
const (
	ByPrompt   = "prompts"   // whole prompts (their positions are correlated)
	ByPosition = "positions" // single positions, when there are too few prompts
)

// minClusters is the fewest prompts for which prompts are resampled whole:
// with fewer, a prompt bootstrap has too few distinct resamples, and
// positions are resampled instead (an interval that is too narrow where
// positions of one prompt are correlated; the report says which was used).
const minClusters = 10

// bootstrapRounds is the number of resamples; 2000 puts the Monte Carlo
// error of a 2.5% quantile well below the interval's width.
const bootstrapRounds = 2000

// summarize computes the Summary of values (one per position) whose
// prompts are groups[i]. The bootstrap is seeded, so a report repeats.
func summarize(values []float64, groups []int) (Summary, string) {
	n := len(values)
	if n == 0 {
		nan := math.NaN()
		return Summary{nan, nan, nan, nan, nan, nan, nan}, ByPosition
	}
	sorted := slices.Clone(values)
	slices.Sort(sorted)
	s := Summary{
		Mean: stat.Mean(values, nil),
		P50:  stat.Quantile(0.5, stat.Empirical, sorted, nil),
		P90:  stat.Quantile(0.9, stat.Empirical, sorted, nil),
		P99:  stat.Quantile(0.99, stat.Empirical, sorted, nil),
		Max:  sorted[n-1],
	}
	// Per-prompt sums and counts: a resample's mean is Σ sums / Σ counts.
	var sums, counts []float64
	idx := map[int]int{}
	for i, v := range values {
		g, ok := idx[groups[i]]
		if !ok {
			g = len(sums)
			idx[groups[i]] = g
			sums, counts = append(sums, 0), append(counts, 0)
		}
		sums[g] += v
		counts[g]++
	}
	unit := ByPrompt
	if len(sums) < minClusters {
		unit = ByPosition
		sums, counts = values, nil
	}
	rng := rand.New(rand.NewPCG(1, 2))
	means := make([]float64, bootstrapRounds)
	m := len(sums)
	for b := range means {
		var sum, cnt float64
		for range m {
			j := rng.IntN(m)
			sum += sums[j]
			if counts != nil {
				cnt += counts[j]
			} else {
				cnt++
			}
		}
		means[b] = sum / cnt
	}
	slices.Sort(means)
	s.Lo = stat.Quantile(0.025, stat.Empirical, means, nil)
	s.Hi = stat.Quantile(0.975, stat.Empirical, means, nil)
	return s, unit
}
