package main

import (
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/lowbit-ai/lowbit/arena"
)

func newEngineCmd() *cobra.Command {
	var (
		out, target, binary, source string
		launch                      arena.LaunchOptions
	)
	cmd := &cobra.Command{
		Use:   "engine --out DIR --target lowbarena|switchboard",
		Short: "Write an engine directory for LowBArena, or a source submission for Switchboard",
		Long: `engine packages lowbit's server for an evaluation.

--target lowbarena writes launch.sh (its serve step execs lowbit serve with
the arena's environment: ARTIFACT, TOKENIZER, PORT on 127.0.0.1, SERVED_NAME,
MAX_MODEL_LEN, GPU_MEMORY_UTILIZATION, GENERATION_CONFIG, KV_CACHE_DTYPE,
LANGUAGE_MODEL_ONLY, read on every start), bin/lowbit (this binary, or
--binary: linux/amd64 with cgo), the kernel sources and ENGINE.md, and says
how to submit it (inline, or pushed to a repository when too large).

--target switchboard writes the source at HEAD of this checkout as plain files
(tests left out), its Go dependencies vendored, switchboard/build.sh (builds
offline), switchboard/start.sh and switchboard.json; Switchboard has not
published that file's schema, so its fields are assumed (SWITCHBOARD.md).

Check a LowBArena directory as the arena runs it: lowbit engine check DIR --artifact MODEL.`,
		Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, args []string) error {
			switch target {
			case "lowbarena":
				res, err := arena.WriteLowBArena(out, arena.LowBArenaOptions{Binary: binary, SourceRoot: source,
					Launch: launch, Version: version})
				if err != nil {
					return err
				}
				for _, w := range res.Warnings {
					fmt.Fprintln(os.Stderr, "lowbit: warning:", w)
				}
				fmt.Fprintf(os.Stderr, "wrote %s: launch.sh, bin/lowbit (%.1f MB, sha256 %.12s), %d kernel sources\n",
					out, float64(res.Binary.Size)/1e6, res.Binary.SHA256, len(res.Kernels))
				fmt.Fprintln(os.Stderr, res.SubmitHint())
				return nil
			case "switchboard":
				ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
				defer stop()
				res, err := arena.WriteSwitchboard(ctx, out, arena.SwitchboardOptions{SourceRoot: source,
					Device: launch.Device, Version: version})
				if err != nil {
					return err
				}
				if res.Uncommitted > 0 {
					fmt.Fprintf(os.Stderr, "lowbit: warning: %d uncommitted changes in the checkout are not in the submission (it is HEAD): commit them first\n", res.Uncommitted)
				}
				if len(res.NotText) > 0 {
					fmt.Fprintf(os.Stderr, "lowbit: note: %d files are not plain text (data the build embeds), which a reviewer may ask about: %s\n",
						len(res.NotText), strings.Join(res.NotText, ", "))
				}
				fmt.Fprintf(os.Stderr, "wrote %s: %d source files of %.12s, %d vendored modules, switchboard.json\n",
					out, res.Files, res.Revision, res.Modules)
				return nil
			}
			return usageError{fmt.Errorf("--target %q: choose lowbarena or switchboard", target)}
		},
	}
	f := cmd.Flags()
	f.StringVar(&out, "out", "", "output directory, new or empty (required)")
	f.StringVar(&target, "target", "", "lowbarena or switchboard (required)")
	f.StringVar(&binary, "binary", "", "lowbit binary to ship (default: this one); linux/amd64, built with cgo")
	f.StringVar(&source, "source", "", "lowbit source tree for kernel sources and the Switchboard export (default: found from the working directory)")
	f.StringVar(&launch.Device, "device", "cuda", "lowbit serve --device in the scripts: cuda (the evaluations' GPUs), cpu or auto")
	f.IntVar(&launch.MaxNumSeqs, "max-num-seqs", 0, "bake --max-num-seqs into launch.sh (default: lowbit serve's for the device)")
	f.IntVar(&launch.MaxNumBatchedTokens, "max-num-batched-tokens", 0, "bake --max-num-batched-tokens into launch.sh (default: lowbit serve's)")
	f.BoolVar(&launch.PrefixCaching, "prefix-caching", false, "keep prefix caching on (the stock launch.sh turns vLLM's off)")
	f.StringVar(&launch.PrefillActivations, "prefill-activations", "", "lowbit serve --prefill-activations in launch.sh: float32 or bf16 (default: bf16 on cuda, float32 otherwise)")
	f.StringVar(&launch.DecodeActivations, "decode-activations", "", "lowbit serve --decode-activations in launch.sh: float32 or bf16 (default: the prefill activations)")
	cmd.MarkFlagRequired("out")
	cmd.MarkFlagRequired("target")
	cmd.AddCommand(newEngineCheckCmd())
	return cmd
}

func newEngineCheckCmd() *cobra.Command {
	var (
		o     arena.CheckOptions
		keep  bool
		quiet bool
	)
	cmd := &cobra.Command{
		Use:   "check DIR --artifact MODEL",
		Short: "Start an engine directory as LowBArena does and report every breach of its contract",
		Long: `check starts DIR's launch.sh serve as LowBArena would: from a read-only copy,
in its own process group, with only the arena's variables and a private $HOME,
the artifact in a read-only directory, and as the unprivileged user nobody when
run as root. It probes /health, /v1/models, /v1/completions with
prompt_logprobs (the KL probe's input) and streaming, /v1/chat/completions and a
prompt longer than MAX_MODEL_LEN; checks that the server listens on
127.0.0.1:$PORT only, was exec'd by launch.sh, stops with its process group on
SIGTERM and leaves the artifact unchanged; then starts it again with another
PORT, SERVED_NAME and MAX_MODEL_LEN. It exits 1 when anything breaks the
contract.`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.EngineDir = args[0]
			o.KeepWorkDir = keep
			if !quiet {
				o.Log = os.Stderr
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			rep, err := arena.Check(ctx, o)
			if err != nil {
				return err
			}
			fmt.Print(rep)
			if rep.WorkDir != "" {
				fmt.Fprintln(os.Stderr, "server logs and staged directories kept in", rep.WorkDir)
			}
			if n := rep.Violations(); n > 0 {
				return fmt.Errorf("engine check: %d contract violations", n)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.Artifact, "artifact", "", "the checkpoint to serve, as ARTIFACT (required)")
	f.StringVar(&o.Tokenizer, "tokenizer", "", "the source model's tokenizer directory, as TOKENIZER (default: the artifact)")
	f.StringVar(&o.GenerationConfig, "generation-config", "", "the source model's directory, as GENERATION_CONFIG (default: the artifact)")
	f.StringVar(&o.KVCacheDType, "kv-cache-dtype", "auto", "KV_CACHE_DTYPE: auto or fp8")
	f.StringVar(&o.GPUMemoryUtilization, "gpu-memory-utilization", "0.90", "GPU_MEMORY_UTILIZATION")
	f.BoolVar(&o.LanguageModelOnly, "language-model-only", false, "set LANGUAGE_MODEL_ONLY=1")
	f.IntVar(&o.MaxModelLen, "max-model-len", 0, "MAX_MODEL_LEN on the first start, halved on the second (default: 32768, or the model's limit if smaller)")
	f.DurationVar(&o.StartTimeout, "start-timeout", 10*time.Minute, "how long a start may take to answer /health")
	f.DurationVar(&o.RequestTimeout, "request-timeout", 5*time.Minute, "how long each probe may take")
	f.BoolVar(&keep, "keep", false, "keep the staged directories and the server logs")
	f.BoolVar(&quiet, "quiet", false, "no progress lines")
	cmd.MarkFlagRequired("artifact")
	return cmd
}
