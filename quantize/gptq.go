package quantize

import (
	"fmt"
	"math"
	"slices"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/blas64"
	"gonum.org/v1/gonum/lapack/lapack64"

	"github.com/lowbit-ai/lowbit/calibrate/stats"
	"github.com/lowbit-ai/lowbit/format"
)

// GPTQ (Frantar et al., 2022), as llm-compressor runs it
// (modifiers/gptq/gptq_quantize.py; ../shared/specs/formats.md §5):
//
//   - H is the module's input Hessian Σ x xᵀ from calibration (its scale
//     does not matter: the damping below is relative).
//   - Activation order ("static", llm-compressor's default): columns are
//     processed by descending diag(H), and the result keeps the original
//     column order, so scales are unaffected and no g_idx is written.
//   - Dead columns (diag(H) = 0: an input that was always zero) get
//     H[d, d] = 1 and their weights set to 0.
//   - Damping: H += 0.01 · mean(diag H) · I. Then Hinv = U, the upper
//     Cholesky factor of H⁻¹ (cholesky, cholesky_inverse, cholesky upper).
//     If a factorization fails, the module falls back to RTN, with a
//     warning, as llm-compressor does.
//   - Scales are computed once, from the original weight, exactly as RTN
//     stores them (for NVFP4 the fused group's global scale too).
//   - In blocks of 128 columns, for each column i: q = the column rounded
//     with its fixed scales; err = (w − q) / U[i, i]; the block's later
//     columns j get W[:, j] −= err · U[i, j]; after the block, every later
//     column gets W[:, i2:] −= Err · U[i1:i2, i2:].
//
// The arithmetic is float64 (llm-compressor's is float32). The codes chosen
// for each column are the output: llm-compressor instead returns the
// rounded weights in BF16 and re-quantizes them with the same scales, which
// gives the same codes, since each rounded weight lies on its grid point to
// within BF16 precision, far from any rounding boundary.
const (
	gptqBlock = 128
	gptqDamp  = 0.01
)

// hessianInv is what GPTQ needs of one Hessian: the processing order, the
// dead columns, and U, the upper Cholesky factor of the damped, permuted
// H⁻¹ (n×n, row-major; its lower triangle is unused).
type hessianInv struct {
	n        int
	perm     []int  // perm[j]: the original column processed j-th
	dead     []bool // by original column
	u        []float64
	fallback bool // a factorization failed: U = I, which is RTN
}

// gptqWorkBytes estimates the memory GPTQ needs for a [rows, cols] matrix:
// the Hessian (float64), its factor, and the float64 weights.
func gptqWorkBytes(rows, cols int) int64 {
	return 8 * (2*int64(cols)*int64(cols) + 2*int64(rows)*int64(cols))
}

// newHessianInv prepares a Hessian for GPTQ.
func newHessianInv(h stats.Hessian) *hessianInv {
	n := h.N()
	hi := &hessianInv{n: n, perm: make([]int, n), dead: make([]bool, n)}
	diag := make([]float64, n)
	for i := range n {
		diag[i] = float64(h.At(i, i))
		hi.perm[i] = i
	}
	// Descending diag(H); equal values keep their column order, so the
	// order is deterministic.
	slices.SortStableFunc(hi.perm, func(a, b int) int {
		switch {
		case diag[a] > diag[b]:
			return -1
		case diag[a] < diag[b]:
			return 1
		}
		return 0
	})
	a := make([]float64, n*n)
	row := make([]float32, n)
	pos := make([]int, n) // pos[c]: where original column c is processed
	for j, c := range hi.perm {
		pos[c] = j
	}
	for i := range n {
		h.Row(i, row)
		pi := pos[i]
		for j, v := range row {
			a[pi*n+pos[j]] = float64(v)
		}
	}
	var mean float64
	for c := range n {
		if diag[c] == 0 {
			hi.dead[c] = true
			a[pos[c]*n+pos[c]] = 1
		}
		mean += a[pos[c]*n+pos[c]]
	}
	damp := gptqDamp * mean / float64(n)
	for j := range n {
		a[j*n+j] += damp
	}
	sym := blas64.Symmetric{Uplo: blas.Upper, N: n, Data: a, Stride: n}
	t, ok := lapack64.Potrf(sym) // H = UᵀU
	if ok {
		sym, ok = lapack64.Potri(t) // H⁻¹, upper triangle
	}
	if ok {
		_, ok = lapack64.Potrf(sym) // H⁻¹ = UᵀU
	}
	for i := range n * n {
		if !ok || math.IsNaN(a[i]) || math.IsInf(a[i], 0) {
			ok = false
			break
		}
	}
	if !ok {
		clear(a)
		for j := range n {
			a[j*n+j] = 1
		}
		hi.fallback = true
	}
	hi.u = a
	return hi
}

// sameHessian reports whether two Hessians hold the same values, as the
// inputs that q/k/v (or gate/up) share give them.
func sameHessian(a, b stats.Hessian) bool {
	if a.N() != b.N() || a.Tokens() != b.Tokens() {
		return false
	}
	ra, rb := make([]float32, a.N()), make([]float32, b.N())
	for i := range a.N() {
		a.Row(i, ra)
		b.Row(i, rb)
		if !slices.Equal(ra, rb) {
			return false
		}
	}
	return true
}

// elemGrid rounds one weight with a fixed element scale s (the divisor
// that dequantization multiplies back): its code, and the value the code
// stands for.
type elemGrid func(w float64, s float32) (code uint8, q float64)

func fp8Grid(w float64, s float32) (uint8, float64) {
	c := e4m3FromF32(float32(w / float64(s)))
	return c, float64(format.E4M3ToFloat32(c)) * float64(s)
}

func fp4Grid(w float64, s float32) (uint8, float64) {
	if s == 0 { // ModelOpt's zero block scale: w/0, which decodes to 0
		if w < 0 {
			return 15, 0
		}
		return 7, 0
	}
	c := e2m1Code(float32(w / float64(s)))
	return c, float64(format.E2M1ToFloat32(c)) * float64(s)
}

// gptq returns the codes, [Rows, Cols] row-major, one per weight, that GPTQ
// chooses for m with the element scales scaleAt(r, c) fixed.
func gptq(m Matrix, hi *hessianInv, scaleAt func(r, c int) float32, grid elemGrid) ([]uint8, error) {
	rows, n := m.Rows, m.Cols
	if hi.n != n {
		return nil, fmt.Errorf("quantize: GPTQ: a Hessian of %d inputs for a weight of %d: %w", hi.n, n, ErrShape)
	}
	// wt holds the weights column by column, in processing order, so that
	// every column update is contiguous.
	wt := make([]float64, n*rows)
	for r := range rows {
		src := m.row(r)
		for j, c := range hi.perm {
			if !hi.dead[c] {
				wt[j*rows+r] = float64(bf16Value(uint32(src[2*c]) | uint32(src[2*c+1])<<8))
			}
		}
	}
	codes := make([]uint8, rows*n)
	errs := make([]float64, gptqBlock*rows)
	scales := make([]float32, rows)
	impl := blas64.Implementation()
	u := hi.u
	for i1 := 0; i1 < n; i1 += gptqBlock {
		i2 := min(i1+gptqBlock, n)
		for i := i1; i < i2; i++ {
			c := hi.perm[i]
			for r := range rows {
				scales[r] = scaleAt(r, c)
			}
			w, e := wt[i*rows:(i+1)*rows], errs[(i-i1)*rows:(i-i1+1)*rows]
			d := u[i*n+i]
			for r, x := range w {
				code, q := grid(x, scales[r])
				codes[r*n+c] = code
				e[r] = (x - q) / d
			}
			for j := i + 1; j < i2; j++ {
				if f := u[i*n+j]; f != 0 {
					impl.Daxpy(rows, -f, e, 1, wt[j*rows:(j+1)*rows], 1)
				}
			}
		}
		if i2 < n {
			// wt[i2:] -= U[i1:i2, i2:]ᵀ · errs, [n-i2, rows].
			impl.Dgemm(blas.Trans, blas.NoTrans, n-i2, rows, i2-i1, -1, u[i1*n+i2:], n, errs, rows, 1, wt[i2*rows:], rows)
		}
	}
	for _, w := range wt {
		if math.IsNaN(w) || math.IsInf(w, 0) {
			return nil, fmt.Errorf("quantize: GPTQ: %w: the weight updates diverged (a non-finite value)", ErrNotFinite)
		}
	}
	return codes, nil
}

// packE2M1 packs one E2M1 code per weight, two per byte along the row
// (element 2i in the low nibble), into dst.
func packE2M1(dst []byte, codes []uint8) {
	for i := range dst {
		dst[i] = codes[2*i]&0xF | codes[2*i+1]<<4
	}
}

// fp8ScaleAt returns the element scale of weight (r, c) of an FP8 weight
// quantized by scheme sc in format f, read back from its stored scales.
func fp8ScaleAt(f Format, sc Scheme, w *FP8Weight, m Matrix) func(r, c int) float32 {
	var s []float32
	if f == ModelOpt {
		s = make([]float32, len(w.Scale)/4)
		format.DecodeF32(s, w.Scale)
	} else {
		s = make([]float32, len(w.Scale)/2)
		format.DecodeBF16(s, w.Scale)
	}
	switch sc {
	case FP8Dynamic:
		return func(r, c int) float32 { return s[r] }
	case FP8Block:
		nbc := m.Cols / format.FP8BlockSize
		return func(r, c int) float32 { return s[r/format.FP8BlockSize*nbc+c/format.FP8BlockSize] }
	}
	return func(r, c int) float32 { return s[0] }
}

// nvfp4ScaleAt returns the element scale of weight (r, c) of an NVFP4
// weight with block scale codes scale, under p's global scale.
func nvfp4ScaleAt(p *nvfp4Params, scale []byte, m Matrix) func(r, c int) float32 {
	g := m.Cols / format.NVFP4BlockSize
	var byCode [128]float32
	for c := range byCode {
		byCode[c] = p.elemScale(uint8(c))
	}
	return func(r, c int) float32 { return byCode[scale[r*g+c/format.NVFP4BlockSize]&0x7F] }
}

// hessiansOf returns the prepared Hessian of each member of a fused layer,
// computing one per distinct Hessian (q/k/v and gate/up share theirs).
func hessiansOf(s *stats.Stats, modules []string) ([]*hessianInv, error) {
	out := make([]*hessianInv, len(modules))
	hs := make([]stats.Hessian, len(modules))
	for i, mod := range modules {
		h, err := s.Hessian(mod)
		if err != nil {
			return nil, err
		}
		hs[i] = h
		for j := range i {
			if sameHessian(hs[j], h) {
				out[i] = out[j]
				break
			}
		}
		if out[i] == nil {
			out[i] = newHessianInv(h)
		}
	}
	return out, nil
}
