//go:build cgo

package cpu

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"testing"
	"unsafe"

	"github.com/lowbit-ai/lowbit/kernels"
	"github.com/lowbit-ai/lowbit/kernels/kerneltest"
	"github.com/lowbit-ai/lowbit/kernels/ref"
)

// The benchmarks use Qwen3-0.6B's linear shapes, [Out, In]: down_proj
// 1024x3072, gate/up_proj 3072x1024 and the tied lm_head 151936x1024. GEMV
// (T = 1, decode) reports its weight streaming rate as MB/s and as
// %roofline, the percentage of the memory bandwidth that MemoryBandwidth
// measures over 1 GiB with the same threads in the same run; GEMM (T = 64,
// prefill) reports GFLOP/s. Each call uses the next of enough copies of the
// weight to fill benchCycleBytes, so that small weights come from memory,
// as in a model's decode step, rather than from the last-level cache.
//
//	go test -run '^$' -bench 'GEMV|GEMM|MemoryBandwidth' ./kernels/cpu
//
// BenchmarkGEMVHuge streams the copies from huge pages, BenchmarkGEMVHot
// one weight from the caches.

var benchShapes = []struct{ out, in int }{{1024, 3072}, {3072, 1024}, {151936, 1024}}

// benchFormats pairs each weight format with the activation quantization
// its checkpoints use, plus NVFP4 weight-only (W4A16).
var benchFormats = []struct {
	f kernels.WeightFormat
	a kernels.ActQuant
}{
	{kernels.WeightBF16, kernels.ActNone},
	{kernels.WeightFP8Channel, kernels.ActFP8Token},
	{kernels.WeightFP8Tensor, kernels.ActFP8Tensor},
	{kernels.WeightFP8Block, kernels.ActFP8Group128},
	{kernels.WeightNVFP4, kernels.ActNVFP4},
	{kernels.WeightNVFP4, kernels.ActNone},
}

const benchCycleBytes = 1 << 30

var roofline struct {
	once sync.Once
	bw   float64
}

// memoryRoofline measures the bandwidth once per run, with ops's threads.
func memoryRoofline(b *testing.B, ops *Ops) float64 {
	roofline.once.Do(func() {
		roofline.bw = ops.MemoryBandwidth(1 << 30)
		fmt.Printf("memory roofline: %.2f GB/s (%s, %d threads, 1 GiB streaming read)\n",
			roofline.bw/1e9, ops.Name(), ops.Threads())
	})
	return roofline.bw
}

func BenchmarkMemoryBandwidth(b *testing.B) {
	ops := newOps(b, "", 0)
	var bw float64
	for b.Loop() {
		bw = ops.MemoryBandwidth(1 << 30)
	}
	b.ReportMetric(bw/1e9, "GB/s")
}

// benchWeight returns a weight of the given shape whose data repeats a
// block of valid random values: generating 150M random weights one by one
// would take longer than the benchmark.
func benchWeight(f kernels.WeightFormat, act kernels.ActQuant, out, in int) *kernels.Weight {
	rng := rand.New(rand.NewPCG(uint64(f), uint64(act)))
	rows := min(out, 64)
	w := randWeight(rng, f, act, 128, in) // 128 rows: a whole FP8 block row
	full := *w
	full.Out = out
	full.Data = make([]byte, len(w.Data)/128*out)
	for i := 0; i < len(full.Data); i += copy(full.Data[i:], w.Data[:len(w.Data)/128*rows]) {
	}
	switch f {
	case kernels.WeightFP8Channel:
		full.Scales = make([]float32, out)
	case kernels.WeightFP8Block:
		full.Scales = make([]float32, (out+127)/128*((in+127)/128))
	case kernels.WeightNVFP4:
		full.Scales = make([]float32, out*in/16)
	}
	if f != kernels.WeightBF16 && f != kernels.WeightFP8Tensor {
		for i := 0; i < len(full.Scales); i += copy(full.Scales[i:], w.Scales) {
		}
	}
	if err := full.Check(); err != nil {
		panic(err)
	}
	return &full
}

func weightBytes(w *kernels.Weight) int64 { return int64(len(w.Data) + 4*len(w.Scales)) }

func BenchmarkGEMV(b *testing.B) { benchMatMul(b, 1, false) }
func BenchmarkGEMM(b *testing.B) { benchMatMul(b, 64, false) }

// BenchmarkGEMVHuge is BenchmarkGEMV with the copies in huge-page memory,
// where a model loaded with runtime.LoadOptions.NoMmap keeps its weights:
// the Go heap's 4 KiB pages hold the GEMVs below what the kernels stream
// from huge pages.
func BenchmarkGEMVHuge(b *testing.B) { benchMatMul(b, 1, true) }

func benchMatMul(b *testing.B, T int, huge bool) {
	ops := newOps(b, "", 0)
	bw := memoryRoofline(b, ops)
	rng := rand.New(rand.NewPCG(23, 24))
	for _, fa := range benchFormats {
		for _, sh := range benchShapes {
			w := benchWeight(fa.f, fa.a, sh.out, sh.in)
			ws := []*kernels.Weight{w}
			var arena []byte
			free := func() {}
			if huge {
				arena, free = hugeBytes(b, benchCycleBytes+2*int(weightBytes(w))+128)
			}
			for int64(len(ws))*weightBytes(w) < benchCycleBytes {
				c := *w
				if huge {
					c.Data, arena = arena[:len(w.Data):len(w.Data)], arena[(len(w.Data)+63)&^63:]
					copy(c.Data, w.Data)
					if n := len(w.Scales); n > 0 {
						c.Scales, arena = unsafe.Slice((*float32)(unsafe.Pointer(&arena[0])), n), arena[(4*n+63)&^63:]
						copy(c.Scales, w.Scales)
					}
				} else {
					c.Data, c.Scales = slices.Clone(w.Data), slices.Clone(w.Scales)
				}
				ws = append(ws, &c)
			}
			x := randn(rng, T*sh.in, 1)
			y := make([]float32, T*sh.out)
			name := fmt.Sprintf("%v/%v/%dx%d", fa.f, fa.a, sh.out, sh.in)
			runtime.GC()
			b.Run(ops.Name()+"/"+name, func(b *testing.B) {
				b.SetBytes(weightBytes(w))
				i := 0
				for b.Loop() {
					ops.MatMul(y, x, T, ws[i%len(ws)])
					i++
				}
				s := b.Elapsed().Seconds()
				if T == 1 {
					b.ReportMetric(100*float64(weightBytes(w))*float64(b.N)/s/bw, "%roofline")
				}
				b.ReportMetric(2*float64(T*sh.out*sh.in)*float64(b.N)/s/1e9, "GFLOP/s")
			})
			free()
			// The Go reference, where it takes well under a second a call.
			if !huge && T*sh.out*sh.in <= 1<<22 {
				b.Run("ref/"+name, func(b *testing.B) {
					b.SetBytes(weightBytes(w))
					for b.Loop() {
						ref.New().MatMul(y, x, T, w)
					}
				})
			}
		}
	}
}

// BenchmarkGEMVHot multiplies one 1024x1024 weight of each format over and
// over, on one thread and on all: it stays in the caches, so this is how
// fast the kernels decode and multiply when memory does not bound them,
// in Gweights/s (decode streams a weight from memory at its bytes per
// weight times this at most).
func BenchmarkGEMVHot(b *testing.B) {
	for _, threads := range []int{1, 0} {
		ops := newOps(b, "", threads)
		rng := rand.New(rand.NewPCG(25, 26))
		for _, fa := range benchFormats {
			w := benchWeight(fa.f, fa.a, 1024, 1024)
			x := randn(rng, w.In, 1)
			y := make([]float32, w.Out)
			b.Run(fmt.Sprintf("%s/threads=%d/%v/%v", ops.Name(), ops.Threads(), fa.f, fa.a), func(b *testing.B) {
				for b.Loop() {
					ops.MatMul(y, x, 1, w)
				}
				b.ReportMetric(float64(w.Out*w.In)*float64(b.N)/b.Elapsed().Seconds()/1e9, "Gweights/s")
			})
		}
	}
}

// BenchmarkSuite runs the shared benchmarks of kernels/kerneltest (8B-class
// shapes) on the best code path.
func BenchmarkSuite(b *testing.B) { kerneltest.Bench(b, newOps(b, "", 0)) }

// BenchmarkAttentionDecode is decode attention at the shape of
// BenchmarkDecode's model (runtime): Qwen3-0.6B's 16 query and 8 KV heads
// of 128 dims, one token at position 271 (a 256-token prompt and 16
// steps), over paged caches of 16-position blocks in each KV dtype. Each
// call reads the next of enough caches to fill 1 GiB, so the cache comes
// from memory, as it does in a step behind the weights ("memory": Go heap,
// 4 KiB pages, as runtime's KV pools; "huge": copies in huge-page memory),
// or the same one again from the caches ("hot"); MB/s
// counts the K and V bytes read.
func BenchmarkAttentionDecode(b *testing.B) {
	const H, KVH, Dh, L, bs = 16, 8, 128, 272, 16
	ops := newOps(b, "", 0)
	rng := rand.New(rand.NewPCG(27, 28))
	q := randn(rng, H*Dh, 1)
	out := make([]float32, H*Dh)
	for _, dt := range []kernels.KVDType{kernels.KVFloat32, kernels.KVBF16, kernels.KVFP8} {
		bytes := 2 * L * KVH * Dh * dt.Size()
		kv0 := &kernels.KVCache{DType: dt, KVHeads: KVH, HeadDim: Dh, BlockSize: bs, KScale: 0.01, VScale: 0.01,
			K: make([]byte, bytes/2), V: make([]byte, bytes/2)}
		for i := range L / bs {
			kv0.Blocks = append(kv0.Blocks, int32(i))
		}
		kernels.WriteKV(kv0, randn(rng, L*KVH*Dh, 1), randn(rng, L*KVH*Dh, 1), L, 0)
		caches := []*kernels.KVCache{kv0}
		for len(caches)*bytes < benchCycleBytes {
			kv := *kv0
			kv.K, kv.V = slices.Clone(kv0.K), slices.Clone(kv0.V)
			caches = append(caches, &kv)
		}
		// The same caches in huge-page memory.
		arena, free := hugeBytes(b, len(caches)*bytes)
		huge := make([]*kernels.KVCache, len(caches))
		for i, kv := range caches {
			c := *kv
			c.K, arena = arena[:bytes/2:bytes/2], arena[bytes/2:]
			c.V, arena = arena[:bytes/2:bytes/2], arena[bytes/2:]
			copy(c.K, kv.K)
			copy(c.V, kv.V)
			huge[i] = &c
		}
		runtime.GC()
		for _, mode := range []string{"memory", "huge", "hot"} {
			cs, n := caches, len(caches)
			switch mode {
			case "huge":
				cs = huge
			case "hot":
				n = 1
			}
			b.Run(fmt.Sprintf("%s/%v/L=%d/%s", ops.Name(), dt, L, mode), func(b *testing.B) {
				b.SetBytes(int64(bytes))
				i := 0
				for b.Loop() {
					ops.PagedAttention(out, q, cs[i%n], 1, L-1, H, 0.088)
					i++
				}
			})
		}
		free()
	}
}
