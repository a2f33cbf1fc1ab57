package quantize

import (
	"fmt"
	"math"
	"strings"

	"github.com/lowbit-ai/lowbit/format"
)

// Method is how weights are rounded to their format once its layout is
// chosen.
type Method uint8

const (
	// RTN rounds every weight to the nearest code, with scales from each
	// scale unit's absmax: the formulas of math*.go, byte for byte as the
	// released tools write them.
	RTN Method = iota
	// MSE shrinks each scale unit's range where that lowers the rounding
	// error: llm-compressor's mse observer (below).
	MSE
	// GPTQ rounds column by column and spreads each column's error over the
	// columns not yet rounded, weighted by the inputs' Hessian from
	// calibration (gptq.go). Scales are RTN's.
	GPTQ
)

// ParseMethod reads a method's CLI name (rtn, mse, gptq).
func ParseMethod(s string) (Method, error) {
	switch strings.ToLower(s) {
	case "rtn":
		return RTN, nil
	case "mse":
		return MSE, nil
	case "gptq":
		return GPTQ, nil
	}
	return 0, fmt.Errorf("quantize: unknown method %q: choose rtn, mse or gptq", s)
}

func (m Method) String() string {
	switch m {
	case MSE:
		return "mse"
	case GPTQ:
		return "gptq"
	}
	return "rtn"
}

// The MSE clip search, after llm-compressor's memoryless_mse observer
// (observers/mse.py, mse_quant.py): for each scale unit (a row for
// per-channel FP8, the matrix for per-tensor FP8, a 128x128 block for
// FP8_BLOCK, a group of 16 for NVFP4) with absmax A, try the ranges
// p·A for p = 1, 0.99, ..., 0.81 (grid 100, maxshrink 0.2), each rounded
// to BF16 as the observer's BF16 min/max are, and keep the one whose
// quantization error Σ |q(w) − w|^2.4 over the unit is smallest; stop
// after 5 tries in a row without improvement (patience). Ties keep the
// larger range, so the search never does worse than RTN in this norm.
//
// Two choices differ from llm-compressor. Candidates are scored with the
// scale the format actually stores (rounded to BF16, or to E4M3 under the
// fixed NVFP4 global scale), where llm-compressor scores NVFP4 candidates
// with unrounded scales and no global scale; and candidates that give the
// same stored scale as the one before are skipped without counting toward
// the patience, since they quantize identically (an E4M3 block scale moves
// in steps of 6-12%, so most grid points repeat it). And the NVFP4 global
// scale stays RTN's, from the fused group's absmax, where llm-compressor
// recomputes it from the shrunk group maxima (which lowers it by at most
// the largest group's shrink).
const (
	mseGrid      = 100
	mseMaxShrink = 0.2
	msePatience  = 5
	mseNorm      = 2.4
)

// searchClip returns the range of one scale unit whose absmax is amax:
// key(a) identifies the stored scale range a gives, and cost(a) the error
// of quantizing the unit with it.
func searchClip(amax float32, key func(a float32) uint32, cost func(a float32) float64) float32 {
	if amax == 0 {
		return 0
	}
	best, prev := amax, key(amax)
	bestErr := cost(amax)
	stale := 0
	for i := 1; i < int(mseMaxShrink*mseGrid); i++ {
		a := format.RoundBF16(float32(float64(amax) * (1 - float64(i)/mseGrid)))
		k := key(a)
		if k == prev {
			continue
		}
		prev = k
		if e := cost(a); e < bestErr {
			best, bestErr, stale = a, e, 0
		} else if stale++; stale >= msePatience {
			break
		}
	}
	return best
}

// errPow is |d|^2.4, the search's error of one element.
func errPow(d float64) float64 {
	if d == 0 {
		return 0
	}
	return math.Pow(math.Abs(d), mseNorm)
}

// bf16Floats decodes BF16 bytes into dst (as float32).
func bf16Floats(dst []float32, b []byte) []float32 {
	dst = dst[:0]
	for i := 0; i+1 < len(b); i += 2 {
		dst = append(dst, math.Float32frombits(uint32(b[i])<<16|uint32(b[i+1])<<24))
	}
	return dst
}

// fp8Scaler returns, for a format's FP8 weights, the stored scale for a
// range a, and the E4M3 code of a weight w under scale s.
func fp8Scaler(f Format, s Scheme) (scale func(a float32) float32, code func(w float32, s float32) uint8) {
	if f != ModelOpt {
		return func(a float32) float32 { return format.FP8Scale(a, format.BF16) },
			func(w, s float32) uint8 { return e4m3ViaBF16(math.Float32bits(w), 1/float64(s)) }
	}
	if s == FP8Dynamic {
		return func(a float32) float32 {
				if a == 0 {
					a = format.E4M3Max
				}
				return max(a, 0x1p-126) / format.E4M3Max
			},
			func(w, s float32) uint8 { return e4m3Direct(math.Float32bits(w), 1/float64(s)) }
	}
	return func(a float32) float32 { return a / format.E4M3Max },
		func(w, s float32) uint8 { return e4m3ViaBF16(math.Float32bits(w), 1/float64(s)) }
}

// fp8Clip searches the range of one FP8 scale unit whose weights are w.
func fp8Clip(w []float32, amax float32, scale func(float32) float32, code func(float32, float32) uint8) float32 {
	return searchClip(amax,
		func(a float32) uint32 { return math.Float32bits(scale(a)) },
		func(a float32) float64 {
			s := scale(a)
			var e float64
			for _, x := range w {
				e += errPow(float64(format.E4M3ToFloat32(code(x, s)))*float64(s) - float64(x))
			}
			return e
		})
}

// mseFP8Clip returns the clip ranges of an FP8 matrix, one per scale unit
// in the order ctFP8Channel, ctFP8Tensor, ctFP8Block and their ModelOpt
// counterparts take them. m must be well formed and finite (the RTN
// functions check both again).
func mseFP8Clip(f Format, sc Scheme, m Matrix) []float32 {
	scale, code := fp8Scaler(f, sc)
	var w []float32
	switch sc {
	case FP8Dynamic:
		clip := make([]float32, m.Rows)
		for r := range m.Rows {
			w = bf16Floats(w, m.row(r))
			clip[r] = fp8Clip(w, bf16Value(absMaxBits(m.row(r))), scale, code)
		}
		return clip
	case FP8:
		w = bf16Floats(w, m.BF16)
		return []float32{fp8Clip(w, bf16Value(absMaxBits(m.BF16)), scale, code)}
	}
	const bs = format.FP8BlockSize
	nbr, nbc := ceilDiv(m.Rows, bs), m.Cols/bs
	clip := make([]float32, nbr*nbc)
	var row []float32
	for br := range nbr {
		for bc := range nbc {
			w = w[:0]
			var amax uint32
			for r := br * bs; r < min((br+1)*bs, m.Rows); r++ {
				b := m.row(r)[2*bc*bs : 2*(bc+1)*bs]
				amax = max(amax, absMaxBits(b))
				row = bf16Floats(row, b)
				w = append(w, row...)
			}
			clip[br*nbc+bc] = fp8Clip(w, bf16Value(amax), scale, code)
		}
	}
	return clip
}

// mseNVFP4Clip returns the clip range of every group of 16 of an NVFP4
// matrix under the fixed global scale of p. m must be well formed.
func mseNVFP4Clip(m Matrix, p *nvfp4Params) ([]float32, error) {
	const g = format.NVFP4BlockSize
	clip := make([]float32, m.Rows*m.Cols/g)
	w := make([]float32, 0, g)
	var failed error
	for b := range clip {
		blk := m.BF16[2*g*b : 2*g*(b+1)]
		amaxBits := absMaxBits(blk)
		if amaxBits >= bf16Inf {
			return nil, checkFinite(m, amaxBits, b*g/m.Cols, -1)
		}
		w = bf16Floats(w, blk)
		clip[b] = searchClip(bf16Value(amaxBits),
			func(a float32) uint32 {
				c, err := p.blockScale(m, a)
				if err != nil && failed == nil {
					failed = err
				}
				return uint32(c)
			},
			func(a float32) float64 {
				c, _ := p.blockScale(m, a)
				return nvfp4GroupErr(w, p, c)
			})
		if failed != nil {
			return nil, failed
		}
	}
	return clip, nil
}

// nvfp4GroupErr is the search error of a group of weights w quantized with
// block scale code c.
func nvfp4GroupErr(w []float32, p *nvfp4Params, c uint8) float64 {
	inv := p.inv[c&0x7F]
	var e float64
	if math.IsInf(inv, 1) { // ModelOpt's zero scale: every weight dequantizes to 0
		for _, x := range w {
			e += errPow(float64(x))
		}
		return e
	}
	s := float64(p.elemScale(c))
	for _, x := range w {
		q := e2m1Scaled(math.Float32bits(x), inv)
		e += errPow(float64(format.E2M1ToFloat32(q))*s - float64(x))
	}
	return e
}

// elemScale returns the element scale of block scale code c: the divisor
// the codes were rounded with and the multiplier that dequantizes them.
func (p *nvfp4Params) elemScale(c uint8) float32 {
	v := format.E4M3ToFloat32(c & 0x7F)
	if p.modelOpt {
		return v * p.s
	}
	return v / p.s
}
