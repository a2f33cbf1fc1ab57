package kl

import (
	"fmt"
	"math"
)

// Eps is the probability a token gets in the union estimator on a side
// that did not list it, inside the logarithm only (as the public
// compare_kl_api.py script clamps it).
const Eps = 1e-12

// Estimates are the three top-k estimates of KL(P‖Q) at one position, from
// the two servers' dicts (see the package documentation for their biases).
type Estimates struct {
	// Union: KL over the union of both dicts plus one tail bucket per side
	// (1 − the listed mass); a token one side does not list has
	// probability 0 there (Eps inside the log).
	Union float64
	// Lower: KL over the tokens both dicts list plus one bucket for
	// everything else; never above the true KL.
	Lower float64
	// Delta: log P(actual) − log Q(actual); its mean is KL only where the
	// tokens were sampled from P.
	Delta float64
	// Coverage is the probability mass of P's listed tokens.
	Coverage float64
	// RefTop1 and CandTop1 are the rank-1 ids, -1 when a dict has none.
	RefTop1, CandTop1 int
}

// top1Text returns the decoded text of the dict's rank-1 token.
func top1Text(e *Entry) string {
	for _, t := range e.Tokens {
		if t.Rank == 1 {
			return t.Decoded
		}
	}
	return ""
}

// Estimate computes the Estimates of one position from the reference's dict
// p and the candidate's q, which must both list the actual token.
func Estimate(p, q *Entry, actual int) (Estimates, error) {
	ap, ok := p.Lookup(actual)
	if !ok {
		return Estimates{}, fmt.Errorf("kl: the reference's dict lacks the actual token %d", actual)
	}
	aq, ok := q.Lookup(actual)
	if !ok {
		return Estimates{}, fmt.Errorf("kl: the candidate's dict lacks the actual token %d", actual)
	}
	e := Estimates{Delta: ap.Logprob - aq.Logprob, RefTop1: p.Top1(), CandTop1: q.Top1()}

	// Merge the two id-sorted dicts once: the union's terms, the listed
	// masses and the intersection's masses.
	var union, listedP, listedQ, bothP, bothQ, lower float64
	i, j := 0, 0
	for i < len(p.Tokens) || j < len(q.Tokens) {
		var pi, qj float64 // probabilities, 0 when not listed
		switch {
		case j == len(q.Tokens) || (i < len(p.Tokens) && p.Tokens[i].ID < q.Tokens[j].ID):
			pi = math.Exp(p.Tokens[i].Logprob)
			i++
		case i == len(p.Tokens) || q.Tokens[j].ID < p.Tokens[i].ID:
			qj = math.Exp(q.Tokens[j].Logprob)
			j++
		default:
			pi, qj = math.Exp(p.Tokens[i].Logprob), math.Exp(q.Tokens[j].Logprob)
			bothP += pi
			bothQ += qj
			lower += term(pi, qj)
			i++
			j++
		}
		listedP += pi
		listedQ += qj
		union += term(pi, qj)
	}
	union += term(max(0, 1-listedP), max(0, 1-listedQ))
	lower += term(max(0, 1-bothP), max(0, 1-bothQ))
	e.Union, e.Lower, e.Coverage = union, lower, listedP
	return e, nil
}

// term is p·(log p − log q) with both clamped to Eps inside the logs, and 0
// where p is 0.
func term(p, q float64) float64 {
	if p <= 0 {
		return 0
	}
	return p * (math.Log(max(p, Eps)) - math.Log(max(q, Eps)))
}
