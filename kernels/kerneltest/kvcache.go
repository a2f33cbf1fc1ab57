package kerneltest

import (
	"bytes"
	"fmt"
	"math"

	"github.com/lowbit-ai/lowbit/kernels"
)

// The paged KV cache: WriteKV must store the same bytes as
// kernels.WriteKV (the conversion is the contract: BF16 and E4M3 round to
// nearest even, E4M3 saturates), and touch nothing else of the pools;
// PagedAttention must be within Attention's tolerance of ref on the
// decoded cache, bit-identical to the implementation's own Attention on a
// float32 cache gathered from the same table, and batch invariant. Block
// tables are shuffled and pools larger than needed, so that an
// implementation that ignores the table or the block size fails.

var kvDTypes = []kernels.KVDType{kernels.KVFloat32, kernels.KVBF16, kernels.KVFP8}

func writeKVCases() []testCase {
	var cases []testCase
	type shape struct{ KVH, Dh, bs, T, start int }
	shapes := []shape{{1, 16, 16, 1, 0}, {2, 64, 16, 17, 5}, {4, 128, 1, 3, 9}, {2, 32, 5, 33, 14}, {8, 128, 16, 1, 300}}
	for _, dt := range kvDTypes {
		for _, s := range shapes {
			name := fmt.Sprintf("%v/KVH=%d/Dh=%d/bs=%d/T=%d/start=%d", dt, s.KVH, s.Dh, s.bs, s.T, s.start)
			cases = append(cases, testCase{op: OpWriteKV, name: name, run: func(c *checker) {
				c.writeKV(dt, s.KVH, s.Dh, s.bs, s.T, s.start)
			}})
		}
	}
	return cases
}

// kvCache returns an empty cache able to hold n positions, its table a
// random permutation of a pool with 3 spare blocks, the pools filled with
// random bytes.
func (c *checker) kvCache(dt kernels.KVDType, KVH, Dh, bs, n int) *kernels.KVCache {
	blocks := (n+bs-1)/bs + 3
	kv := &kernels.KVCache{DType: dt, KVHeads: KVH, HeadDim: Dh, BlockSize: bs, KScale: 1, VScale: 1}
	if dt == kernels.KVFP8 {
		kv.KScale, kv.VScale = float32(c.uniform(0.002, 0.02)), float32(c.uniform(0.002, 0.02))
	}
	size := blocks * bs * KVH * Dh * dt.Size()
	kv.K, kv.V = make([]byte, size), make([]byte, size)
	for i := range kv.K {
		kv.K[i], kv.V[i] = byte(c.rng.Uint32()), byte(c.rng.Uint32())
	}
	if dt == kernels.KVFloat32 {
		// Random bytes may be NaNs that a gather would carry into a wrong
		// answer only where the table is ignored; keep them finite so that
		// the comparison, not the NaN, reports it.
		for i := 0; i < len(kv.K); i += 4 {
			kv.K[i+3], kv.V[i+3] = kv.K[i+3]&0x3F, kv.V[i+3]&0x3F
		}
	}
	for _, b := range c.rng.Perm(blocks)[:(n+bs-1)/bs] {
		kv.Blocks = append(kv.Blocks, int32(b))
	}
	return kv
}

func cloneKV(kv *kernels.KVCache) *kernels.KVCache {
	d := *kv
	d.K, d.V = bytes.Clone(kv.K), bytes.Clone(kv.V)
	return &d
}

func (c *checker) writeKV(dt kernels.KVDType, KVH, Dh, bs, T, start int) {
	kv := c.kvCache(dt, KVH, Dh, bs, start+T)
	// Magnitudes up to a few thousand times the FP8 scale: saturation, and
	// subnormal E4M3 codes near zero.
	k, v := c.fill(T*KVH*Dh, 2), c.fill(T*KVH*Dh, 2)
	for i := range k {
		if i%7 == 0 {
			k[i] *= 400
			v[i] /= 400
		}
	}
	want := cloneKV(kv)
	kernels.WriteKV(want, k, v, T, start)
	got := cloneKV(kv)
	k0, v0 := clone(k), clone(v)
	c.ops.WriteKV(got, k, v, T, start)
	c.unchanged("k", k, k0)
	c.unchanged("v", v, v0)
	for _, p := range []struct {
		name      string
		got, want []byte
	}{{"K", got.K, want.K}, {"V", got.V, want.V}} {
		if i := firstDiff(p.got, p.want); i >= 0 {
			c.errorf(": %s pool byte %d (element %d) = %#x, want %#x (kernels.WriteKV)", p.name, i, i/dt.Size(), p.got[i], p.want[i])
		}
	}
}

func firstDiff(a, b []byte) int {
	for i := range a {
		if a[i] != b[i] {
			return i
		}
	}
	return -1
}

func pagedAttentionCases() []testCase {
	var cases []testCase
	type shape struct{ T, start, H, KVH, Dh, bs int }
	shapes := []shape{
		{1, 0, 1, 1, 16, 16}, {1, 40, 4, 2, 64, 16}, {7, 9, 8, 2, 128, 16}, {17, 0, 4, 4, 64, 5},
		{1, 1000, 16, 8, 128, 16}, {33, 31, 2, 1, 32, 1}, {5, 300, 8, 1, 128, 32},
		{140, 10, 8, 2, 64, 16},
	}
	for _, dt := range kvDTypes {
		for _, s := range shapes {
			name := fmt.Sprintf("%v/T=%d/start=%d/H=%d/KVH=%d/Dh=%d/bs=%d", dt, s.T, s.start, s.H, s.KVH, s.Dh, s.bs)
			cases = append(cases, testCase{op: OpPagedAttention, name: name, run: func(c *checker) {
				c.pagedAttention(dt, s.T, s.start, s.H, s.KVH, s.Dh, s.bs)
			}})
		}
	}
	return cases
}

func (c *checker) pagedAttention(dt kernels.KVDType, T, start, H, KVH, Dh, bs int) {
	L := start + T
	kv := c.kvCache(dt, KVH, Dh, bs, L)
	kernels.WriteKV(kv, c.fill(L*KVH*Dh, 1), c.fill(L*KVH*Dh, 1), L, 0)
	scale := float32(1 / math.Sqrt(float64(Dh)))
	q := c.fill(T*H*Dh, 1)
	want := make([]float32, T*H*Dh)
	c.ref.PagedAttention(want, q, kv, T, start, H, scale)
	k, v := kernels.Gather(kv, L)
	tol := attentionTol(q, k, v, T, start, H, KVH, Dh, scale)

	pools := cloneKV(kv)
	q0 := clone(q)
	o := newOut(T * H * Dh)
	c.ops.PagedAttention(o.s(), q, kv, T, start, H, scale)
	c.checkGuard("out", o)
	c.unchanged("q", q, q0)
	if !bytes.Equal(kv.K, pools.K) || !bytes.Equal(kv.V, pools.V) {
		c.errorf(": the KV pools were modified")
	}
	at := func(i int) string { return fmt.Sprintf("[t=%d,h=%d,d=%d]", i/(H*Dh), i%(H*Dh)/Dh, i%Dh) }
	c.near(o.s(), want, tol, at)

	if dt == kernels.KVFloat32 {
		flat := newOut(T * H * Dh)
		c.ops.Attention(flat.s(), q, k, v, T, start, H, KVH, Dh, scale)
		for i, x := range flat.s() {
			if math.Float32bits(x) != math.Float32bits(o.s()[i]) {
				c.errorf("%s = %v paged, %v by Attention on the gathered cache: must be bit-identical", at(i), o.s()[i], x)
				break
			}
		}
	}
	if T > 1 {
		n := H * Dh
		for t := range T {
			one := newOut(n)
			c.ops.PagedAttention(one.s(), q[t*n:(t+1)*n], kv, 1, start+t, H, scale)
			c.same(one.s(), o.s()[t*n:(t+1)*n], func(i int) string { return at(t*n + i) })
		}
	}
}
