// Package serve assembles what `lowbit serve` runs from vLLM-style
// settings: the kernels (a GPU when one is there, else the CPU), the model,
// the engine with its KV cache sized from the memory settings, and the
// OpenAI-compatible HTTP server, and runs them until the context ends,
// then drains in-flight requests.
package serve

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/lowbit-ai/lowbit/kernels"
	"github.com/lowbit-ai/lowbit/kernels/cpu"
	"github.com/lowbit-ai/lowbit/kernels/cuda"
	"github.com/lowbit-ai/lowbit/runtime"
	"github.com/lowbit-ai/lowbit/runtime/engine"
	"github.com/lowbit-ai/lowbit/runtime/server"
)

// Config holds the settings, named after vLLM's flags.
type Config struct {
	Model            string   // the checkpoint directory
	Tokenizer        string   // --tokenizer; "" is Model
	Host             string   // --host
	Port             int      // --port
	ServedModelNames []string // --served-model-name; nil is Model
	MaxModelLen      int      // --max-model-len; 0 is the model's
	// GPUMemoryUtilization is the share of the device's memory lowbit may
	// hold (weights, activations and KV cache); on the CPU, the share of
	// the machine's available memory the KV cache may take at most.
	GPUMemoryUtilization float64
	// KVCacheMemoryBytes, when set, is the KV cache's size and overrides
	// the utilization.
	KVCacheMemoryBytes   int64
	KVCacheDType         string // auto, fp8 (fp8_e4m3), float32 (CPU tests)
	MaxNumSeqs           int
	MaxNumBatchedTokens  int
	BlockSize            int
	GenerationConfig     string // auto, vllm, or a directory holding generation_config.json
	MaxLogprobs          int
	DisablePrefixCaching bool
	Device               string // auto, cpu, cuda
	// PrefillActivations is "float32" (the default: every row with the
	// float32-activation numerics the CPU shares) or "bf16" (on a GPU,
	// prompt rows on BF16 activations: runtime.WithPrefillBF16).
	PrefillActivations string
	// DecodeActivations is "float32" (the default) or "bf16" (on a GPU,
	// with PrefillActivations bf16: generated rows on BF16 activations
	// too, runtime.WithBF16Activations).
	DecodeActivations string
	// Scheduling is "auto" (or ""), "mixed" or "prefill-first"
	// (engine.ParseScheduling; auto is prefill-first with BF16 prefill).
	Scheduling string
	Threads    int  // CPU threads; 0 is all
	NoMmap     bool // runtime.LoadOptions.NoMmap on the CPU; ignored on a GPU, which holds its own copy
	Version    string
	Log        *slog.Logger
	// Ready, when set, is called with the listening address once the
	// server accepts connections.
	Ready func(addr string)
}

// Run serves until ctx ends, then stops accepting, lets in-flight requests
// finish for up to 30 s, and frees everything.
func Run(ctx context.Context, c Config) error {
	log := c.Log
	if log == nil {
		log = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	st, err := Start(c, log)
	if err != nil {
		return err
	}
	defer st.Close()
	ln, err := net.Listen("tcp", net.JoinHostPort(c.Host, fmt.Sprint(c.Port)))
	if err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	hs := &http.Server{Handler: st.Server, ReadHeaderTimeout: 30 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	log.Info("serving", "address", "http://"+ln.Addr().String(), "model", st.Names[0])
	if c.Ready != nil {
		c.Ready(ln.Addr().String())
	}
	select {
	case err := <-errc:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	log.Info("shutting down: draining in-flight requests")
	sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := hs.Shutdown(sctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return nil
}

// Started is a model with its engine and HTTP handler, not yet listening.
type Started struct {
	Server  *server.Server
	Engine  *engine.Engine
	Model   *runtime.Model
	Names   []string
	Device  string // "cpu-avx512", "cuda NVIDIA H200 ...", ...
	closers []func()
}

// Close stops the server and the engine and frees the model and device.
func (s *Started) Close() {
	for i := len(s.closers) - 1; i >= 0; i-- {
		s.closers[i]()
	}
	s.closers = nil
}

// Start loads everything Config names and returns the handler.
func Start(c Config, log *slog.Logger) (_ *Started, err error) {
	st := &Started{}
	defer func() {
		if err != nil {
			st.Close()
		}
	}()
	if c.GPUMemoryUtilization == 0 {
		c.GPUMemoryUtilization = 0.9
	}
	if !(c.GPUMemoryUtilization > 0 && c.GPUMemoryUtilization <= 1) {
		return nil, fmt.Errorf("serve: --gpu-memory-utilization %g: want a value in (0, 1]", c.GPUMemoryUtilization)
	}
	var dev *cuda.Device
	switch c.Device {
	case "", "auto", "cuda":
		dev, err = cuda.Open(cuda.Options{})
		if err != nil {
			if c.Device == "cuda" {
				return nil, fmt.Errorf("serve: --device cuda: %w", err)
			}
			log.Info("no GPU, serving on the CPU", "reason", err)
			err = nil
		} else {
			st.closers = append(st.closers, func() { dev.Close() })
			st.Device = "cuda " + dev.String()
		}
	case "cpu":
	default:
		return nil, fmt.Errorf("serve: --device %q: want auto, cpu or cuda", c.Device)
	}
	ops, err := cpu.NewWithOptions(cpu.Options{Threads: c.Threads})
	if err != nil {
		return nil, fmt.Errorf("serve: the CPU kernels: %w", err)
	}
	st.closers = append(st.closers, ops.Close)
	if dev == nil {
		st.Device = ops.Name()
	}
	if c.NoMmap && dev != nil {
		log.Info("--no-mmap has no effect on a GPU: the weights are read from the mapping once, into device memory")
	}
	m, err := runtime.LoadWith(c.Model, ops, runtime.LoadOptions{NoMmap: c.NoMmap && dev == nil})
	if err != nil {
		return nil, err
	}
	st.Model = m
	st.closers = append(st.closers, func() { m.Close() })
	for _, n := range m.Notes() {
		log.Info("note", "model", n)
	}
	ecfg, err := engineConfig(c, m, dev, ops)
	if err != nil {
		return nil, err
	}
	eng, err := engine.New(m, ecfg)
	if err != nil {
		return nil, err
	}
	st.Engine = eng
	st.closers = append(st.closers, eng.Close)
	ecfg = eng.Config()
	log.Info("engine", "device", st.Device, "kv_cache_dtype", eng.KVDType().String(),
		"kv_blocks", eng.Stats().KVBlocksTotal, "block_size", ecfg.BlockSize,
		"kv_positions", eng.Stats().KVBlocksTotal*ecfg.BlockSize, "max_model_len", ecfg.MaxModelLen,
		"max_num_seqs", ecfg.MaxNumSeqs, "max_num_batched_tokens", ecfg.MaxNumBatchedTokens,
		"scheduling", ecfg.Scheduling.String())

	opts, err := serverOptions(c, ecfg.MaxModelLen)
	if err != nil {
		return nil, err
	}
	opts.Engine = eng
	opts.Logger = log
	srv, err := server.New(opts)
	if err != nil {
		return nil, err
	}
	st.Server = srv
	st.Names = opts.ServedModelNames
	st.closers = append(st.closers, srv.Close)
	return st, nil
}

// serverOptions reads the tokenizer, chat template and generation config.
func serverOptions(c Config, maxModelLen int) (server.Options, error) {
	gen := c.GenerationConfig
	if gen == "" {
		gen = "auto"
	}
	opts, err := server.OptionsFromModelDir(c.Model, c.Tokenizer, gen)
	if err != nil {
		return opts, fmt.Errorf("serve: %w", err)
	}
	opts.MaxModelLen = maxModelLen
	if len(c.ServedModelNames) > 0 {
		opts.ServedModelNames = c.ServedModelNames
	}
	opts.MaxLogprobs = c.MaxLogprobs
	opts.Version = c.Version
	return opts, nil
}

// engineConfig sizes the engine: its limits from the flags (with defaults
// suited to the device) and the KV cache from the memory settings.
func engineConfig(c Config, m *runtime.Model, dev *cuda.Device, ops kernels.Ops) (e engine.Config, err error) {
	e = engine.Config{MaxModelLen: c.MaxModelLen, MaxNumSeqs: c.MaxNumSeqs, MaxNumBatchedTokens: c.MaxNumBatchedTokens,
		BlockSize: c.BlockSize, KVCacheDType: c.KVCacheDType, DisablePrefixCaching: c.DisablePrefixCaching}
	var bf16Prefill bool
	switch c.PrefillActivations {
	case "", "float32":
	case "bf16":
		if dev == nil {
			return e, fmt.Errorf("serve: --prefill-activations bf16 needs a GPU (--device cuda); the CPU runs float32 activations")
		}
		bf16Prefill, e.PromptNumerics = true, true
	default:
		return e, fmt.Errorf("serve: --prefill-activations %q: want float32 or bf16", c.PrefillActivations)
	}
	var bf16Decode bool
	switch c.DecodeActivations {
	case "", "float32":
	case "bf16":
		if !bf16Prefill {
			return e, fmt.Errorf("serve: --decode-activations bf16 needs --prefill-activations bf16 (and a GPU)")
		}
		bf16Decode = true
	default:
		return e, fmt.Errorf("serve: --decode-activations %q: want float32 or bf16", c.DecodeActivations)
	}
	if e.Scheduling, err = engine.ParseScheduling(c.Scheduling, e.PromptNumerics); err != nil {
		return e, fmt.Errorf("serve: --scheduling: %w", err)
	}
	if e.MaxModelLen == 0 {
		e.MaxModelLen = m.MaxPositions()
	}
	if e.BlockSize == 0 {
		e.BlockSize = 16
	}
	if e.MaxNumSeqs == 0 {
		e.MaxNumSeqs = 256
		if dev == nil {
			e.MaxNumSeqs = 16
		}
	}
	if e.MaxNumBatchedTokens == 0 {
		// 8,192 on a GPU, as LowBArena's stock engine runs vLLM (and vLLM's
		// own default for a server on a large GPU): a long prompt in few
		// steps, each reading the weights once for its prompt rows and
		// once for any generated rows beside them.
		e.MaxNumBatchedTokens = 8192
		if dev == nil {
			e.MaxNumBatchedTokens = 512
		}
	}
	dt, err := engine.ParseKVCacheDType(c.KVCacheDType)
	if err != nil {
		return e, fmt.Errorf("serve: --kv-cache-dtype: %w", err)
	}
	blockBytes := m.KVBlockBytes(e.BlockSize, dt)
	// Enough for MaxNumSeqs full-length sequences is all the scheduler can
	// use.
	want := blockBytes * int64(e.MaxNumSeqs) * int64((e.MaxModelLen+e.BlockSize-1)/e.BlockSize)
	switch {
	case c.KVCacheMemoryBytes > 0:
		e.KVCacheBytes = c.KVCacheMemoryBytes
	case dev != nil:
		free, total, err := dev.MemInfo()
		if err != nil {
			return e, err
		}
		// What others hold already, the weights, and the activations of
		// the largest step stay outside the budget.
		d := m.Shape()
		qd, kvd := d.Heads*d.HeadDim, d.KVHeads*d.HeadDim
		acts := int64(e.MaxNumBatchedTokens) * 4 * int64(2*d.Hidden+2*d.Intermediate+2*qd+2*kvd)
		logits := 4 * int64(m.VocabSize()) * int64(e.MaxNumSeqs+256)
		// The attention's per-chunk partials.
		partials := cuda.AttentionPartialsBytes(d.Heads, d.KVHeads, d.HeadDim, e.MaxNumBatchedTokens)
		weights := m.WeightBytes()
		if bf16Prefill {
			// The row-major copies, and the BF16 activations and workspace
			// of cuBLASLt.
			weights += m.BF16LinearBytes() + 2*int64(e.MaxNumBatchedTokens)*int64(d.Intermediate) + 32<<20
		}
		budget := int64(c.GPUMemoryUtilization*float64(total)) - (total - free) - weights - acts - logits - partials - 512<<20
		e.KVCacheBytes = min(budget, want)
	default:
		// vLLM's CPU backend takes 4 GiB unless told otherwise
		// (VLLM_CPU_KVCACHE_SPACE); so does lowbit, within the memory
		// available.
		avail := memAvailable()
		e.KVCacheBytes = min(int64(c.GPUMemoryUtilization*float64(avail))-m.WeightBytes(), want, 4<<30)
	}
	minimum := blockBytes * int64((e.MaxModelLen+e.BlockSize-1)/e.BlockSize)
	if e.KVCacheBytes < minimum {
		return e, fmt.Errorf("serve: %d MiB for the KV cache cannot hold one sequence of max_model_len %d (%d MiB in %v): lower --max-model-len or raise --gpu-memory-utilization",
			e.KVCacheBytes>>20, e.MaxModelLen, minimum>>20, dt)
	}
	if dev != nil {
		// Decode rows are reduced to their best entries on the GPU
		// (runtime.CUDAExecutor.TopOnDevice; 28% more throughput on the
		// Qwen3-0.6B shape); LOWBIT_TOP_ON_DEVICE=0 copies whole rows
		// back instead, for comparison.
		top := os.Getenv("LOWBIT_TOP_ON_DEVICE") != "0"
		e.NewExecutor = func(blocks, bs int, dt kernels.KVDType) (runtime.Executor, error) {
			var opts []runtime.CUDAOption
			switch {
			case bf16Decode:
				opts = append(opts, runtime.WithBF16Activations())
			case bf16Prefill:
				opts = append(opts, runtime.WithPrefillBF16())
			}
			x, err := runtime.NewCUDAExecutor(m, dev, blocks, bs, dt, opts...)
			if err == nil {
				x.TopOnDevice = top
			}
			return x, err
		}
	}
	return e, nil
}

// memAvailable returns /proc/meminfo's MemAvailable, or 8 GiB where it
// cannot be read.
func memAvailable() int64 {
	data, err := os.ReadFile("/proc/meminfo")
	if err == nil {
		for _, line := range strings.Split(string(data), "\n") {
			var kb int64
			if _, err := fmt.Sscanf(line, "MemAvailable: %d kB", &kb); err == nil {
				return kb << 10
			}
		}
	}
	return 8 << 30
}
