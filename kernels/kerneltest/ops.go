package kerneltest

import (
	"fmt"
	"math"
	"sync"
)

// casesOf returns the cases of op, built once.
func casesOf(op string) []testCase { return allCases()[op] }

var allCases = sync.OnceValue(func() map[string][]testCase {
	return map[string][]testCase{
		OpMatMul:         matmulCases(),
		OpRMSNorm:        rmsnormCases(),
		OpRoPE:           ropeCases(),
		OpAttention:      attentionCases(),
		OpWriteKV:        writeKVCases(),
		OpPagedAttention: pagedAttentionCases(),
		OpSiLUMul:        siluCases(),
		OpAdd:            addCases(),
		OpLogSoftmax:     logSoftmaxCases(),
	}
})

// RMSNorm.

func rmsnormCases() []testCase {
	var cases []testCase
	dims := []int{1, 7, 16, 64, 128, 1000, 2048, 4096, 5120}
	for i, D := range dims {
		for j := range 4 {
			zc, alias := j&1 != 0, j&2 != 0
			T := batchSizes[(i*4+j)%len(batchSizes)]
			if T*D > 1<<17 {
				T = 3
			}
			eps := float32(1e-6)
			if (i+j)%2 == 1 {
				eps = 1e-5
			}
			name := fmt.Sprintf("T=%d/D=%d/eps=%g", T, D, eps)
			if zc {
				name += "/zeroCentered"
			}
			if alias {
				name += "/y=x"
			}
			cases = append(cases, testCase{op: OpRMSNorm, name: name, run: func(c *checker) {
				c.rmsnorm(T, D, eps, zc, alias)
			}})
		}
	}
	return cases
}

func (c *checker) rmsnorm(T, D int, eps float32, zc, alias bool) {
	// Rows of magnitudes 2^-8..2^8; row 1 (with T >= 2) small enough that
	// eps dominates the mean.
	x := make([]float32, T*D)
	for t := range T {
		mag := math.Exp2(c.uniform(-8, 8))
		if t == 1 {
			mag = 1e-4
		}
		for i := range D {
			x[t*D+i] = c.nonzero(mag)
		}
	}
	weight := make([]float32, D)
	for i := range weight {
		weight[i] = c.nonzero(0.2)
		if !zc {
			weight[i] += 1
		}
	}
	want := make([]float32, T*D)
	c.ref.RMSNorm(want, x, weight, T, D, eps, zc)
	tol := make([]float64, T*D)
	for t := range T {
		var ss float64
		for _, v := range x[t*D : (t+1)*D] {
			ss += float64(v) * float64(v)
		}
		r := 1 / math.Sqrt(ss/float64(D)+float64(eps))
		for i := range D {
			g := float64(weight[i])
			extra := 0.0
			if zc {
				g, extra = 1+g, 2
			}
			tol[t*D+i] = u * abs32(x[t*D+i]) * r * ((16+2*sqrt(D))*math.Abs(g) + extra)
		}
	}
	at := func(i int) string { return fmt.Sprintf("[t=%d,i=%d]", i/D, i%D) }
	w0 := clone(weight)

	var got []float32
	if alias {
		got = clone(x)
		c.ops.RMSNorm(got, got, weight, T, D, eps, zc)
	} else {
		x0 := clone(x)
		y := newOut(T * D)
		c.ops.RMSNorm(y.s(), x, weight, T, D, eps, zc)
		c.checkGuard("y", y)
		c.unchanged("x", x, x0)
		got = y.s()
	}
	c.unchanged("weight", weight, w0)
	c.near(got, want, tol, at)

	if T > 1 {
		for t := range T {
			row := clone(x[t*D : (t+1)*D])
			if alias {
				c.ops.RMSNorm(row, row, weight, 1, D, eps, zc)
			} else {
				y := newOut(D)
				c.ops.RMSNorm(y.s(), row, weight, 1, D, eps, zc)
				row = y.s()
			}
			c.same(row, got[t*D:(t+1)*D], func(i int) string { return at(t*D + i) })
		}
	}
}

// RoPE.

func ropeCases() []testCase {
	var cases []testCase
	type shape struct{ heads, headDim, rotaryDim int }
	shapes := []shape{
		{1, 16, 16}, {1, 16, 4}, {4, 64, 64}, {4, 64, 16}, {8, 128, 128},
		{2, 128, 32}, {2, 256, 64}, {3, 80, 80}, {5, 128, 64},
	}
	thetas := []float64{10000, 1e6, 5e6}
	maxPos := []int{16, 4096, 1 << 19}
	for i, s := range shapes {
		for j := range 2 {
			T := batchSizes[(2*i+j)%len(batchSizes)]
			theta := thetas[(i+j)%len(thetas)]
			mp := maxPos[(i+2*j)%len(maxPos)]
			name := fmt.Sprintf("T=%d/heads=%d/headDim=%d/rotaryDim=%d/theta=%g/pos<%d", T, s.heads, s.headDim, s.rotaryDim, theta, mp)
			cases = append(cases, testCase{op: OpRoPE, name: name, run: func(c *checker) {
				c.rope(T, s.heads, s.headDim, s.rotaryDim, theta, mp)
			}})
		}
	}
	return cases
}

func (c *checker) rope(T, heads, headDim, rotaryDim int, theta float64, maxPos int) {
	n := heads * headDim
	x := c.fill(T*n, 1)
	pos := make([]int32, T)
	for t := range pos {
		pos[t] = int32(c.rng.IntN(maxPos))
	}
	pos[0] = 0 // the identity rotation
	if T > 1 {
		pos[T-1] = int32(maxPos - 1)
	}
	want := clone(x)
	c.ref.RoPE(want, T, heads, headDim, rotaryDim, pos, theta)

	half := rotaryDim / 2
	tol := make([]float64, T*n)
	for t := range T {
		for j := range half {
			angle := float64(pos[t]) * math.Pow(theta, -2*float64(j)/float64(rotaryDim))
			cs := math.Abs(float64(float32(math.Cos(angle))))
			sn := math.Abs(float64(float32(math.Sin(angle))))
			for h := range heads {
				b := t*n + h*headDim
				x1, x2 := abs32(x[b+j]), abs32(x[b+j+half])
				tol[b+j] = 8 * u * (x1*cs + x2*sn)
				tol[b+j+half] = 8 * u * (x2*cs + x1*sn)
			}
		}
	}
	pos0 := append([]int32(nil), pos...)
	got := clone(x)
	c.ops.RoPE(got, T, heads, headDim, rotaryDim, pos, theta)
	for t := range pos {
		if pos[t] != pos0[t] {
			c.errorf(": input pos[%d] modified", t)
			break
		}
	}
	at := func(i int) string {
		return fmt.Sprintf("[t=%d,h=%d,d=%d](pos=%d)", i/n, i%n/headDim, i%headDim, pos0[i/n])
	}
	c.near(got, want, tol, at)

	if T > 1 {
		for t := range T {
			row := clone(x[t*n : (t+1)*n])
			c.ops.RoPE(row, 1, heads, headDim, rotaryDim, pos0[t:t+1], theta)
			c.same(row, got[t*n:(t+1)*n], func(i int) string { return at(t*n + i) })
		}
	}
}

// Attention.

func attentionCases() []testCase {
	var cases []testCase
	type shape struct{ H, KVH, Dh int }
	shapes := []shape{
		{1, 1, 16}, {2, 1, 64}, {4, 1, 64}, {4, 2, 128}, {8, 2, 128},
		{4, 4, 16}, {8, 8, 64}, {2, 2, 128}, {16, 4, 64},
	}
	starts := []int{0, 1, 5, 63, 300}
	Ts := []int{1, 2, 3, 7, 16, 17, 33, 65}
	k := 0
	for _, s := range shapes {
		for range 3 {
			T := Ts[k%len(Ts)]
			start := starts[(k/2)%len(starts)]
			if T*(start+T)*s.H*s.Dh > 1<<22 {
				start = 5
			}
			mult := []float64{1, 3}[k%2]
			cases = append(cases, attentionCase(T, start, s.H, s.KVH, s.Dh, mult))
			k++
		}
	}
	// Long decode, and scores too large for exp without the max subtracted;
	// then prefills longer than 128 tokens (kernels may switch strategy
	// past a batch size: kernels/cuda splits a context over blocks only up
	// to 128 tokens).
	cases = append(cases,
		attentionCase(1, 2047, 8, 2, 128, 1),
		attentionCase(2, 1000, 4, 1, 64, 1),
		attentionCase(9, 40, 4, 2, 64, 40),
		attentionCase(150, 30, 8, 2, 128, 1),
		attentionCase(133, 0, 16, 4, 64, 40),
	)
	return cases
}

// attentionCase returns a case with q, k, v normal and scale
// mult/sqrt(Dh): mult 1 gives scores of about ±1, 40 of about ±100 (float32
// exp overflows past 88).
func attentionCase(T, start, H, KVH, Dh int, mult float64) testCase {
	name := fmt.Sprintf("T=%d/start=%d/H=%d/KVH=%d/Dh=%d/scale=%g/sqrt(Dh)", T, start, H, KVH, Dh, mult)
	return testCase{op: OpAttention, name: name, run: func(c *checker) {
		c.attention(T, start, H, KVH, Dh, float32(mult/math.Sqrt(float64(Dh))))
	}}
}

func (c *checker) attention(T, start, H, KVH, Dh int, scale float32) {
	L := start + T
	q := c.fill(T*H*Dh, 1)
	k := c.fill(L*KVH*Dh, 1)
	v := c.fill(L*KVH*Dh, 1)
	want := make([]float32, T*H*Dh)
	c.ref.Attention(want, q, k, v, T, start, H, KVH, Dh, scale)
	tol := attentionTol(q, k, v, T, start, H, KVH, Dh, scale)

	q0, k0, v0 := clone(q), clone(k), clone(v)
	o := newOut(T * H * Dh)
	c.ops.Attention(o.s(), q, k, v, T, start, H, KVH, Dh, scale)
	c.checkGuard("out", o)
	c.unchanged("q", q, q0)
	c.unchanged("k", k, k0)
	c.unchanged("v", v, v0)
	at := func(i int) string {
		return fmt.Sprintf("[t=%d,h=%d,d=%d]", i/(H*Dh), i%(H*Dh)/Dh, i%Dh)
	}
	c.near(o.s(), want, tol, at)

	if T > 1 {
		n := H * Dh
		for t := range T {
			one := newOut(n)
			kv := (start + t + 1) * KVH * Dh
			c.ops.Attention(one.s(), q[t*n:(t+1)*n], k[:kv], v[:kv], 1, start+t, H, KVH, Dh, scale)
			c.same(one.s(), o.s()[t*n:(t+1)*n], func(i int) string { return at(t*n + i) })
		}
	}
}

// attentionTol returns u·Σ_p P_p|v_pd|·(2(8 + 2√Dh)·S + 4S + 24 + 4√L) per
// output element (see the package doc).
func attentionTol(q, k, v []float32, T, start, H, KVH, Dh int, scale float32) []float64 {
	tol := make([]float64, T*H*Dh)
	group := H / KVH
	scores := make([]float64, start+T)
	absv := make([]float64, Dh)
	for t := range T {
		L := start + t + 1
		for h := range H {
			kh := h / group
			qv := q[(t*H+h)*Dh : (t*H+h+1)*Dh]
			m, S := math.Inf(-1), 0.0
			for p := range L {
				kv := k[(p*KVH+kh)*Dh : (p*KVH+kh+1)*Dh]
				var dot, mag float64
				for d := range Dh {
					dot += float64(qv[d]) * float64(kv[d])
					mag += abs32(qv[d]) * abs32(kv[d])
				}
				scores[p] = dot * float64(scale)
				m = max(m, scores[p])
				S = max(S, mag*math.Abs(float64(scale)))
			}
			var sum float64
			for p := range L {
				scores[p] = math.Exp(scores[p] - m)
				sum += scores[p]
			}
			clear(absv)
			for p := range L {
				vv := v[(p*KVH+kh)*Dh : (p*KVH+kh+1)*Dh]
				for d := range Dh {
					absv[d] += scores[p] / sum * abs32(vv[d])
				}
			}
			k := u * (2*(8+2*sqrt(Dh))*S + 4*S + 24 + 4*sqrt(L))
			for d := range Dh {
				tol[(t*H+h)*Dh+d] = k * absv[d]
			}
		}
	}
	return tol
}

// SiLUMul.

func siluCases() []testCase {
	var cases []testCase
	widths := []int{1, 7, 16, 17, 63, 64, 65, 1000, 4099}
	for i, I := range widths {
		for j, alias := range []string{"", "out=gate", "out=up"} {
			T := batchSizes[(3*i+j)%len(batchSizes)]
			if T*I > 1<<16 {
				T = 3
			}
			name := fmt.Sprintf("T=%d/I=%d", T, I)
			if alias != "" {
				name += "/" + alias
			}
			cases = append(cases, testCase{op: OpSiLUMul, name: name, run: func(c *checker) {
				c.silu(T, I, alias, false)
			}})
		}
	}
	cases = append(cases, testCase{op: OpSiLUMul, name: "T=2/I=37/extremes", run: func(c *checker) {
		c.silu(2, 37, "", true)
	}})
	return cases
}

// silu runs SiLUMul on n = T·I elements, then each row of I alone: the
// rows are what batch invariance is about (out depends on gate[i] and up[i]
// only, whatever n). extremes puts gates where exp under- or overflows.
func (c *checker) silu(T, I int, alias string, extremes bool) {
	n := T * I
	gate := c.fill(n, 3)
	up := c.fill(n, 1)
	if extremes {
		special := []float32{0.5, 10, 20, 30, 60, 80, 87, 88.5, 89, 100, 200, 1e4, 1e-20, 1e30}
		for i := range gate {
			gate[i] = special[i%len(special)]
			if i/len(special)%2 == 1 {
				gate[i] = -gate[i]
			}
		}
	}
	want := make([]float32, n)
	c.ref.SiLUMul(want, gate, up, n)
	tol := make([]float64, n)
	for i := range tol {
		tol[i] = 32*u*abs32(want[i]) + 0x1p-120*abs32(up[i])
	}
	at := func(i int) string { return fmt.Sprintf("[%d](gate=%v,up=%v)", i, gate[i], up[i]) }
	got := c.siluCall(gate, up, n, alias)
	c.near(got, want, tol, at)
	if T > 1 {
		for t := range T {
			one := c.siluCall(gate[t*I:(t+1)*I], up[t*I:(t+1)*I], I, alias)
			c.same(one, got[t*I:(t+1)*I], func(i int) string { return at(t*I + i) })
		}
	}
}

// siluCall calls SiLUMul on copies of gate and up, into a fresh output or
// into one of them, and checks what it should not have touched.
func (c *checker) siluCall(gate, up []float32, n int, alias string) []float32 {
	g, p := clone(gate), clone(up)
	switch alias {
	case "out=gate":
		c.ops.SiLUMul(g, g, p, n)
		c.unchanged("up", p, up)
		return g
	case "out=up":
		c.ops.SiLUMul(p, g, p, n)
		c.unchanged("gate", g, gate)
		return p
	}
	o := newOut(n)
	c.ops.SiLUMul(o.s(), g, p, n)
	c.checkGuard("out", o)
	c.unchanged("gate", g, gate)
	c.unchanged("up", p, up)
	return o.s()
}

// Add.

func addCases() []testCase {
	var cases []testCase
	for i, n := range []int{1, 7, 8, 15, 16, 17, 63, 64, 65, 1000, 4099} {
		alias := []string{"", "out=a", "out=b"}[i%3]
		name := fmt.Sprintf("n=%d", n)
		if alias != "" {
			name += "/" + alias
		}
		cases = append(cases, testCase{op: OpAdd, name: name, run: func(c *checker) { c.add(n, alias) }})
	}
	return cases
}

// add checks Add exactly: one float32 addition has one right answer.
// Operands span magnitudes 2^±20 so that additions round.
func (c *checker) add(n int, alias string) {
	a, b := make([]float32, n), make([]float32, n)
	for i := range n {
		a[i] = c.nonzero(math.Exp2(c.uniform(-20, 20)))
		b[i] = c.nonzero(math.Exp2(c.uniform(-20, 20)))
	}
	want := make([]float32, n)
	c.ref.Add(want, a, b, n)
	aa, bb := clone(a), clone(b)
	var got []float32
	switch alias {
	case "out=a":
		c.ops.Add(aa, aa, bb, n)
		got = aa
	case "out=b":
		c.ops.Add(bb, aa, bb, n)
		got = bb
	default:
		o := newOut(n)
		c.ops.Add(o.s(), aa, bb, n)
		c.checkGuard("out", o)
		got = o.s()
	}
	if alias != "out=a" {
		c.unchanged("a", aa, a)
	}
	if alias != "out=b" {
		c.unchanged("b", bb, b)
	}
	c.near(got, want, make([]float64, n), func(i int) string { return fmt.Sprintf("[%d](%v+%v)", i, a[i], b[i]) })
}

// LogSoftmax.

func logSoftmaxCases() []testCase {
	var cases []testCase
	vocab := []int{1, 2, 7, 16, 17, 100, 1000, 4099, 32000}
	for i, V := range vocab {
		for j := range 2 {
			T := batchSizes[(2*i+j)%len(batchSizes)]
			if T*V > 1<<17 {
				T = 3
			}
			sigma := []float64{1, 10}[(i+j)%2]
			offset := []float64{0, 1000, -1000}[(i+2*j)%3]
			alias := j == 1
			name := fmt.Sprintf("T=%d/V=%d/sigma=%g/offset=%g", T, V, sigma, offset)
			if alias {
				name += "/out=logits"
			}
			cases = append(cases, testCase{op: OpLogSoftmax, name: name, run: func(c *checker) {
				c.logSoftmax(T, V, sigma, offset, alias)
			}})
		}
	}
	return cases
}

// logSoftmax checks rows of normal logits times sigma plus offset (an
// offset of ±1000 overflows float32 exp unless the max is subtracted).
func (c *checker) logSoftmax(T, V int, sigma, offset float64, alias bool) {
	x := make([]float32, T*V)
	for i := range x {
		for x[i] == 0 {
			x[i] = float32(c.rng.NormFloat64()*sigma + offset)
		}
	}
	want := make([]float32, T*V)
	c.ref.LogSoftmax(want, x, T, V)
	tol := make([]float64, T*V)
	for t := range T {
		row := x[t*V : (t+1)*V]
		m := math.Inf(-1)
		for _, v := range row {
			m = max(m, float64(v))
		}
		var sum float64
		for _, v := range row {
			sum += math.Exp(float64(v) - m)
		}
		lse := m + math.Log(sum)
		for i := range row {
			tol[t*V+i] = u * (4*abs32(want[t*V+i]) + 4*math.Abs(lse) + 32 + 4*sqrt(V))
		}
	}
	at := func(i int) string { return fmt.Sprintf("[t=%d,i=%d]", i/V, i%V) }
	call := func(x []float32, T int) []float32 {
		if alias {
			got := clone(x)
			c.ops.LogSoftmax(got, got, T, V)
			return got
		}
		o := newOut(len(x))
		x0 := clone(x)
		c.ops.LogSoftmax(o.s(), x, T, V)
		c.checkGuard("out", o)
		c.unchanged("logits", x, x0)
		return o.s()
	}
	got := call(x, T)
	c.near(got, want, tol, at)
	if T > 1 {
		for t := range T {
			one := call(x[t*V:(t+1)*V], 1)
			c.same(one, got[t*V:(t+1)*V], func(i int) string { return at(t*V + i) })
		}
	}
}
