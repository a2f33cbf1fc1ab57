//go:build cgo

package cuda

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"testing"
	"time"
	"unsafe"

	"github.com/lowbit-ai/lowbit/kernels"
)

// BenchmarkKernels times single kernels of the Qwen3-8B shape on the
// device, each replayed from a graph of 20 launches (so launch overhead is
// out), beside the copy roofline measured in the same run: the BF16 GEMV
// of the q/o (4096×4096) and gate/up (12288×4096) projections and the
// lm_head (151936×4096), decode attention over 1,024 and 8,192 positions
// (32 heads, 8 KV heads, head_dim 128, BF16 cache); and beside PyTorch in
// the same call: prefill GEMMs and causal prefill attention.
//
//	kernels_cuda.test -test.run XXX -test.bench Kernels
func BenchmarkKernels(b *testing.B) {
	d, err := Open(Options{CacheDir: b.TempDir()})
	if err != nil {
		b.Skip(err)
	}
	defer d.Close()
	bw, err := d.CopyBandwidth(2<<30, 10)
	if err != nil {
		b.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	randBF16 := func(n int) []byte {
		out := make([]byte, 2*n)
		for i := range n {
			out[2*i+1] = byte(0x3c + rng.IntN(2)) // about ±0.01 .. ±0.03, some sign bits
			out[2*i] = byte(rng.Uint32())
		}
		return out
	}
	const reps = 20
	timeGraph := func(b *testing.B, f func(k *K) error, bytes float64) float64 {
		if err := d.Run(f); err != nil { // eager once: sizes buffers, checks errors
			b.Fatal(err)
		}
		g, err := d.Capture(func(k *K) error {
			for range reps {
				if err := f(k); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
		defer d.Destroy(g)
		b.ResetTimer()
		start := time.Now()
		for range b.N {
			if err := d.Run(func(k *K) error { return k.Launch(g) }); err != nil {
				b.Fatal(err)
			}
		}
		per := time.Since(start).Seconds() / float64(b.N*reps)
		b.ReportMetric(per*1e6, "us/launch")
		if bytes > 0 {
			b.ReportMetric(bytes/per/1e9, "GB/s")
			b.ReportMetric(bytes/per/bw, "of-copy-bw")
		}
		return per
	}
	// The GEMV variants (the same bits, checked here against the default's
	// output): lb_mma_gemv loading only live lanes' activations or all of
	// them, and the single-token kernels with 2 or 3 weight slots a warp.
	defaultLive, defaultDecode := gemvLiveOnly, gemvDecode
	defer func() { gemvLiveOnly, gemvDecode = defaultLive, defaultDecode }()
	type gemvVariant struct {
		name   string
		live   int
		decode string
		slots  int
	}
	gemvVariants := []gemvVariant{
		{"lb_mma_gemv", 1, "", 0}, {"lb_mma_gemv-all-lanes", 0, "", 0},
		{"lb_mma_gemv1_s2", 1, "lb_mma_gemv1_s2", 2}, {"lb_mma_gemv1_s3", 1, "lb_mma_gemv1_s3", 3},
	}
	for _, sh := range []struct{ out, in int }{{4096, 4096}, {12288, 4096}, {4096, 12288}, {151936, 4096}} {
		w := &kernels.Weight{Format: kernels.WeightBF16, Out: sh.out, In: sh.in, Data: randBF16(sh.out * sh.in), Act: kernels.ActNone}
		gemvLiveOnly, gemvDecode = defaultLive, defaultDecode
		dw, err := d.UploadWeight(w)
		if err != nil {
			b.Fatal(err)
		}
		x, _ := d.Alloc(4 * sh.in)
		y, _ := d.Alloc(4 * sh.out)
		xs := make([]float32, sh.in)
		for i := range xs {
			xs[i] = float32(rng.NormFloat64())
		}
		d.Upload(x, unsafe.Slice((*byte)(unsafe.Pointer(&xs[0])), 4*len(xs)))
		var want []byte
		for _, v := range gemvVariants {
			gemvLiveOnly, gemvDecode.name, gemvDecode.slots = v.live, v.decode, v.slots
			b.Run(fmt.Sprintf("gemv-bf16/%s/%dx%d", v.name, sh.out, sh.in), func(b *testing.B) {
				if err := d.Run(func(k *K) error {
					if err := k.Poison(y); err != nil {
						return err
					}
					return k.MatMul(y, x, 1, dw)
				}); err != nil {
					b.Fatal(err)
				}
				got := make([]byte, 4*sh.out)
				if err := d.Download(got, y); err != nil {
					b.Fatal(err)
				}
				if want == nil {
					want = got
				} else if !bytes.Equal(got, want) {
					b.Fatalf("%s's output differs from %s's", v.name, gemvVariants[0].name)
				}
				timeGraph(b, func(k *K) error { return k.MatMul(y, x, 1, dw) }, float64(len(w.Data)))
			})
		}
		d.Free(dw.Data)
		d.Free(x)
		d.Free(y)
	}
	gemvLiveOnly, gemvDecode = defaultLive, defaultDecode
	// Prefill GEMMs on the tensor cores (T tokens at once), beside PyTorch's
	// matmul on the same shapes in the same device call when
	// LOWBIT_TORCH_GEMM names scripts/torch_gemm.py's output.
	torch := readTorchGEMM(b)
	defaultGEMM := gemmKernel
	defer func() { gemmKernel = defaultGEMM }()
	for _, sh := range []struct{ out, in int }{{4096, 4096}, {12288, 4096}, {4096, 12288}} {
		const T = 1024
		for _, variant := range gemmVariants {
			gemmKernel = variant
			b.Run(fmt.Sprintf("gemm-bf16/%s/T=%d/%dx%d", variant.name, T, sh.out, sh.in), func(b *testing.B) {
				w := &kernels.Weight{Format: kernels.WeightBF16, Out: sh.out, In: sh.in, Data: randBF16(sh.out * sh.in), Act: kernels.ActNone}
				dw, err := d.UploadWeight(w)
				if err != nil {
					b.Fatal(err)
				}
				defer d.Free(dw.Data)
				x, _ := d.Alloc(4 * T * sh.in)
				y, _ := d.Alloc(4 * T * sh.out)
				defer d.Free(x)
				defer d.Free(y)
				xs := make([]float32, T*sh.in)
				for i := range xs {
					xs[i] = float32(rng.NormFloat64())
				}
				d.Upload(x, unsafe.Slice((*byte)(unsafe.Pointer(&xs[0])), 4*len(xs)))
				per := timeGraph(b, func(k *K) error { return k.MatMul(y, x, T, dw) }, 0)
				tf := 2 * float64(T*sh.out*sh.in) / per / 1e12
				b.ReportMetric(tf, "TFLOP/s")
				if t, ok := torch.Shapes[fmt.Sprintf("%dx%d", sh.out, sh.in)]; ok && torch.T == T {
					b.ReportMetric(tf/t.BF16, "of-torch-bf16")
					b.ReportMetric(tf/t.FP32, "of-torch-fp32")
				}
			})
		}
		gemmKernel = defaultGEMM
	}
	// Attention (32 query heads, 8 KV heads, head_dim 128, BF16 paged
	// cache): a decode step over ctx positions (bytes: the K and V read),
	// and a prefill of T tokens over their own causal context (FLOPs:
	// 4·H·Dh a (query, key) pair), beside PyTorch's SDPA on the same shape.
	const H, KVH, Dh, bs = 32, 8, 128, 16
	attention := func(b *testing.B, T, ctx int) float64 {
		p := &KVPool{DType: kernels.KVBF16, KVHeads: KVH, HeadDim: Dh, BlockSize: bs, KScale: 1, VScale: 1}
		pool := ctx * KVH * Dh * 2
		p.K, _ = d.Alloc(pool)
		p.V, _ = d.Alloc(pool)
		defer d.Free(p.K)
		defer d.Free(p.V)
		d.Upload(p.K, randBF16(pool/2))
		d.Upload(p.V, randBF16(pool/2))
		tables := make([]int32, ctx/bs)
		for i := range tables {
			tables[i] = int32(i)
		}
		seq, pos := make([]int32, T), make([]int32, T)
		for t := range pos {
			pos[t] = int32(ctx - T + t)
		}
		bt := &Batch{Stride: len(tables), Plan: PlanAttention(seq, pos, H, p, ctx)}
		if err := d.ReserveAttention(bt.Plan.Parts, H, Dh); err != nil {
			b.Fatal(err)
		}
		for _, a := range []struct {
			dst *Buf
			src []int32
		}{{&bt.Tables, tables}, {&bt.Seq, seq}, {&bt.Pos, pos}, {&bt.PartOff, bt.Plan.PartOff}, {&bt.Work, bt.Plan.Work}} {
			*a.dst, _ = d.Alloc(4 * len(a.src))
			defer d.Free(*a.dst)
			d.Upload(*a.dst, unsafe.Slice((*byte)(unsafe.Pointer(&a.src[0])), 4*len(a.src)))
		}
		q, _ := d.Alloc(4 * T * H * Dh)
		qs := make([]float32, T*H*Dh)
		for i := range qs {
			qs[i] = float32(rng.NormFloat64())
		}
		d.Upload(q, unsafe.Slice((*byte)(unsafe.Pointer(&qs[0])), 4*len(qs)))
		out, _ := d.Alloc(4 * T * H * Dh)
		defer d.Free(q)
		defer d.Free(out)
		bytes := 0.0
		if T == 1 {
			bytes = float64(2 * pool)
		}
		return timeGraph(b, func(k *K) error { return k.AttentionBatch(out, q, p, bt, T, H, 0.088) }, bytes)
	}
	for _, ctx := range []int{1024, 8192} {
		b.Run(fmt.Sprintf("attention-decode/ctx=%d", ctx), func(b *testing.B) { attention(b, 1, ctx) })
	}
	for _, T := range []int{1024, 8192} {
		b.Run(fmt.Sprintf("attention-prefill/T=%d", T), func(b *testing.B) {
			per := attention(b, T, T)
			tf := 4 * float64(H*Dh) * float64(T) * float64(T+1) / 2 / per / 1e12
			b.ReportMetric(tf, "TFLOP/s")
			if t, ok := torch.SDPA[fmt.Sprint(T)]; ok {
				b.ReportMetric(tf/t.BF16, "of-torch-sdpa-bf16")
				b.ReportMetric(tf/t.FP32, "of-torch-sdpa-fp32")
			}
		})
	}
}

// torchGEMM is scripts/torch_gemm.py's output.
type torchGEMM struct {
	T      int                    `json:"T"`
	Shapes map[string]torchTFLOPs `json:"shapes"`
	SDPA   map[string]torchTFLOPs `json:"sdpa"` // causal prefill of T tokens, keyed by T
}

type torchTFLOPs struct {
	BF16 float64 `json:"bf16_tflops"`
	FP32 float64 `json:"fp32_tflops"`
}

func readTorchGEMM(b *testing.B) torchGEMM {
	var t torchGEMM
	path := os.Getenv("LOWBIT_TORCH_GEMM")
	if path == "" {
		return t
	}
	data, err := os.ReadFile(path)
	if err == nil {
		err = json.Unmarshal(data, &t)
	}
	if err != nil {
		b.Logf("LOWBIT_TORCH_GEMM: %v (no torch ratios)", err)
	}
	return t
}
