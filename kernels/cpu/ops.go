//go:build cgo

package cpu

/*
#cgo CFLAGS: -O3 -std=c11 -D_GNU_SOURCE -Wall
#cgo LDFLAGS: -lm -lpthread
#include "lbcpu.h"
*/
import "C"

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/lowbit-ai/lowbit/kernels"
)

// isaNames maps the C code path numbers to their names, best last.
var isaNames = [...]string{C.LB_ISA_GENERIC: "generic", C.LB_ISA_AVX2: "avx2", C.LB_ISA_AVX512: "avx512"}

// Ops is the C implementation of [kernels.Ops] for one code path. Its
// methods panic after [Ops.Close].
type Ops struct {
	mu        sync.Mutex
	ctx       *C.lb_ctx
	name      string
	threads   int
	lastYield atomic.Int64 // time.Now().UnixNano() of lock's last runtime.Gosched
}

var _ kernels.Ops = (*Ops)(nil)

// ISAs returns the code paths this CPU can run, best first.
func ISAs() []string {
	var s []string
	for isa := len(isaNames) - 1; isa >= 0; isa-- {
		if C.lb_isa_supported(C.int(isa)) != 0 {
			s = append(s, isaNames[isa])
		}
	}
	return s
}

// isaID returns the number of the code path called name.
func isaID(name string) (int, bool) {
	for id, n := range isaNames {
		if n == name {
			return id, true
		}
	}
	return 0, false
}

// New returns an Ops on the best code path this CPU supports, with one
// thread per online CPU.
func New() (*Ops, error) { return NewWithOptions(Options{}) }

// NewWithOptions returns an Ops configured by opt. It fails for an unknown
// ISA, one the CPU cannot run, a negative thread count, or when the
// threads cannot be started.
func NewWithOptions(opt Options) (*Ops, error) {
	name := opt.ISA
	if name == "" {
		name = ISAs()[0]
	}
	isa, ok := isaID(name)
	if !ok {
		return nil, fmt.Errorf("cpu: unknown ISA %q (want avx512, avx2 or generic)", opt.ISA)
	}
	if C.lb_isa_supported(C.int(isa)) == 0 {
		return nil, fmt.Errorf("cpu: this CPU cannot run the %s code path", name)
	}
	threads := opt.Threads
	switch {
	case threads < 0:
		return nil, fmt.Errorf("cpu: %d threads", threads)
	case threads == 0:
		threads = max(kernels.OnlineCPUs(), 1)
	}
	var ctx *C.lb_ctx
	switch C.lb_ctx_new(&ctx, C.int(isa), C.int(threads)) {
	case C.LB_OK:
	case C.LB_ERR_NOMEM:
		return nil, fmt.Errorf("cpu: out of memory")
	default:
		return nil, fmt.Errorf("cpu: cannot start %d threads", threads)
	}
	return &Ops{ctx: ctx, name: "cpu-" + name, threads: threads}, nil
}

// Close stops the thread pool and frees the scratch memory. It is safe to
// call more than once.
func (o *Ops) Close() {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.ctx != nil {
		C.lb_ctx_free(o.ctx)
		o.ctx = nil
	}
}

// Name returns "cpu-avx512", "cpu-avx2" or "cpu-generic".
func (o *Ops) Name() string { return o.name }

// Threads returns the number of threads that run an op, the caller
// included.
func (o *Ops) Threads() int { return o.threads }

// yieldInterval is how long ops may be called back to back before lock
// yields the caller's P once (runtime.Gosched). Go's sysmon treats a
// goroutine that has not been rescheduled for 10 ms as running too long,
// and from then on takes its P away during every cgo call; each return
// from C then gets an idle P and wakes sysmon, two context switches a call
// on CPUs the kernels' threads are using. On the 2-core Zen 5 VM a decode
// step's 113 GEMVs called from Go made about 270 context switches a step
// and streamed 45-50 GB/s; with this yield about 50 and 59-61 GB/s, against
// 62 for the same GEMVs called from one C function (BENCHMARKS.md,
// 2026-12-03).
const yieldInterval = time.Millisecond

// lock takes the mutex of a live Ops, first yielding the calling goroutine's
// P when no call has done so for yieldInterval; the caller unlocks.
func (o *Ops) lock() {
	if now := time.Now().UnixNano(); now-o.lastYield.Load() > int64(yieldInterval) {
		o.lastYield.Store(now)
		runtime.Gosched()
	}
	o.mu.Lock()
	if o.ctx == nil {
		o.mu.Unlock()
		panic("cpu: use of a closed Ops")
	}
}

// check turns a C status into a panic: the ops cannot return errors, and
// the only failure, running out of scratch memory, is not recoverable.
func check(op string, rc C.int) {
	if rc != C.LB_OK {
		panic(fmt.Sprintf("cpu: %s: out of memory for scratch space (status %d)", op, int(rc)))
	}
}

func fp(s []float32) *C.float { return (*C.float)(unsafe.Pointer(unsafe.SliceData(s))) }

func need(op, name string, have, want int) {
	if have < want {
		panic(fmt.Sprintf("cpu: %s: len(%s) = %d, want at least %d", op, name, have, want))
	}
}

func nonNegative(op string, vals ...int) {
	for _, v := range vals {
		if v < 0 {
			panic(fmt.Sprintf("cpu: %s: negative dimension %d", op, v))
		}
	}
}

// MatMul computes y[t,o] = Σ_i x[t,i]·w[o,i] for t < T with w's numerics;
// see [kernels.Ops].
func (o *Ops) MatMul(y, x []float32, T int, w *kernels.Weight) {
	if err := w.Check(); err != nil {
		panic("cpu: MatMul: " + err.Error())
	}
	nonNegative("MatMul", T)
	need("MatMul", "x", len(x), T*w.In)
	need("MatMul", "y", len(y), T*w.Out)
	if T == 0 {
		return
	}
	o.lock()
	defer o.mu.Unlock()
	check("MatMul", C.lb_matmul(o.ctx, fp(y), fp(x), C.int64_t(T), cFormat(w.Format),
		C.int64_t(w.Out), C.int64_t(w.In), (*C.uint8_t)(unsafe.SliceData(w.Data)), fp(w.Scales),
		C.float(w.GlobalScale), cAct(w.Act), C.float(w.InputScale)))
}

// MatMuls computes MatMul(ys[i], x, T, ws[i]) for every i, with the same
// bits. Up to three weights that share Format, In, Act and InputScale run
// in one dispatch of the thread pool, x quantized once for all of them;
// other groups run as separate MatMuls. The runtime calls it for a
// layer's q, k and v and its gate and up.
func (o *Ops) MatMuls(x []float32, T int, ys [][]float32, ws []*kernels.Weight) {
	if len(ys) != len(ws) {
		panic(fmt.Sprintf("cpu: MatMuls: %d outputs for %d weights", len(ys), len(ws)))
	}
	if len(ws) == 0 || len(ws) > 3 || !shareInput(ws) {
		for i, w := range ws {
			o.MatMul(ys[i], x, T, w)
		}
		return
	}
	nonNegative("MatMuls", T)
	for i, w := range ws {
		if err := w.Check(); err != nil {
			panic("cpu: MatMuls: " + err.Error())
		}
		need("MatMuls", "x", len(x), T*w.In)
		need("MatMuls", "y", len(ys[i]), T*w.Out)
	}
	if T == 0 {
		return
	}
	// Unused slots repeat weight 0; n tells C to skip them.
	var y [3]*C.float
	var out [3]C.int64_t
	var data [3]*C.uint8_t
	var scales [3]*C.float
	var global [3]C.float
	for i := range 3 {
		j := min(i, len(ws)-1)
		w := ws[j]
		y[i], out[i], global[i] = fp(ys[j]), C.int64_t(w.Out), C.float(w.GlobalScale)
		data[i], scales[i] = (*C.uint8_t)(unsafe.SliceData(w.Data)), fp(w.Scales)
	}
	w := ws[0]
	o.lock()
	defer o.mu.Unlock()
	check("MatMuls", C.lb_matmul3(o.ctx, C.int(len(ws)), fp(x), C.int64_t(T), cFormat(w.Format), C.int64_t(w.In),
		cAct(w.Act), C.float(w.InputScale),
		y[0], out[0], data[0], scales[0], global[0],
		y[1], out[1], data[1], scales[1], global[1],
		y[2], out[2], data[2], scales[2], global[2]))
}

// shareInput reports whether the weights quantize and read x alike.
func shareInput(ws []*kernels.Weight) bool {
	for _, w := range ws[1:] {
		if w.Format != ws[0].Format || w.In != ws[0].In || w.Act != ws[0].Act || w.InputScale != ws[0].InputScale {
			return false
		}
	}
	return true
}

func cFormat(f kernels.WeightFormat) C.int {
	switch f {
	case kernels.WeightBF16:
		return C.LB_W_BF16
	case kernels.WeightFP8Channel:
		return C.LB_W_FP8_CHANNEL
	case kernels.WeightFP8Tensor:
		return C.LB_W_FP8_TENSOR
	case kernels.WeightFP8Block:
		return C.LB_W_FP8_BLOCK
	case kernels.WeightNVFP4:
		return C.LB_W_NVFP4
	}
	panic("cpu: unknown weight format " + f.String())
}

func cAct(a kernels.ActQuant) C.int {
	switch a {
	case kernels.ActNone:
		return C.LB_A_NONE
	case kernels.ActFP8Token:
		return C.LB_A_FP8_TOKEN
	case kernels.ActFP8Tensor:
		return C.LB_A_FP8_TENSOR
	case kernels.ActFP8Group128:
		return C.LB_A_FP8_GROUP128
	case kernels.ActNVFP4:
		return C.LB_A_NVFP4
	}
	panic("cpu: unknown activation quantization " + a.String())
}

// RMSNorm normalizes each row of x [T, D] into y; see [kernels.Ops].
func (o *Ops) RMSNorm(y, x, weight []float32, T, D int, eps float32, zeroCentered bool) {
	nonNegative("RMSNorm", T, D)
	need("RMSNorm", "x", len(x), T*D)
	need("RMSNorm", "y", len(y), T*D)
	need("RMSNorm", "weight", len(weight), D)
	if T*D == 0 {
		return
	}
	zc := C.int(0)
	if zeroCentered {
		zc = 1
	}
	o.lock()
	defer o.mu.Unlock()
	C.lb_rmsnorm(o.ctx, fp(y), fp(x), fp(weight), C.int64_t(T), C.int64_t(D), C.float(eps), zc)
}

// RoPE rotates x [T, heads, headDim] in place, NeoX style; see
// [kernels.Ops].
func (o *Ops) RoPE(x []float32, T, heads, headDim, rotaryDim int, pos []int32, theta float64) {
	nonNegative("RoPE", T, heads, headDim, rotaryDim)
	if rotaryDim%2 != 0 || rotaryDim > headDim {
		panic(fmt.Sprintf("cpu: RoPE: rotaryDim %d must be even and at most headDim %d", rotaryDim, headDim))
	}
	need("RoPE", "x", len(x), T*heads*headDim)
	need("RoPE", "pos", len(pos), T)
	if T*heads*rotaryDim == 0 {
		return
	}
	o.lock()
	defer o.mu.Unlock()
	check("RoPE", C.lb_rope(o.ctx, fp(x), C.int64_t(T), C.int64_t(heads), C.int64_t(headDim),
		C.int64_t(rotaryDim), (*C.int32_t)(unsafe.SliceData(pos)), C.double(theta)))
}

// Attention computes causal grouped-query attention of T new tokens at
// positions start..start+T-1; see [kernels.Ops].
func (o *Ops) Attention(out, q, k, v []float32, T, start, H, KVH, Dh int, scale float32) {
	nonNegative("Attention", T, start, H, KVH, Dh)
	if KVH == 0 || H%KVH != 0 {
		panic(fmt.Sprintf("cpu: Attention: H = %d query heads is not a multiple of KVH = %d", H, KVH))
	}
	need("Attention", "q", len(q), T*H*Dh)
	need("Attention", "out", len(out), T*H*Dh)
	need("Attention", "k", len(k), (start+T)*KVH*Dh)
	need("Attention", "v", len(v), (start+T)*KVH*Dh)
	if T*H*Dh == 0 {
		return
	}
	o.lock()
	defer o.mu.Unlock()
	check("Attention", C.lb_attention(o.ctx, fp(out), fp(q), (*C.uint8_t)(unsafe.Pointer(unsafe.SliceData(k))),
		(*C.uint8_t)(unsafe.Pointer(unsafe.SliceData(v))), C.LB_KV_F32, 1, 1, nil, 1, C.int64_t(T),
		C.int64_t(start), C.int64_t(H), C.int64_t(KVH), C.int64_t(Dh), C.float(scale)))
}

// WriteKV stores k and v into a paged cache with kernels.WriteKV: a
// conversion of T·KVHeads·HeadDim elements per layer, a small share of a
// step next to the matmuls, so it stays in Go, where it is the definition.
func (o *Ops) WriteKV(kv *kernels.KVCache, k, v []float32, T, start int) {
	kernels.WriteKV(kv, k, v, T, start)
}

// PagedAttention is Attention over a paged cache; see [kernels.Ops].
func (o *Ops) PagedAttention(out, q []float32, kv *kernels.KVCache, T, start, H int, scale float32) {
	nonNegative("PagedAttention", T, start, H)
	if err := kv.Check(start + T); err != nil {
		panic("cpu: PagedAttention: " + err.Error())
	}
	KVH, Dh := kv.KVHeads, kv.HeadDim
	if H%KVH != 0 {
		panic(fmt.Sprintf("cpu: PagedAttention: H = %d query heads is not a multiple of KVH = %d", H, KVH))
	}
	need("PagedAttention", "q", len(q), T*H*Dh)
	need("PagedAttention", "out", len(out), T*H*Dh)
	if T*H == 0 {
		return
	}
	o.lock()
	defer o.mu.Unlock()
	check("PagedAttention", C.lb_attention(o.ctx, fp(out), fp(q), (*C.uint8_t)(unsafe.SliceData(kv.K)),
		(*C.uint8_t)(unsafe.SliceData(kv.V)), C.int(kv.DType), C.float(kv.KScale), C.float(kv.VScale),
		(*C.int32_t)(unsafe.SliceData(kv.Blocks)), C.int64_t(kv.BlockSize), C.int64_t(T),
		C.int64_t(start), C.int64_t(H), C.int64_t(KVH), C.int64_t(Dh), C.float(scale)))
}

// SiLUMul computes out[i] = silu(gate[i])·up[i] for i < n; see
// [kernels.Ops].
func (o *Ops) SiLUMul(out, gate, up []float32, n int) {
	nonNegative("SiLUMul", n)
	need("SiLUMul", "out", len(out), n)
	need("SiLUMul", "gate", len(gate), n)
	need("SiLUMul", "up", len(up), n)
	if n == 0 {
		return
	}
	o.lock()
	defer o.mu.Unlock()
	C.lb_silu_mul(o.ctx, fp(out), fp(gate), fp(up), C.int64_t(n))
}

// Add computes out[i] = a[i] + b[i] for i < n; see [kernels.Ops].
func (o *Ops) Add(out, a, b []float32, n int) {
	nonNegative("Add", n)
	need("Add", "out", len(out), n)
	need("Add", "a", len(a), n)
	need("Add", "b", len(b), n)
	if n == 0 {
		return
	}
	o.lock()
	defer o.mu.Unlock()
	C.lb_add(o.ctx, fp(out), fp(a), fp(b), C.int64_t(n))
}

// LogSoftmax computes out[t,:] = logits[t,:] - logsumexp(logits[t,:]) for
// [T, V] rows; see [kernels.Ops].
func (o *Ops) LogSoftmax(out, logits []float32, T, V int) {
	nonNegative("LogSoftmax", T, V)
	need("LogSoftmax", "logits", len(logits), T*V)
	need("LogSoftmax", "out", len(out), T*V)
	if T*V == 0 {
		return
	}
	o.lock()
	defer o.mu.Unlock()
	C.lb_log_softmax(o.ctx, fp(out), fp(logits), C.int64_t(T), C.int64_t(V))
}

// MemoryBandwidth measures the read bandwidth, in bytes per second, of a
// streaming read by all of the Ops's threads over a freshly allocated and
// touched buffer of about the given size (whole 2 MiB chunks): the access
// pattern of a decode GEMV over its weights, and so the roofline of decode.
// Use a buffer much larger than the last-level cache (1 GiB) to measure
// memory rather than cache. It returns the fastest of 5 passes, or 0 when
// the buffer cannot be allocated.
func (o *Ops) MemoryBandwidth(bytes int64) float64 {
	o.lock()
	defer o.mu.Unlock()
	return float64(C.lb_memory_bandwidth(o.ctx, C.int64_t(bytes)))
}
