package runtime

import (
	"cmp"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
)

// SamplingOptions choose the next token from a row of logits. The zero
// value is greedy decoding.
type SamplingOptions struct {
	// Temperature divides the logits; 0 is greedy (argmax, the lowest id
	// among equal maxima) and ignores the other options.
	Temperature float64
	// TopP keeps the smallest set of most probable tokens whose probability
	// sums to at least TopP; 0 or 1 disables it.
	TopP float64
	// TopK keeps the TopK most probable tokens; 0 disables it.
	TopK int
	// MinP drops tokens less probable than MinP times the most probable
	// one; 0 disables it.
	MinP float64
	// Seed seeds the request's PCG generator: the same options, seed and
	// logits give the same tokens.
	Seed uint64
}

// Validate reports options outside their ranges.
func (o SamplingOptions) Validate() error {
	switch {
	case !(o.Temperature >= 0) || math.IsInf(o.Temperature, 0):
		return fmt.Errorf("runtime: temperature %g: want a finite value >= 0", o.Temperature)
	case !(o.TopP >= 0 && o.TopP <= 1):
		return fmt.Errorf("runtime: top_p %g: want 0 < top_p <= 1 (0 disables it)", o.TopP)
	case o.TopK < 0:
		return fmt.Errorf("runtime: top_k %d: want >= 0 (0 disables it)", o.TopK)
	case !(o.MinP >= 0 && o.MinP <= 1):
		return fmt.Errorf("runtime: min_p %g: want 0 <= min_p <= 1", o.MinP)
	}
	return nil
}

// Sampler draws tokens for one request. It is not safe for concurrent use.
type Sampler struct {
	opts    SamplingOptions
	rng     *rand.Rand
	cand    []candidate
	weights []float64 // sampleUnranked's unnormalized probabilities
	topIDs  []int     // topKCandidates' window
}

type candidate struct {
	id int
	v  float64 // scaled logit, then probability
}

// NewSampler returns a sampler for opts, which must be valid.
func NewSampler(opts SamplingOptions) *Sampler {
	return &Sampler{opts: opts, rng: rand.New(rand.NewPCG(opts.Seed, 0x9e3779b97f4a7c15))}
}

// preselect bounds the candidates sorted when only top-p limits them: the
// most probable preselect tokens are sorted first, and all of them only if
// those fall short of top_p.
const preselect = 1024

// Sample returns the next token for one row of logits, applying, in order:
// temperature, top-k, top-p, min-p, then a draw from the renormalized
// distribution (softmax in float64).
func (s *Sampler) Sample(logits []float32) int {
	o := s.opts
	if o.Temperature == 0 {
		return argmax(logits)
	}
	n := len(logits)
	limited := o.TopK > 0 && o.TopK < n
	topP := o.TopP > 0 && o.TopP < 1
	if !limited && !topP {
		return s.sampleUnranked(logits)
	}
	if limited {
		// Dividing by a positive temperature keeps the order, so the top k
		// are chosen on the raw logits and only they are scaled.
		return s.draw(s.topKCandidates(logits, o.TopK), nil)
	}
	s.fill(logits)
	k := n
	if n > preselect {
		k = preselect // widened below if those tokens hold too little mass
	}
	return s.draw(topSorted(s.cand, k), logits)
}

// TopSampleable reports the length of a TopLogits list that SampleTop needs
// to draw exactly what Sample would from the whole row (greedy: 1; top-k:
// k), or 0 when the options need the whole row (top-p or min-p alone, or
// plain sampling, normalize over every token).
func (s *Sampler) TopSampleable() int {
	switch o := s.opts; {
	case o.Temperature == 0:
		return 1
	case o.TopK > 0:
		return o.TopK
	}
	return 0
}

// SampleTop draws the next token from a row's best logits (ids and logits
// largest first, ties by ascending id, at least TopSampleable of them):
// the same token Sample draws from the whole row, with the same generator
// state after.
func (s *Sampler) SampleTop(ids []int32, logits []float32) int {
	o := s.opts
	if o.Temperature == 0 {
		return int(ids[0])
	}
	c := s.cand[:0]
	for i := range min(o.TopK, len(ids)) {
		c = append(c, candidate{int(ids[i]), float64(logits[i]) / o.Temperature})
	}
	s.cand = c
	return s.draw(c, nil)
}

// draw finishes Sample from its ranked candidates c: the softmax over them
// (over every token of logits when logits is not nil: top-p alone, where c
// is a preselection), top-p, min-p, then the draw.
func (s *Sampler) draw(c []candidate, logits []float32) int {
	o := s.opts
	n := len(logits)
	limited := logits == nil
	topP := o.TopP > 0 && o.TopP < 1
	// The softmax runs over the top-k tokens, or over every token when only
	// top-p limits them (so that preselected probabilities are exact).
	maxV := c[0].v
	var sum float64
	if limited {
		for _, x := range c {
			sum += math.Exp(x.v - maxV)
		}
	} else {
		for _, l := range logits {
			sum += math.Exp(float64(l)/o.Temperature - maxV)
		}
	}
	cum := toProbs(c, maxV, sum)
	if !limited && len(c) < n && cum < o.TopP {
		s.fill(logits)
		c = topSorted(s.cand, n)
		toProbs(c, maxV, sum)
	}
	if topP {
		cum = 0
		for i := range c {
			cum += c[i].v
			if cum >= o.TopP {
				c = c[:i+1]
				break
			}
		}
	}
	if o.MinP > 0 {
		floor := o.MinP * c[0].v
		n := 1
		for n < len(c) && c[n].v >= floor {
			n++
		}
		c = c[:n]
	}
	var total float64
	for _, x := range c {
		total += x.v
	}
	r := s.rng.Float64() * total
	for _, x := range c {
		r -= x.v
		if r < 0 {
			return x.id
		}
	}
	return c[len(c)-1].id
}

// sampleUnranked draws from the whole softmax (with min-p's floor) in id
// order: without top-k or top-p nothing needs ranking, and sorting a
// 151,936-token vocabulary would cost tens of milliseconds a token.
// p_i >= min_p·p_max is exp(v_i - max v) >= min_p.
func (s *Sampler) sampleUnranked(logits []float32) int {
	t := s.opts.Temperature
	maxV := math.Inf(-1)
	for _, l := range logits {
		maxV = max(maxV, float64(l)/t)
	}
	if cap(s.weights) < len(logits) {
		s.weights = make([]float64, len(logits))
	}
	w := s.weights[:len(logits)]
	var total float64
	for i, l := range logits {
		e := math.Exp(float64(l)/t - maxV)
		if e < s.opts.MinP {
			e = 0
		}
		w[i] = e
		total += e
	}
	r := s.rng.Float64() * total
	last := argmax(logits)
	for i, e := range w {
		if e == 0 {
			continue
		}
		last = i
		if r -= e; r < 0 {
			return i
		}
	}
	return last
}

// topKCandidates returns the k largest logits as temperature-scaled
// candidates, in less's order (value descending, then id ascending): one
// pass keeping a sorted window of k. Ids grow along the scan, so a value
// equal to the window's worst never displaces it, as less would have it.
func (s *Sampler) topKCandidates(logits []float32, k int) []candidate {
	ids := s.topIDs[:0]
	for id, l := range logits {
		if len(ids) == k {
			if !(l > logits[ids[k-1]]) {
				continue
			}
			ids = ids[:k-1]
		}
		i := len(ids)
		for i > 0 && l > logits[ids[i-1]] {
			i--
		}
		ids = slices.Insert(ids, i, id)
	}
	s.topIDs = ids
	c := s.cand[:0]
	for _, id := range ids {
		c = append(c, candidate{id, float64(logits[id]) / s.opts.Temperature})
	}
	s.cand = c
	return c
}

// fill sets s.cand to the temperature-scaled logits.
func (s *Sampler) fill(logits []float32) {
	c := s.cand[:0]
	for id, l := range logits {
		c = append(c, candidate{id, float64(l) / s.opts.Temperature})
	}
	s.cand = c
}

// toProbs turns scaled logits into probabilities, exp(v-maxV)/sum, and
// returns their total.
func toProbs(c []candidate, maxV, sum float64) float64 {
	var cum float64
	for i := range c {
		c[i].v = math.Exp(c[i].v-maxV) / sum
		cum += c[i].v
	}
	return cum
}

// less orders candidates by value, descending, then by id.
func less(a, b candidate) int { return cmp.Or(cmp.Compare(b.v, a.v), cmp.Compare(a.id, b.id)) }

// topSorted returns the k best candidates of c (by less), sorted; it may
// reorder c. A partial selection when k is much smaller than c.
func topSorted(c []candidate, k int) []candidate {
	if k < len(c)/8 {
		// Keep a sorted window of the best k, replacing its worst member.
		top := slices.Clone(c[:k])
		slices.SortFunc(top, less)
		for _, x := range c[k:] {
			if less(x, top[k-1]) < 0 {
				i, _ := slices.BinarySearchFunc(top, x, less)
				copy(top[i+1:], top[i:k-1])
				top[i] = x
			}
		}
		return top
	}
	slices.SortFunc(c, less)
	return c[:k]
}

// argmax returns the index of the largest value, the first among equals.
func argmax(x []float32) int {
	best := 0
	for i, v := range x {
		if v > x[best] {
			best = i
		}
	}
	return best
}
