//go:build cgo

package cuda

import (
	"cmp"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestTopK: TopK (lb_topk_chunks, _merge, _ties) against a host sort of
// each row: the same ids in the same order (value descending, ties by
// ascending id) with their values,
// log-probabilities within float32 rounding of the host's, and the count
// of entries at least as probable as the k-th recounted from the kernel's
// own log-sum-exp. Rows with many ties (within and across the kernel's
// chunks), a vocabulary-sized row, k = V, a last chunk shorter than k, and
// -Inf entries. Skips without a GPU.
func TestTopK(t *testing.T) {
	d := openOrSkip(t)
	rng := rand.New(rand.NewPCG(8, 8))
	for _, c := range []struct {
		name       string
		rows, V, k int
		fill       func(i int) float32
	}{
		{"normal", 3, 5000, 20, func(int) float32 { return float32(rng.NormFloat64() * 4) }},
		{"ties", 4, 3000, 64, func(int) float32 { return float32(rng.IntN(5)) }},
		{"vocab", 2, 151936, 33, func(int) float32 { return float32(rng.NormFloat64()*2 - 30) }},
		{"k=V", 1, 40, 40, func(int) float32 { return float32(rng.NormFloat64()) }},
		// Ties across chunks of lb_topk_chunks (2,048 entries): chunks whose
		// own k-th is below the row's hold entries equal to the row's k-th
		// among their larger ones; the lowest ids must win.
		{"chunk ties", 3, 20000, 64, func(int) float32 {
			if rng.IntN(60) == 0 {
				return float32(2 + rng.IntN(2))
			}
			return float32(rng.IntN(2))
		}},
		// A last chunk shorter than k.
		{"short tail", 2, 3*2048 + 5, 33, func(int) float32 { return float32(rng.NormFloat64()) }},
		{"tail best", 1, 2*2048 + 3, 20, func(i int) float32 { return float32(i % (2*2048 + 3)) }},
		{"-inf", 2, 700, 10, func(i int) float32 {
			if i%3 == 0 {
				return float32(math.Inf(-1))
			}
			return float32(rng.NormFloat64())
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			x := make([]float32, c.rows*c.V)
			for i := range x {
				x[i] = c.fill(i)
			}
			var ids, ties []int32
			var vals, lps []float32
			err := d.Run(func(k *K) error {
				b, err := k.Upload(asBytes(x, len(x)))
				if err != nil {
					return err
				}
				ids, vals, lps, ties, err = k.TopK(b, c.rows, c.V, c.k)
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
			for r := range c.rows {
				row := x[r*c.V : (r+1)*c.V]
				want := make([]int, c.V)
				for i := range want {
					want[i] = i
				}
				slices.SortStableFunc(want, func(a, b int) int { return cmp.Compare(row[b], row[a]) })
				m := math.Inf(-1)
				for _, v := range row {
					m = max(m, float64(v))
				}
				var sum float64
				for _, v := range row {
					sum += math.Exp(float64(v) - m)
				}
				lse := m + math.Log(sum)
				got := ids[r*c.k : (r+1)*c.k]
				for j := range c.k {
					id := int(got[j])
					if id != want[j] || vals[r*c.k+j] != row[id] {
						t.Fatalf("row %d entry %d: id %d value %v, want id %d value %v", r, j, id, vals[r*c.k+j], want[j], row[want[j]])
					}
					// float32 rounding of the log-probability, and of the
					// log-sum-exp it is taken from (a few roundings of a
					// float32 of that size: 4,098.46 has an ulp of 4.9e-4).
					tol := 1e-5*(1+math.Abs(float64(lps[r*c.k+j]))) + 4*math.Abs(lse)/(1<<23)
					if lp := lps[r*c.k+j]; math.Abs(float64(lp)-(float64(row[id])-lse)) > tol {
						t.Fatalf("row %d entry %d: logprob %v, host %v", r, j, lp, float64(row[id])-lse)
					}
				}
				// The count of entries at least as probable as the k-th,
				// recounted under the kernel's log-sum-exp (recovered from an
				// entry to within rounding: entries that close to the k-th
				// may go either way).
				kLSE := float64(row[got[0]]) - float64(lps[r*c.k])
				last := float64(lps[r*c.k+c.k-1])
				tol := 1e-6 * (1 + math.Abs(last))
				surely, maybe := 0, 0
				for _, v := range row {
					switch lp := float64(v) - kLSE; {
					case lp >= last+tol:
						surely++
					case lp >= last-tol:
						maybe++
					}
				}
				if n := int(ties[r]); n < c.k || n < surely || n > surely+maybe {
					t.Errorf("row %d: ties %d, want between %d and %d, at least k = %d", r, n, surely, surely+maybe, c.k)
				}
			}
		})
	}
}
