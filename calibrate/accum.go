package calibrate

import (
	"fmt"
	"math"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/blas32"

	"github.com/lowbit-ai/lowbit/calibrate/stats"
	"github.com/lowbit-ai/lowbit/runtime"
)

// site accumulates the statistics of one activation that one or more linear
// modules read (q/k/v share the attention input, gate/up the MLP input):
// per channel the maximum of |x| and the float64 sum of |x|, the number of
// tokens, and optionally the sum of x xᵀ (its upper triangle; the lower one
// is never read): each sample's in float32 (one BLAS SSYRK, as
// llm-compressor accumulates its Hessians in float32, and 3-4 times faster
// than float64 here), added into a float64 sum over samples.
//
// Every update runs in a fixed order (token by token, channel by channel;
// the Hessian by one BLAS call per sample), and the state is exactly what a
// checkpoint saves, so a resumed run ends with the same bits as one that was
// never interrupted.
type site struct {
	n      int
	absmax []float32
	sumAbs []float64
	tokens int64
	h      []float64  // [n, n], upper triangle; nil without Hessians
	tmp    *[]float32 // the sample's Σ x xᵀ, shared by the sites of a pass
}

// newSite returns the accumulators of an activation of width n; tmp is
// the Hessian scratch, which sites that are updated one after another may
// share (nil without Hessians).
func newSite(n int, tmp *[]float32) *site {
	s := &site{n: n, absmax: make([]float32, n), sumAbs: make([]float64, n), tmp: tmp}
	if tmp != nil {
		s.h = make([]float64, n*n)
	}
	return s
}

// add folds T rows of x [T, n] into the statistics. It fails, changing
// nothing, at the first NaN or infinity, naming its token and channel.
func (s *site) add(x []float32, T int) error {
	if len(x) != T*s.n {
		return fmt.Errorf("calibrate: %d values for %d tokens of width %d", len(x), T, s.n)
	}
	if err := checkFinite(x, s.n); err != nil {
		return err
	}
	for t := range T {
		row := x[t*s.n : (t+1)*s.n]
		amax, sum := s.absmax[:len(row)], s.sumAbs[:len(row)]
		for c, v := range row {
			a := abs32(v)
			amax[c] = max(amax[c], a)
			sum[c] += float64(a)
		}
	}
	s.tokens += int64(T)
	if s.h != nil {
		n := s.n
		if cap(*s.tmp) < n*n {
			*s.tmp = make([]float32, n*n)
		}
		tmp := (*s.tmp)[:n*n]
		// tmp = Xᵀ X for X [T, n], row-major: the upper triangle only.
		blas32.Implementation().Ssyrk(blas.Upper, blas.Trans, n, T, 1, x, n, 0, tmp, n)
		for i := range n {
			h, t := s.h[i*n+i:(i+1)*n], tmp[i*n+i:(i+1)*n]
			for j, v := range t {
				h[j] += float64(v)
			}
		}
	}
	return nil
}

// nonFiniteError reports a NaN or infinite activation; Run adds where it was.
type nonFiniteError struct {
	token, channel int
	value          float32
}

func (e *nonFiniteError) Error() string {
	return fmt.Sprintf("token %d, channel %d is %v", e.token, e.channel, e.value)
}

// linear returns the statistics of a module that reads this site.
func (s *site) linear(module string) stats.Linear {
	l := stats.Linear{Module: module, ChannelAbsMax: s.absmax, MeanAbs: make([]float32, s.n)}
	for c, m := range s.absmax {
		l.InputAbsMax = max(l.InputAbsMax, m)
		// The float32 mean can round above a maximum that every |x|
		// equals; the format requires mean <= max.
		l.MeanAbs[c] = min(float32(s.sumAbs[c]/float64(s.tokens)), m)
	}
	if s.h != nil {
		n, h := s.n, s.h
		l.HessianTokens = s.tokens
		l.Hessian = func(i int, row []float32) error {
			for j := range row {
				a, b := min(i, j), max(i, j)
				row[j] = float32(h[a*n+b])
			}
			return nil
		}
	}
	return l
}

// kvSite accumulates an attention layer's key and value ranges: max |k| per
// KV head and max |v|.
type kvSite struct {
	heads, headDim int
	kHead          []float32
	v              float32
}

func (s *kvSite) addK(x []float32, T int) error {
	if err := checkFinite(x, s.heads*s.headDim); err != nil {
		return err
	}
	for len(x) > 0 {
		for h := range s.heads {
			m := s.kHead[h]
			for _, v := range x[h*s.headDim : (h+1)*s.headDim] {
				m = max(m, abs32(v))
			}
			s.kHead[h] = m
		}
		x = x[s.heads*s.headDim:]
	}
	return nil
}

func (s *kvSite) addV(x []float32, T int) error {
	if err := checkFinite(x, s.heads*s.headDim); err != nil {
		return err
	}
	m := s.v
	for _, v := range x {
		m = max(m, abs32(v))
	}
	s.v = m
	return nil
}

// checkFinite returns the first NaN or infinity of x, rows of n, as an
// error: a float32 whose exponent bits are all ones.
func checkFinite(x []float32, n int) error {
	for i, v := range x {
		if math.Float32bits(v)&0x7F800000 == 0x7F800000 {
			return &nonFiniteError{token: i / n, channel: i % n, value: v}
		}
	}
	return nil
}

// abs32 is |v|.
func abs32(v float32) float32 { return math.Float32frombits(math.Float32bits(v) &^ (1 << 31)) }

func (s *kvSite) attention(module string) stats.Attention {
	a := stats.Attention{Module: module, VAbsMax: s.v, KHeadAbsMax: s.kHead}
	for _, m := range s.kHead {
		a.KAbsMax = max(a.KAbsMax, m)
	}
	return a
}

// layerStats holds one decoder layer's accumulators.
type layerStats struct {
	index int
	sites [4]*site // attn input, o_proj input, MLP input, down_proj input
	kv    *kvSite
}

// siteOf maps the observation points of linear inputs to layerStats.sites.
var siteOf = map[runtime.ObservePoint]int{
	runtime.ObserveAttnInput:  0,
	runtime.ObserveOProjInput: 1,
	runtime.ObserveMLPInput:   2,
	runtime.ObserveDownInput:  3,
}

// siteModules are the linear modules reading each site, after
// "model.layers.N.".
var siteModules = [4][]string{
	{"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"},
	{"self_attn.o_proj"},
	{"mlp.gate_proj", "mlp.up_proj"},
	{"mlp.down_proj"},
}

// siteNames name the sites in checkpoints and errors.
var siteNames = [4]string{"attn_input", "o_proj_input", "mlp_input", "down_proj_input"}

// newLayerStats returns layer i's accumulators; tmp, the Hessian scratch,
// is nil without Hessians.
func newLayerStats(i int, sh shape, tmp *[]float32) *layerStats {
	l := &layerStats{index: i, kv: &kvSite{heads: sh.kvHeads, headDim: sh.headDim, kHead: make([]float32, sh.kvHeads)}}
	for j, n := range sh.siteWidths() {
		l.sites[j] = newSite(n, tmp)
	}
	return l
}

// observe folds one observation into the layer's statistics.
func (l *layerStats) observe(p runtime.ObservePoint, x []float32, T int) error {
	switch p {
	case runtime.ObserveKey:
		return l.kv.addK(x, T)
	case runtime.ObserveValue:
		return l.kv.addV(x, T)
	}
	j, ok := siteOf[p]
	if !ok {
		return fmt.Errorf("calibrate: unknown observation point %v", p)
	}
	return l.sites[j].add(x, T)
}

// prefix is the Hugging Face name prefix of decoder layer i.
func prefix(i int) string { return fmt.Sprintf("model.layers.%d.", i) }

// results returns the layer's statistics in the stats format, linear
// modules in model order.
func (l *layerStats) results() ([]stats.Linear, stats.Attention) {
	var lins []stats.Linear
	for j, s := range l.sites {
		for _, m := range siteModules[j] {
			lins = append(lins, s.linear(prefix(l.index)+m))
		}
	}
	return lins, l.kv.attention(prefix(l.index) + "self_attn")
}

// shape holds the widths calibration needs from the model's config.
type shape struct {
	layers, hidden, inter   int
	heads, kvHeads, headDim int
}

func (s shape) siteWidths() [4]int {
	return [4]int{s.hidden, s.heads * s.headDim, s.hidden, s.inter}
}

// hessianBytes is the float64 Hessian memory of one layer.
func (s shape) hessianBytes() int64 {
	var n int64
	for _, w := range s.siteWidths() {
		n += 8 * int64(w) * int64(w)
	}
	return n
}
