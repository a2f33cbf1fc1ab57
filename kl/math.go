package kl

import "math"

// RowStats are what one position's two full-vocabulary log-probability rows
// give: the exact KL, each side's argmax and P's entropy.
type RowStats struct {
	KL                float64 // KL(P‖Q) in nats
	RefTop1, CandTop1 int     // argmax ids (the lowest id among equal maxima)
	RefEntropy        float64 // H(P) in nats
}

// FullKL returns KL(P‖Q) = Σ_i p_i (log p_i − log q_i) over the whole
// vocabulary for two rows of log-probabilities (log-softmax outputs, as a
// server computes them in float32), summed in float64.
//
// A float32 log-softmax row does not exponentiate to a sum of exactly 1, and
// KL of unnormalized rows can come out slightly negative. So the rows are
// renormalized in float64 first: with S_p = Σ exp(lp_i),
//
//	KL = Σ_i (exp(lp_i)/S_p)(lp_i − lq_i) − log S_p + log S_q,
//
// the exact KL of the two distributions the rows describe. Identical rows
// give exactly 0: every difference is 0 and S_p = S_q bit for bit.
func FullKL(lp, lq []float32) float64 {
	return Row(lp, lq).KL
}

// Row returns the RowStats of two log-probability rows of equal length.
func Row(lp, lq []float32) RowStats {
	if len(lp) != len(lq) {
		panic("kl: Row: rows of different lengths")
	}
	var sp, sq, cross, ent float64
	r := RowStats{}
	bp, bq := float32(math.Inf(-1)), float32(math.Inf(-1))
	for i, a := range lp {
		b := lq[i]
		p := math.Exp(float64(a))
		sp += p
		sq += math.Exp(float64(b))
		if p > 0 {
			cross += p * (float64(a) - float64(b))
			ent -= p * float64(a)
		}
		if a > bp {
			bp, r.RefTop1 = a, i
		}
		if b > bq {
			bq, r.CandTop1 = b, i
		}
	}
	r.KL = cross/sp - math.Log(sp) + math.Log(sq)
	// H of the renormalized row: −Σ (p/S)(lp − log S).
	r.RefEntropy = ent/sp + math.Log(sp)
	return r
}
