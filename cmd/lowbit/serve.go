package main

import (
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/lowbit-ai/lowbit/runtime/serve"
)

func newServeCmd() *cobra.Command {
	var c serve.Config
	var tp int
	cmd := &cobra.Command{
		Use:   "serve MODEL_DIR",
		Short: "Serve a model over an OpenAI-compatible HTTP API, as vllm serve does",
		Long: `serve runs a Qwen3 or Llama checkpoint (BF16, or any scheme quantize writes)
behind vLLM's OpenAI-compatible API: /v1/completions (prompt_logprobs
included), /v1/chat/completions, /tokenize, /detokenize, /v1/models, /health,
/version and /metrics, with continuous batching, a paged KV cache (BF16 or
FP8) and prefix caching. It uses the GPU when one is present (--device).

The flags are vLLM's, so a vLLM launch line needs one word changed:
  lowbit serve MODEL --host 127.0.0.1 --port 8000 --served-model-name NAME \
    --max-model-len 32768 --gpu-memory-utilization 0.9 --kv-cache-dtype fp8
Flags vLLM has that change nothing here (--tokenizer-mode, --trust-remote-code,
--dtype auto, --enforce-eager, --language-model-only, ...) are accepted.
SIGINT or SIGTERM stops accepting requests and drains those in flight.`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c.Model = args[0]
			if tp != 1 {
				return usageError{fmt.Errorf("--tensor-parallel-size %d: lowbit serves on one device", tp)}
			}
			c.Version = version
			c.Log = slog.New(slog.NewTextHandler(os.Stderr, nil))
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return serve.Run(ctx, c)
		},
	}
	f := cmd.Flags()
	f.StringVar(&c.Host, "host", "", "address to listen on (vLLM's default: every interface)")
	f.IntVar(&c.Port, "port", 8000, "port to listen on")
	f.StringSliceVar(&c.ServedModelNames, "served-model-name", nil, "model name(s) requests use; the first is reported (default: MODEL_DIR as given)")
	f.StringVar(&c.Tokenizer, "tokenizer", "", "directory of tokenizer.json and tokenizer_config.json (default: MODEL_DIR)")
	f.IntVar(&c.MaxModelLen, "max-model-len", 0, "most prompt plus generated tokens per request (default: the model's max_position_embeddings)")
	f.Float64Var(&c.GPUMemoryUtilization, "gpu-memory-utilization", 0.9, "share of the GPU's memory to use (weights, activations, KV cache); on the CPU, of available memory for the KV cache")
	f.Int64Var(&c.KVCacheMemoryBytes, "kv-cache-memory-bytes", 0, "size of the KV cache in bytes (overrides --gpu-memory-utilization for it)")
	f.StringVar(&c.KVCacheDType, "kv-cache-dtype", "auto", "KV cache dtype: auto (BF16) or fp8 (E4M3 with the checkpoint's k/v scales)")
	f.IntVar(&c.MaxNumSeqs, "max-num-seqs", 0, "most sequences per step (default 256 on a GPU, 16 on the CPU)")
	f.IntVar(&c.MaxNumBatchedTokens, "max-num-batched-tokens", 0, "most tokens per step, prefill chunks included (default 8192 on a GPU, 512 on the CPU)")
	f.IntVar(&c.BlockSize, "block-size", 16, "positions per KV cache block")
	f.StringVar(&c.GenerationConfig, "generation-config", "auto", "default sampling: auto (the model's generation_config.json), vllm (vLLM's defaults), or a directory holding generation_config.json")
	f.IntVar(&c.MaxLogprobs, "max-logprobs", 20, "most logprobs and prompt_logprobs a request may ask for (-1: the whole vocabulary)")
	var noPrefix, prefix bool
	f.BoolVar(&prefix, "enable-prefix-caching", true, "reuse the KV cache of shared prompt prefixes")
	f.BoolVar(&noPrefix, "no-enable-prefix-caching", false, "turn prefix caching off")
	f.StringVar(&c.Device, "device", "auto", "auto (a GPU when one is usable, else the CPU), cpu or cuda")
	f.StringVar(&c.PrefillActivations, "prefill-activations", "float32", "float32 (every row with the CPU's numerics) or bf16 (GPU: prompt tokens on BF16 activations, cuBLASLt GEMMs and BF16 attention, as vLLM computes; faster prefill, a second copy of the BF16 weights)")
	f.StringVar(&c.DecodeActivations, "decode-activations", "float32", "float32 (generated tokens with the CPU's numerics) or bf16 (GPU, with --prefill-activations bf16: generated tokens' linear layers and attention on BF16 activations too, as vLLM decodes; faster decode steps)")
	f.StringVar(&c.Scheduling, "scheduling", "auto", "mixed (generated tokens ride beside prompt chunks, as vLLM's chunked prefill), prefill-first (prompt chunks run alone while any can start; generated tokens wait, as SGLang's default; more throughput where prompt rows run other kernels than generated ones) or auto (prefill-first with --prefill-activations bf16, else mixed)")
	f.IntVar(&c.Threads, "threads", 0, "CPU threads (default: all)")
	f.BoolVar(&c.NoMmap, "no-mmap", false, noMmapHelp+"; CPU device only")
	var seed int64
	f.Int64Var(&seed, "seed", 0, "accepted for vLLM compatibility: requests that set no seed draw a random one")
	f.IntVar(&tp, "tensor-parallel-size", 1, "must be 1")
	for _, name := range []string{"tokenizer-mode", "dtype", "quantization", "uvicorn-log-level", "load-format"} {
		var s string
		f.StringVar(&s, name, "", "accepted for vLLM compatibility; no effect")
	}
	for _, name := range []string{"trust-remote-code", "enforce-eager", "language-model-only", "disable-log-requests",
		"disable-log-stats", "enable-chunked-prefill"} {
		var b bool
		f.BoolVar(&b, name, false, "accepted for vLLM compatibility; no effect")
	}
	cmd.PreRunE = func(cmd *cobra.Command, _ []string) error {
		c.DisablePrefixCaching = noPrefix || !prefix
		return nil
	}
	return cmd
}
