package main

import (
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"

	"github.com/lowbit-ai/lowbit/calibrate/stats"
	"github.com/lowbit-ai/lowbit/checkpoint"
	"github.com/lowbit-ai/lowbit/quantize"
)

func newQuantizeCmd() *cobra.Command {
	var (
		model, out, scheme, formatName, kvDType, calib, maxShard string
		method                                                   string
		ignore                                                   []string
		kvScaleOne, linearAttn, dryRun, quiet                    bool
	)
	cmd := &cobra.Command{
		Use:   "quantize --model DIR --scheme SCHEME --out DIR",
		Short: "Write an FP8 or NVFP4 checkpoint that vLLM and SGLang load unchanged",
		Long: `quantize reads a BF16 Hugging Face checkpoint and writes a quantized one in
the compressed-tensors (default) or NVIDIA ModelOpt layout.

Schemes:
  fp8-dynamic  FP8 weights, per-channel scales; activations per token at run time
  fp8          FP8 weights and activations, static per-tensor scales (needs --calib)
  fp8-block    FP8 weights in 128x128 blocks; activations in 1x128 groups at run time
  nvfp4        FP4 weights and activations in groups of 16 (needs --calib)
  nvfp4a16     FP4 weights in groups of 16; 16-bit activations

Embeddings, lm_head, norms, MoE routers, the shared-expert gate, Gated DeltaNet
conv1d/A_log/dt_bias, the vision tower and MTP are never quantized; with NVFP4,
Qwen3.5's Gated DeltaNet projections stay in BF16 unless --quantize-linear-attn.`,
		Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts := quantize.Options{Ignore: ignore, KVScaleOne: kvScaleOne, QuantizeLinearAttn: linearAttn}
			var err error
			if opts.Scheme, err = quantize.ParseScheme(scheme); err != nil {
				return usageError{err}
			}
			if opts.Format, err = quantize.ParseFormat(formatName); err != nil {
				return usageError{err}
			}
			if opts.Method, err = quantize.ParseMethod(method); err != nil {
				return usageError{err}
			}
			switch kvDType {
			case "auto":
			case "fp8":
				opts.KVCacheFP8 = true
			default:
				return usageError{fmt.Errorf("--kv-cache-dtype %q: choose auto or fp8", kvDType)}
			}
			shard, err := parseBytes(maxShard)
			if err != nil {
				return usageError{fmt.Errorf("--max-shard-size: %w", err)}
			}
			if calib != "" {
				s, err := stats.Open(calib)
				if err != nil {
					return err
				}
				defer s.Close()
				opts.Stats = s
			}
			m, err := checkpoint.OpenModel(model)
			if err != nil {
				return err
			}
			defer m.Close()
			cfgJSON, err := os.ReadFile(filepath.Join(model, checkpoint.ConfigFileName))
			if err != nil {
				return fmt.Errorf("quantize: %w", err)
			}
			plan, err := quantize.NewPlan(m.Inventory(), cfgJSON, opts)
			if err != nil {
				return err
			}
			if dryRun {
				return plan.WriteText(os.Stdout)
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			wopts := quantize.WriteOptions{MaxShardBytes: shard, Warn: func(msg string) { fmt.Fprintln(os.Stderr, "\nlowbit: warning:", msg) }}
			if !quiet {
				bar := progressbar.DefaultBytes(plan.BytesOut, "quantizing to "+out)
				wopts.Progress = func(written, _ int64) { bar.Set64(written) }
			}
			if err := quantize.Write(ctx, m, plan, out, wopts); err != nil {
				return err
			}
			fmt.Fprintf(os.Stderr, "wrote %s: %s (%s), %d modules quantized, %.3f GB -> %.3f GB\n",
				out, opts.Scheme, opts.Format, len(plan.Quantized), float64(plan.BytesIn)/1e9, float64(plan.BytesOut)/1e9)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&model, "model", "", "BF16 model directory (required)")
	f.StringVar(&scheme, "scheme", "", "fp8-dynamic, fp8, fp8-block, nvfp4 or nvfp4a16 (required)")
	f.StringVar(&out, "out", "", "output directory, new or empty (required unless --dry-run)")
	f.StringVar(&formatName, "format", "compressed-tensors", "compressed-tensors or modelopt")
	f.StringVar(&kvDType, "kv-cache-dtype", "auto", "auto (model dtype) or fp8 (writes k/v scales from --calib)")
	f.StringVar(&calib, "calib", "", "calibration statistics from lowbit calibrate")
	f.StringVar(&method, "method", "rtn", "weight rounding: rtn, mse (clipping search) or gptq (needs --calib from calibrate --hessian)")
	f.BoolVar(&kvScaleOne, "kv-scale-one", false, "with --kv-cache-dtype fp8 and no statistics, accept k/v scales of 1.0")
	f.StringArrayVar(&ignore, "ignore", nil, "keep a module in BF16: its name, or re:REGEX (repeatable)")
	f.BoolVar(&linearAttn, "quantize-linear-attn", false, "quantize Qwen3.5 Gated DeltaNet projections with NVFP4 too")
	f.BoolVar(&dryRun, "dry-run", false, "print the plan (tensor, action, bytes before and after) and write nothing")
	f.StringVar(&maxShard, "max-shard-size", "5GB", "largest output shard")
	f.BoolVar(&quiet, "quiet", false, "no progress bar")
	cmd.MarkFlagRequired("model")
	cmd.MarkFlagRequired("scheme")
	cmd.PreRunE = func(cmd *cobra.Command, args []string) error {
		if out == "" && !dryRun {
			return usageError{fmt.Errorf("--out is required unless --dry-run")}
		}
		return nil
	}
	return cmd
}
