package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"

	"github.com/lowbit-ai/lowbit/calibrate"
	"github.com/lowbit-ai/lowbit/runtime"
	"github.com/lowbit-ai/lowbit/tokenizer"
)

func newCalibrateCmd() *cobra.Command {
	var (
		model, data, out, backend, workDir, hessianMem string
		samples, seqLen                                int
		hessian, quiet                                 bool
		every                                          time.Duration
	)
	cmd := &cobra.Command{
		Use:   "calibrate --model DIR --out STATS",
		Short: "Record activation, KV-cache and GPTQ statistics of a BF16 model for quantize --calib",
		Long: `calibrate runs calibration text through a BF16 Qwen3 or Llama checkpoint on the
CPU and writes, per linear layer, the input's max |x| (static FP8 input_scale,
NVFP4 input_global_scale), per-channel max and mean |x|, and with --hessian the
GPTQ Hessian Σ x xᵀ; per attention layer, max |k| and |v| as they enter the
KV cache (k_scale, v_scale). quantize --calib STATS reads the file.

--data is "builtin" (short documents shipped with lowbit), a .jsonl file with
a "text" string per line (one sample each, truncated to --seq-len), or a text
file (packed into windows of --seq-len tokens).

An interrupted run (Ctrl-C, or a crash after the last save) resumes when the
same command is run again; its state is kept in --work-dir. With --hessian
the layers are calibrated in passes whose Hessians fit --hessian-memory.`,
		Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, args []string) error {
			if samples < 1 || seqLen < 1 {
				return usageError{fmt.Errorf("--samples %d and --seq-len %d must be at least 1", samples, seqLen)}
			}
			budget, err := parseBytes(hessianMem)
			if err != nil {
				return usageError{fmt.Errorf("--hessian-memory: %w", err)}
			}
			ops, err := openBackend(backend)
			if err != nil {
				return err
			}
			docs, err := calibrate.ReadDocuments(data)
			if err != nil {
				return err
			}
			tok, err := tokenizer.LoadDir(model)
			if err != nil {
				return err
			}
			encode := func(s string) []int {
				return tok.EncodeWith(s, tokenizer.EncodeOptions{AddSpecial: false, ParseSpecial: true})
			}
			ids, err := calibrate.Samples(docs, encode, samples, seqLen)
			if err != nil {
				return err
			}
			if len(ids) < samples {
				fmt.Fprintf(os.Stderr, "lowbit: note: %s gives %d samples, fewer than --samples %d; using them all\n", docs.Name, len(ids), samples)
			}
			m, err := runtime.Load(model, ops)
			if err != nil {
				return err
			}
			defer m.Close()
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			opts := calibrate.Options{Hessian: hessian, HessianBudget: budget, WorkDir: workDir, CheckpointEvery: every,
				Dataset: docs.Name, CreatedBy: "lowbit " + version}
			var bar *progressbar.ProgressBar
			if !quiet {
				opts.Progress = func(done, total int64) {
					if bar == nil {
						bar = progressbar.NewOptions64(total, progressbar.OptionSetDescription("calibrating "+out),
							progressbar.OptionSetItsString("tokens"), progressbar.OptionShowIts(), progressbar.OptionShowCount(),
							progressbar.OptionSetWriter(os.Stderr), progressbar.OptionThrottle(100*time.Millisecond),
							progressbar.OptionOnCompletion(func() { fmt.Fprintln(os.Stderr) }))
					}
					bar.Set64(done)
				}
			}
			res, err := calibrate.Run(ctx, m, ids, out, opts)
			if err != nil {
				return err
			}
			resumed := ""
			if res.ResumedPass > 0 || res.ResumedSample > 0 {
				resumed = fmt.Sprintf(", resumed at pass %d sample %d", res.ResumedPass+1, res.ResumedSample)
			}
			fmt.Fprintf(os.Stderr, "wrote %s: %d samples, %d tokens (longest %d) of %s on %s, %d pass(es) of %d layer(s)%s\n",
				out, res.Meta.Samples, res.Meta.Tokens, res.Meta.SeqLen, docs.Name, ops.Name(), res.Passes, res.LayersPerPass, resumed)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&model, "model", "", "BF16 model directory: config.json, safetensors, tokenizer.json (required)")
	f.StringVar(&data, "data", calibrate.Builtin, `calibration text: "builtin", a .jsonl file ({"text": ...} per line) or a text file`)
	f.IntVar(&samples, "samples", 512, "most samples to run")
	f.IntVar(&seqLen, "seq-len", 2048, "most tokens per sample")
	f.StringVar(&out, "out", "", "statistics file to write; must not exist (required)")
	f.BoolVar(&hessian, "hessian", false, "also collect GPTQ Hessians (needed by quantize --method gptq; 8·in² bytes per layer input)")
	f.StringVar(&hessianMem, "hessian-memory", "4GiB", "most Hessian memory per pass; more layers than fit take more passes over the data")
	f.StringVar(&workDir, "work-dir", "", "where an interrupted run keeps its state (default: OUT.partial)")
	f.DurationVar(&every, "checkpoint-every", 5*time.Minute, "how often to save progress (0: after every sample)")
	f.StringVar(&backend, "backend", "auto", "kernels: cpu, ref (plain Go, slow), or auto (cpu when built with cgo)")
	f.BoolVar(&quiet, "quiet", false, "no progress bar")
	cmd.MarkFlagRequired("model")
	cmd.MarkFlagRequired("out")
	return cmd
}
