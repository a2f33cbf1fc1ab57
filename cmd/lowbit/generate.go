package main

import (
	"bufio"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/lowbit-ai/lowbit/kernels"
	"github.com/lowbit-ai/lowbit/kernels/cpu"
	"github.com/lowbit-ai/lowbit/kernels/ref"
	"github.com/lowbit-ai/lowbit/runtime"
	"github.com/lowbit-ai/lowbit/runtime/engine"
	"github.com/lowbit-ai/lowbit/tokenizer"
)

func newGenerateCmd() *cobra.Command {
	var (
		model, prompt, backend string
		kvDType                string
		maxTokens              int
		chat, noMmap           bool
		s                      runtime.SamplingOptions
	)
	cmd := &cobra.Command{
		Use:   "generate --model DIR --prompt TEXT",
		Short: "Generate text from a prompt on the CPU, streaming it to stdout",
		Long: `generate runs a Qwen3 or Llama checkpoint (BF16, FP8 or NVFP4) on the CPU and
prints the continuation of the prompt as it is generated; a line with the
prefill and decode speeds goes to stderr. Sampling defaults to the model's
generation_config.json, as vLLM's server does; the flags override it
(--temperature 0 is greedy). Generation stops at the model's EOS ids. The
KV cache is BF16 by default, as lowbit serve's, so the two give the same
greedy text; --kv-cache-dtype float32 keeps it exact.`,
		Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, args []string) error {
			dt, err := engine.ParseKVCacheDType(kvDType)
			if err != nil {
				return usageError{err}
			}
			ops, err := openBackend(backend)
			if err != nil {
				return err
			}
			tok, err := tokenizer.LoadDir(model)
			if err != nil {
				return err
			}
			gen, err := runtime.ReadGenerationConfig(model)
			if err != nil {
				return err
			}
			for name, dst := range map[string]any{"temperature": &gen.Sampling.Temperature, "top-p": &gen.Sampling.TopP,
				"top-k": &gen.Sampling.TopK, "min-p": &gen.Sampling.MinP} {
				if cmd.Flags().Changed(name) {
					switch d := dst.(type) {
					case *float64:
						*d, _ = cmd.Flags().GetFloat64(name)
					case *int:
						*d, _ = cmd.Flags().GetInt(name)
					}
				}
			}
			gen.Sampling.Seed = s.Seed
			if err := gen.Sampling.Validate(); err != nil {
				return usageError{err}
			}
			m, err := runtime.LoadWith(model, ops, runtime.LoadOptions{NoMmap: noMmap})
			if err != nil {
				return err
			}
			defer m.Close()
			for _, n := range m.Notes() {
				fmt.Fprintln(os.Stderr, "lowbit: note:", n)
			}
			text := prompt
			if chat {
				text = runtime.ChatPrompt(prompt)
			}
			ids := tok.Encode(text)
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			out := bufio.NewWriter(os.Stdout)
			dec := tokenizer.NewStreamDecoder(tok, true)
			seq, err := m.NewSequenceKV(len(ids)+maxTokens, dt)
			if err != nil {
				return err
			}
			st, err := m.Generate(ctx, seq, ids,
				runtime.GenerateOptions{MaxTokens: maxTokens, Sampling: gen.Sampling, StopIDs: gen.StopIDs},
				func(id int) error {
					out.WriteString(dec.Add(id))
					return out.Flush()
				})
			out.WriteString(dec.Flush() + "\n")
			out.Flush()
			fmt.Fprintf(os.Stderr, "lowbit: %s backend: prefill %d tokens in %.3fs (%.1f tokens/s); decode %d tokens in %.3fs (%.2f tokens/s)\n",
				ops.Name(), st.PromptTokens, st.Prefill.Seconds(), st.PrefillTokensPerSecond(),
				max(st.Generated-1, 0), st.Decode.Seconds(), st.DecodeTokensPerSecond())
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&model, "model", "", "model directory: config.json, safetensors, tokenizer.json (required)")
	f.StringVar(&prompt, "prompt", "", "prompt text (required)")
	f.IntVar(&maxTokens, "max-tokens", 128, "most tokens to generate")
	f.BoolVar(&chat, "chat", false, "wrap the prompt as one user turn of the Qwen3 chat template")
	f.Float64Var(&s.Temperature, "temperature", 0, "sampling temperature; 0 is greedy (default: generation_config.json)")
	f.Float64Var(&s.TopP, "top-p", 0, "top-p (default: generation_config.json, else off)")
	f.IntVar(&s.TopK, "top-k", 0, "top-k; 0 is off (default: generation_config.json)")
	f.Float64Var(&s.MinP, "min-p", 0, "min-p; 0 is off (default: generation_config.json)")
	f.Uint64Var(&s.Seed, "seed", 0, "sampling seed")
	f.StringVar(&backend, "backend", "auto", "kernels: cpu, ref (plain Go, slow), or auto (cpu when built with cgo)")
	f.BoolVar(&noMmap, "no-mmap", false, noMmapHelp)
	f.StringVar(&kvDType, "kv-cache-dtype", "auto", "KV cache dtype: auto (BF16, as lowbit serve), fp8 (E4M3 with the checkpoint's k/v scales) or float32 (exact)")
	cmd.MarkFlagRequired("model")
	cmd.MarkFlagRequired("prompt")
	return cmd
}

// noMmapHelp is the help of generate's and serve's --no-mmap.
const noMmapHelp = "copy the weights into huge-page memory at load instead of reading them from the mapped checkpoint " +
	"(llama.cpp's --no-mmap): faster CPU decode, but a slower load (the whole checkpoint is read and copied) and " +
	"weights held in private memory, not in the page cache that other processes share and the kernel can reclaim"

// openBackend returns the kernels a --backend value names.
func openBackend(name string) (kernels.Ops, error) {
	switch name {
	case "ref":
		return ref.Ops{}, nil
	case "cpu", "auto":
		ops, err := cpuBackend()
		if err == nil {
			return ops, nil
		}
		if name == "cpu" {
			return nil, err
		}
		fmt.Fprintf(os.Stderr, "lowbit: warning: %v; using the plain Go reference kernels, which are slow\n", err)
		return ref.Ops{}, nil
	}
	return nil, usageError{fmt.Errorf("--backend %q: choose auto, cpu or ref", name)}
}

// cpuBackend returns the C kernels of kernels/cpu (ErrNoCgo without cgo).
func cpuBackend() (kernels.Ops, error) {
	ops, err := cpu.New()
	if err != nil {
		return nil, err
	}
	return ops, nil
}
