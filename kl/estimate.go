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
	// Lower: the smallest bucketed KL of any pair of distributions that
	// agree with both dicts (lowerRest); never above the true KL.
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
	// masses, and for the lower bound the tokens both list, the mass P
	// lists that Q does not (G) and the mass Q lists that P does not (H).
	var union, listedP, listedQ, bothP, bothQ, both, pG, qH float64
	var nG, nH int
	i, j := 0, 0
	for i < len(p.Tokens) || j < len(q.Tokens) {
		var pi, qj float64 // probabilities, 0 when not listed
		switch {
		case j == len(q.Tokens) || (i < len(p.Tokens) && p.Tokens[i].ID < q.Tokens[j].ID):
			pi = math.Exp(p.Tokens[i].Logprob)
			pG += pi
			nG++
			i++
		case i == len(p.Tokens) || q.Tokens[j].ID < p.Tokens[i].ID:
			qj = math.Exp(q.Tokens[j].Logprob)
			qH += qj
			nH++
			j++
		default:
			pi, qj = math.Exp(p.Tokens[i].Logprob), math.Exp(q.Tokens[j].Logprob)
			bothP += pi
			bothQ += qj
			both += term(pi, qj)
			i++
			j++
		}
		listedP += pi
		listedQ += qj
		union += term(pi, qj)
	}
	union += term(max(0, 1-listedP), max(0, 1-listedQ))
	e.Union, e.Coverage = union, listedP
	var gMax, hMax float64 // most Q-mass G may have, most P-mass H may have
	if nG > 0 {
		gMax = float64(nG) * unlistedMax(q, actual)
	}
	if nH > 0 {
		hMax = float64(nH) * unlistedMax(p, actual)
	}
	e.Lower = both + lowerRest(pG, qH, max(0, 1-bothP-pG), max(0, 1-bothQ-qH), gMax, hMax)
	return e, nil
}

// unlistedMax bounds the probability of any token the dict does not list:
// it ranks below the top k, so it is at most the smallest of them. The
// actual token is left out when it may be outside the top k (vLLM lists it
// with its true rank, k+1 or more). +Inf when nothing bounds it.
func unlistedMax(e *Entry, actual int) float64 {
	n := len(e.Tokens)
	m := math.Inf(1)
	for _, t := range e.Tokens {
		if t.ID == actual && t.Rank > n-1 {
			continue
		}
		m = min(m, math.Exp(t.Logprob))
	}
	return m
}

// lowerRest is the smallest KL, over every assignment of the unknown
// masses that both dicts allow, of the buckets G (tokens only P lists:
// P-mass pG, Q-mass qG unknown, at most gMax), H (tokens only Q lists:
// Q-mass qH, P-mass pH unknown, at most hMax) and the rest (P-mass pRem −
// pH, Q-mass qRem − qG). Any such assignment is a coarse-graining of the
// true distributions, so the minimum is still a lower bound of the KL; and
// it is never below the KL of G, H and the rest merged into one bucket,
// which it equals unless a bound binds.
//
// The objective is convex. At its minimum each unknown is at its upper
// bound or at its stationary point given the other (qG = qRem·pG/(pG +
// pRem − pH), pH = pRem·qH/(qH + qRem − qG)); a lower bound of 0 is never
// better, the term of a positive mass against 0 being infinite. So the
// minimum is the least of the four cases, evaluated exactly.
func lowerRest(pG, qH, pRem, qRem, gMax, hMax float64) float64 {
	gMax, hMax = min(gMax, qRem), min(hMax, pRem)
	f := func(qG, pH float64) float64 {
		return term(pG, qG) + term(pH, qH) + term(pRem-pH, qRem-qG)
	}
	clamp := func(v, hi float64) float64 { return min(max(v, 0), hi) }
	best := math.Inf(1)
	// Both free: every bucket has the merged ratio (pG+pRem)/(qH+qRem).
	if pG+pRem > 0 && qH+qRem > 0 {
		qG, pH := pG*(qH+qRem)/(pG+pRem), qH*(pG+pRem)/(qH+qRem)
		if qG <= gMax && pH <= hMax {
			best = f(qG, pH)
		}
	}
	// qG at its bound, pH free.
	if r := qH + qRem - gMax; r > 0 {
		best = min(best, f(gMax, clamp(pRem*qH/r, hMax)))
	} else {
		best = min(best, f(gMax, 0))
	}
	// pH at its bound, qG free.
	if r := pG + pRem - hMax; r > 0 {
		best = min(best, f(clamp(qRem*pG/r, gMax), hMax))
	} else {
		best = min(best, f(0, hMax))
	}
	return min(best, f(gMax, hMax))
}

// term is p·(log p − log q) with both clamped to Eps inside the logs, and 0
// where p is 0.
func term(p, q float64) float64 {
	if p <= 0 {
		return 0
	}
	return p * (math.Log(max(p, Eps)) - math.Log(max(q, Eps)))
}
