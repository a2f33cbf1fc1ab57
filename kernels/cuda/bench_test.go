//go:build cgo

package cuda

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/lowbit-ai/lowbit/kernels"
)

// BenchmarkKernels times single kernels of the Qwen3-8B shape on the
// device, each replayed from a graph of 20 launches (so launch overhead is
// out), beside the copy roofline measured in the same run: the BF16 GEMV
// of the q/o (4096×4096), gate/up (12288×4096) and down (4096×12288)
// projections and the lm_head (151936×4096), the GEMV of 8, 16 and 32
// tokens on the projections (lb_mma_gemv against lb_mma_gemv_wide and
// lb_mma_gemv_bulk), decode attention over 1,024 and 8,192 positions
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
	// What NVRTC made of the kernels timed here: registers and spills.
	for _, name := range []string{"lb_mma_gemv", "lb_mma_gemv_bulk", "lb_mma_gemv_wide", "lb_mma_gemm", "lb_flash_d128_k1_whole_q1",
		"lb_flash_d128_k1_split", "lb_flash_prefill_d128_q1", "lb_flash_decode_d128", "lb_flash_decode_d128_q1", "lb_flash_decode_d128_q1_fp8", "lb_flash_prefill_d128_q1_fp8", "lb_flash_merge"} {
		if ki, err := d.KernelInfo(name); err == nil {
			b.Logf("%-28s %3d registers, %4d bytes local (spills), %5d bytes static shared", name, ki.Registers, ki.LocalBytes, ki.StaticShared)
		}
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
	// randE4M3: n codes of about ±0.03 .. ±0.12 times the scale, NaNs not
	// among them.
	randE4M3 := func(n int) []byte {
		out := make([]byte, n)
		for i := range out {
			out[i] = byte(0x10+rng.IntN(16)) | byte(rng.IntN(2))<<7
		}
		return out
	}
	randF32 := func(n int) []float32 {
		out := make([]float32, n)
		for i := range out {
			out[i] = float32(rng.NormFloat64())
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
	// The decode GEMV (one token) on the Qwen3-8B shapes and its LM head,
	// and the layer's launches that share an input (q, k and v; gate and
	// up), by the default kernel and by each that can run it (the same
	// bits): lb_mma_gemv, and lb_mma_gemv_bulk in blocks of 4 and 8 warps.
	for _, sh := range []struct {
		outs []int
		in   int
	}{{[]int{4096}, 4096}, {[]int{12288}, 4096}, {[]int{4096}, 12288}, {[]int{151936}, 4096},
		{[]int{4096, 1024, 1024}, 4096}, {[]int{12288, 12288}, 4096}} {
		var dws []*Weight
		var ys []Buf
		bytes, rows := 0, 0
		for _, out := range sh.outs {
			w := &kernels.Weight{Format: kernels.WeightBF16, Out: out, In: sh.in, Data: randBF16(out * sh.in), Act: kernels.ActNone}
			dw, err := d.UploadWeight(w)
			if err != nil {
				b.Fatal(err)
			}
			y, _ := d.Alloc(4 * out)
			dws, ys = append(dws, dw), append(ys, y)
			bytes, rows = bytes+len(w.Data), rows+out
		}
		x, _ := d.Alloc(4 * sh.in)
		d.Upload(x, asBytes(randF32(sh.in), sh.in))
		shape := fmt.Sprintf("%dx%d", rows, sh.in)
		if len(sh.outs) > 1 {
			shape = fmt.Sprintf("%vx%d", sh.outs, sh.in)
		}
		for _, v := range []struct {
			name          string
			groups, warps int
		}{
			{"", mmaBulkGroups, mmaBulkWarps},
			{"lb_mma_gemv/", 0, 0},
			{"lb_mma_gemv_bulk/warps=4/", 1, 4},
			{"lb_mma_gemv_bulk/warps=8/", 1, 8},
		} {
			b.Run(fmt.Sprintf("gemv-bf16/%s%s", v.name, shape), func(b *testing.B) {
				defer func(g, w int) { mmaBulkGroups, mmaBulkWarps = g, w }(mmaBulkGroups, mmaBulkWarps)
				mmaBulkGroups, mmaBulkWarps = v.groups, v.warps
				timeGraph(b, func(k *K) error { return k.MatMulShared(x, 1, ys, dws) }, float64(bytes))
			})
		}
		// BF16 activations (one term: lb_mma_gemv_bulk1, its split included).
		b.Run(fmt.Sprintf("gemv-bf16/lb_mma_gemv_bulk1/%s", shape), func(b *testing.B) {
			timeGraph(b, func(k *K) error { return k.MatMulSharedBF16(x, 1, ys, dws) }, float64(bytes))
		})
		for i := range dws {
			d.Free(dws[i].Data)
			d.Free(ys[i])
		}
		d.Free(x)
	}
	// The decode GEMV of a batch (T tokens, one step of T sequences) on the
	// same shapes: lb_mma_gemv forced beside lb_mma_gemv_wide (the default
	// from mmaWideFrom tokens on sm_90) and lb_mma_gemv_bulk (the default
	// up to mmaBulkGroups groups of 8), the same bits; bytes = the weight's.
	for _, sh := range []struct{ out, in int }{{4096, 4096}, {12288, 4096}, {4096, 12288}} {
		w := &kernels.Weight{Format: kernels.WeightBF16, Out: sh.out, In: sh.in, Data: randBF16(sh.out * sh.in), Act: kernels.ActNone}
		dw, err := d.UploadWeight(w)
		if err != nil {
			b.Fatal(err)
		}
		const maxT = 32
		x, _ := d.Alloc(4 * maxT * sh.in)
		y, _ := d.Alloc(4 * maxT * sh.out)
		d.Upload(x, asBytes(randF32(maxT*sh.in), maxT*sh.in))
		for _, T := range []int{8, 16, 32} {
			for _, v := range []struct {
				name   string
				from   int
				groups int
			}{{"lb_mma_gemv", mmaGemvTokens + 1, 0}, {"lb_mma_gemv_wide", 1, 0}, {"lb_mma_gemv_bulk", mmaGemvTokens + 1, mmaGemvTokens / 8}} {
				b.Run(fmt.Sprintf("gemv-bf16/%s/T=%d/%dx%d", v.name, T, sh.out, sh.in), func(b *testing.B) {
					defer func(f, g int) { mmaWideFrom, mmaBulkGroups = f, g }(mmaWideFrom, mmaBulkGroups)
					mmaWideFrom, mmaBulkGroups = v.from, v.groups
					timeGraph(b, func(k *K) error { return k.MatMul(y, x, T, dw) }, float64(len(w.Data)))
				})
			}
			// BF16 activations: lb_mma_gemv_bulk1, and lb_mma_gemv_tiles1
			// on 2 and 4 row tiles a block (the split included).
			for _, v := range []struct {
				name     string
				from, mt int
			}{{"lb_mma_gemv_bulk1", mmaGemvTokens + 1, 2}, {"lb_mma_gemv_tiles1_m2", 1, 2}, {"lb_mma_gemv_tiles1_m4", 1, 4}} {
				b.Run(fmt.Sprintf("gemv-bf16/%s/T=%d/%dx%d", v.name, T, sh.out, sh.in), func(b *testing.B) {
					defer func(f, s, m int) { mmaTiles1From, mmaTiles1Spans, mmaTiles1MT = f, s, m }(mmaTiles1From, mmaTiles1Spans, mmaTiles1MT)
					mmaTiles1From, mmaTiles1Spans, mmaTiles1MT = v.from, 0, v.mt
					timeGraph(b, func(k *K) error {
						return k.MatMulSharedBF16(x, T, []Buf{y}, []*Weight{dw})
					}, float64(len(w.Data)))
				})
			}
		}
		d.Free(dw.Data)
		d.Free(x)
		d.Free(y)
	}
	// Prefill GEMMs (T tokens at once): lb_mma_gemm (float32 activations as
	// three BF16 terms) and cuBLASLt on BF16 activations (MatMulLtShared,
	// the conversion included), beside PyTorch's matmul on the same shapes
	// in the same device call when LOWBIT_TORCH_GEMM names
	// scripts/torch_gemm.py's output.
	torch := readTorchGEMM(b)
	for _, sh := range []struct{ out, in int }{{4096, 4096}, {12288, 4096}, {4096, 12288}} {
		const T = 1024
		w := &kernels.Weight{Format: kernels.WeightBF16, Out: sh.out, In: sh.in, Data: randBF16(sh.out * sh.in), Act: kernels.ActNone}
		dw, err := d.UploadWeight(w)
		if err != nil {
			b.Fatal(err)
		}
		if dw.Rows, err = d.Alloc(len(w.Data)); err != nil {
			b.Fatal(err)
		}
		d.Upload(dw.Rows, w.Data)
		x, _ := d.Alloc(4 * T * sh.in)
		y, _ := d.Alloc(4 * T * sh.out)
		d.Upload(x, asBytes(randF32(T*sh.in), T*sh.in))
		for _, v := range []struct {
			name string
			run  func(k *K) error
		}{
			{"lb_mma_gemm", func(k *K) error { return k.MatMul(y, x, T, dw) }},
			{"cublaslt-bf16-act", func(k *K) error { return k.MatMulLtShared(x, T, []Buf{y}, []*Weight{dw}) }},
		} {
			b.Run(fmt.Sprintf("gemm-bf16/%s/T=%d/%dx%d", v.name, T, sh.out, sh.in), func(b *testing.B) {
				per := timeGraph(b, v.run, 0)
				tf := 2 * float64(T*sh.out*sh.in) / per / 1e12
				b.ReportMetric(tf, "TFLOP/s")
				if t, ok := torch.Shapes[fmt.Sprintf("%dx%d", sh.out, sh.in)]; ok && torch.T == T {
					b.ReportMetric(tf/t.BF16, "of-torch-bf16")
					b.ReportMetric(tf/t.FP32, "of-torch-fp32")
				}
			})
		}
		for _, buf := range []Buf{dw.Data, dw.Rows, x, y} {
			d.Free(buf)
		}
	}
	// Attention (32 query heads, 8 KV heads, head_dim 128, BF16 paged
	// cache, or FP8 for the -fp8 cases): a decode step of seqs sequences over ctx positions each
	// (bytes: the K and V read), and a prefill of T tokens over their own
	// causal context (FLOPs: 4·H·Dh a (query, key) pair), beside PyTorch's
	// SDPA on the same shape.
	const H, KVH, Dh, bs = 32, 8, 128, 16
	attention := func(b *testing.B, dt kernels.KVDType, seqs, T, ctx, bf16 int) float64 {
		p := &KVPool{DType: dt, KVHeads: KVH, HeadDim: Dh, BlockSize: bs, KScale: 1, VScale: 1}
		pool := seqs * ctx * KVH * Dh * 2
		if dt == kernels.KVFP8 {
			pool /= 2
			p.KScale, p.VScale = 0.37, 1.7
		}
		p.K, _ = d.Alloc(pool)
		p.V, _ = d.Alloc(pool)
		defer d.Free(p.K)
		defer d.Free(p.V)
		for _, dst := range []Buf{p.K, p.V} {
			if dt == kernels.KVFP8 {
				d.Upload(dst, randE4M3(pool))
			} else {
				d.Upload(dst, randBF16(pool/2))
			}
		}
		tables := make([]int32, seqs*ctx/bs)
		for i := range tables {
			tables[i] = int32(i)
		}
		var seq, pos []int32
		for s := range seqs {
			for t := range T {
				seq, pos = append(seq, int32(s)), append(pos, int32(ctx-T+t))
			}
		}
		bt := &Batch{Stride: ctx / bs, Plan: PlanAttentionBF16(seq, pos, H, p, ctx, bf16)}
		if err := d.ReserveAttention(&bt.Plan, H, p.KVHeads, Dh); err != nil {
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
		rows := seqs * T
		q, _ := d.Alloc(4 * rows * H * Dh)
		qs := make([]float32, rows*H*Dh)
		for i := range qs {
			qs[i] = float32(rng.NormFloat64())
		}
		d.Upload(q, unsafe.Slice((*byte)(unsafe.Pointer(&qs[0])), 4*len(qs)))
		out, _ := d.Alloc(4 * rows * H * Dh)
		defer d.Free(q)
		defer d.Free(out)
		bytes := 0.0
		if T == 1 {
			bytes = float64(2 * pool)
		}
		return timeGraph(b, func(k *K) error { return k.AttentionBatch(out, q, p, bt, rows, H, 0.088) }, bytes)
	}
	// Decode: attention_mma_decode.cu's four warps a chunk (flashDecode,
	// the default) beside the one-warp split kernels (the same bits,
	// TestFlashVariants).
	defer func(p, dec, pre, wg bool) {
		flashPipelined, flashDecode, flashPrefill, flashPrefillWG = p, dec, pre, wg
	}(flashPipelined, flashDecode, flashPrefill, flashPrefillWG)
	for _, wide := range []bool{true, false} {
		flashDecode = wide
		suffix := map[bool]string{false: "-one-warp"}[wide]
		for _, c := range []struct{ seqs, ctx int }{{1, 1024}, {1, 8192}, {32, 8192}} {
			b.Run(fmt.Sprintf("attention-decode%s/seqs=%d/ctx=%d", suffix, c.seqs, c.ctx), func(b *testing.B) { attention(b, kernels.KVBF16, c.seqs, 1, c.ctx, 0) })
		}
	}
	flashDecode = true
	// Decode with BF16 q and P (the _q1 decode kernels: WithBF16Activations).
	for _, c := range []struct{ seqs, ctx int }{{1, 8192}, {32, 8192}} {
		b.Run(fmt.Sprintf("attention-decode-bf16/seqs=%d/ctx=%d", c.seqs, c.ctx), func(b *testing.B) { attention(b, kernels.KVBF16, c.seqs, 1, c.ctx, c.seqs) })
	}
	// Over an FP8 cache (the _fp8 kernels): half the bytes of BF16's.
	for _, c := range []struct{ seqs, ctx int }{{1, 8192}, {32, 8192}} {
		b.Run(fmt.Sprintf("attention-decode-fp8/seqs=%d/ctx=%d", c.seqs, c.ctx), func(b *testing.B) { attention(b, kernels.KVFP8, c.seqs, 1, c.ctx, 0) })
		b.Run(fmt.Sprintf("attention-decode-bf16-fp8/seqs=%d/ctx=%d", c.seqs, c.ctx), func(b *testing.B) { attention(b, kernels.KVFP8, c.seqs, 1, c.ctx, c.seqs) })
	}
	// Prefill: q and P in three BF16 terms, and as one (the BF16 prefill).
	for _, c := range []struct {
		name string
		T    int
		bf16 bool
	}{{"", 1024, false}, {"", 8192, false}, {"-bf16", 1024, true}, {"-bf16", 8192, true}, {"-bf16-fp8", 8192, true},
		{"-bf16-wgmma", 1024, true}, {"-bf16-wgmma", 8192, true}, {"-bf16-one-tile", 1024, true}, {"-bf16-one-tile", 8192, true},
		{"-pipelined", 1024, false}, {"-pipelined", 8192, false}, {"-bf16-pipelined", 1024, true}, {"-bf16-pipelined", 8192, true}} {
		T := c.T
		// -bf16: attention_mma_prefill.cu (flashPrefill, the default);
		// -bf16-wgmma: attention_wgmma_prefill.cu (sm_90a); -one-tile and
		// -pipelined: attention_mma.cu's kernels.
		flashPipelined = strings.HasSuffix(c.name, "pipelined")
		flashPrefill = c.name == "-bf16" || c.name == "-bf16-wgmma" || c.name == "-bf16-fp8"
		flashPrefillWG = c.name == "-bf16-wgmma"
		b.Run(fmt.Sprintf("attention-prefill%s/T=%d", c.name, T), func(b *testing.B) {
			dt := kernels.KVBF16
			if c.name == "-bf16-fp8" {
				dt = kernels.KVFP8
			}
			per := attention(b, dt, 1, T, T, map[bool]int{true: T}[c.bf16])
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
