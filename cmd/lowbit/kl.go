package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"

	"github.com/lowbit-ai/lowbit/kl"
	"github.com/lowbit-ai/lowbit/runtime"
	"github.com/lowbit-ai/lowbit/tokenizer"
)

func newKLCmd() *cobra.Command {
	var (
		refDir, candDir, refURL, candURL, refModel, candModel string
		promptsPath, jsonPath, pngPath, metric, backend       string
		k, sample, worst, concurrency, maxPromptTokens        int
		logitScale                                            float64
		study                                                 []int
		samp                                                  runtime.SamplingOptions
		in                                                    kl.ScoreInputs
		asJSON, quiet                                         bool
	)
	cmd := &cobra.Command{
		Use:   "kl (--ref DIR --cand DIR | --ref-url URL --cand-url URL) [--prompts FILE|builtin]",
		Short: "Measure KL(BF16 ‖ candidate) per token, offline with lowbit's runtime or from two servers' prompt_logprobs",
		Long: `kl measures how far a quantized model's next-token distributions are from its
BF16 original, in nats per token, with a bootstrap 95% interval.

Offline (--ref DIR --cand DIR) runs both checkpoints on the CPU with lowbit's
runtime and sums the full-vocabulary KL in float64; it also reports each
layer's hidden-state NMSE (which layers to keep in BF16) and the three top-k
estimators at -k, so you can see how far an online probe would be off.

Online (--ref-url URL --cand-url URL) asks two vLLM-compatible servers for
/v1/completions prompt_logprobs=k on the same token ids (tokenized by the
reference's /tokenize) and reports three estimators side by side:
  union+tail   KL over both top-k sets plus a tail bucket; a token one side
               does not list counts as probability 0 there, so it
               overestimates when the sets differ
  lower bound  the smallest KL that any two distributions agreeing with
               both servers' dicts can have; never above the true KL
  Δ log-lik    log P(token) - log Q(token) of the actual tokens: unbiased for
               KL only on the reference's own samples (--sample)
The servers must allow -k (vLLM: --max-logprobs, default 20).

--sample N scores the reference's own continuations of N tokens (sampled at
--temperature, default 1, seeded per prompt), as LowBArena's KL probe does;
without it the prompts are scored as given (teacher forcing).

--mem-ratio and --speed-ratio (with --acc-drop and --length-change) add
LowBArena's score estimate: D = 0.79·drop + 0.21·42.8·KL,
LowBScore = √(m·s/max(1, 1+L))·exp(-max(D, 0)/10), gates applied.

Prompt files: .jsonl with one JSON string or {"prompt": text or token ids}
per line, or any other file with one prompt per line; "builtin" is 22
short texts (prose in seven languages, code, JSON, math, public-domain
passages).`,
		Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, args []string) error {
			offline := refDir != "" || candDir != ""
			online := refURL != "" || candURL != ""
			switch {
			case offline == online:
				return usageError{fmt.Errorf("give --ref and --cand (offline) or --ref-url and --cand-url (online)")}
			case offline && (refDir == "" || candDir == ""):
				return usageError{fmt.Errorf("offline needs both --ref and --cand")}
			case online && (refURL == "" || candURL == ""):
				return usageError{fmt.Errorf("online needs both --ref-url and --cand-url")}
			case online && len(study) > 0:
				return usageError{fmt.Errorf("--study compares with the exact KL, which only offline runs have")}
			}
			score := cmd.Flags().Changed("mem-ratio") || cmd.Flags().Changed("speed-ratio") ||
				cmd.Flags().Changed("acc-drop") || cmd.Flags().Changed("length-change")
			if score {
				if err := in.Validate(); err != nil {
					return usageError{err}
				}
			}
			if err := samp.Validate(); err != nil {
				return usageError{err}
			}
			prompts, err := kl.LoadPrompts(promptsPath)
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			progress := func(int) {}
			if !quiet {
				bar := progressbar.Default(int64(len(prompts)), "scoring prompts")
				progress = func(done int) { bar.Set(done) }
			}
			var (
				res    *kl.Result
				decode func([]int) string
				ref    = refDir
				cand   = candDir
			)
			if offline {
				res, decode, err = runOfflineKL(ctx, refDir, candDir, backend, prompts, maxPromptTokens, kl.OfflineOptions{
					SampleTokens: sample, Sampling: samp, K: k, StudyK: study, LogitScale: logitScale, Progress: progress})
			} else {
				ref, cand = refURL, candURL
				res, err = kl.Online(ctx, &kl.Client{URL: refURL, Model: refModel}, &kl.Client{URL: candURL, Model: candModel}, prompts,
					kl.OnlineOptions{K: k, SampleTokens: sample, Sampling: samp, Concurrency: concurrency, MaxPromptTokens: maxPromptTokens, Progress: progress})
			}
			if err != nil {
				return err
			}
			rep, err := kl.Summarize(res, kl.ReportOptions{Ref: ref, Cand: cand, Worst: worst, Primary: metric, Decode: decode})
			if err != nil {
				return err
			}
			if score {
				s := rep.Union
				switch rep.Primary {
				case kl.MetricKL:
					s = *rep.KL
				case kl.MetricLower:
					s = rep.Lower
				case kl.MetricDelta:
					s = rep.Delta
				}
				if rep.Score, err = kl.NewScore(s.Mean, s.Lo, s.Hi, in); err != nil {
					return err
				}
			}
			if pngPath != "" {
				if err := rep.WriteHistogramPNG(pngPath); err != nil {
					return err
				}
				if len(rep.Layers) > 0 {
					lp := strings.TrimSuffix(pngPath, ".png") + ".layers.png"
					if err := rep.WriteLayersPNG(lp); err != nil {
						return err
					}
					fmt.Fprintf(os.Stderr, "wrote %s and %s\n", pngPath, lp)
				} else {
					fmt.Fprintf(os.Stderr, "wrote %s\n", pngPath)
				}
			}
			if jsonPath != "" {
				f, err := os.Create(jsonPath)
				if err != nil {
					return err
				}
				if err := rep.WriteJSON(f); err != nil {
					f.Close()
					return err
				}
				if err := f.Close(); err != nil {
					return err
				}
			}
			if asJSON {
				return rep.WriteJSON(os.Stdout)
			}
			return rep.WriteText(os.Stdout)
		},
	}
	f := cmd.Flags()
	f.StringVar(&refDir, "ref", "", "offline: the BF16 reference checkpoint directory")
	f.StringVar(&candDir, "cand", "", "offline: the candidate (quantized) checkpoint directory")
	f.StringVar(&refURL, "ref-url", "", "online: the reference server's base URL, e.g. http://127.0.0.1:8000")
	f.StringVar(&candURL, "cand-url", "", "online: the candidate server's base URL")
	f.StringVar(&refModel, "ref-model", "", "online: the reference's served model name (default: the first of /v1/models)")
	f.StringVar(&candModel, "cand-model", "", "online: the candidate's served model name (default: the first of /v1/models)")
	f.StringVar(&promptsPath, "prompts", "builtin", "prompts: a .jsonl file, a text file with one prompt per line, or builtin")
	f.IntVarP(&k, "top-k", "k", 20, "prompt_logprobs k of the top-k estimators (online -1: the whole vocabulary)")
	f.IntVar(&maxPromptTokens, "max-prompt-tokens", 0, "cut each prompt to this many tokens (0: no limit)")
	f.IntVar(&sample, "sample", 0, "score N tokens sampled from the reference after each prompt instead of the prompts themselves")
	f.Float64Var(&samp.Temperature, "temperature", 1, "--sample: temperature (1 samples the reference's own distribution)")
	f.Float64Var(&samp.TopP, "top-p", 0, "--sample: top-p (0 or 1: off)")
	f.IntVar(&samp.TopK, "sample-top-k", 0, "--sample: top-k (0: off)")
	f.Float64Var(&samp.MinP, "min-p", 0, "--sample: min-p (0: off)")
	f.Uint64Var(&samp.Seed, "seed", 0, "--sample: seed of the first prompt (prompt i uses seed+i)")
	f.IntSliceVar(&study, "study", nil, "offline: also compare the estimators with the exact KL at these k (e.g. 1,5,20,100,1000)")
	f.StringVar(&metric, "metric", "", "what ranks the worst positions, fills the histogram and enters the score: kl (offline default), union_tail (online default), lower_bound or delta_ll")
	f.IntVar(&worst, "worst", 10, "how many of the worst positions to list")
	f.BoolVar(&asJSON, "json", false, "print the report as JSON instead of text")
	f.StringVar(&jsonPath, "json-out", "", "also write the JSON report to this file")
	f.StringVar(&pngPath, "png", "", "write a histogram of the per-token values to this PNG (offline also NAME.layers.png)")
	f.IntVar(&concurrency, "concurrency", 4, "online: prompts in flight")
	f.StringVar(&backend, "backend", "auto", "offline kernels: cpu, ref (plain Go, slow), or auto (cpu when built with cgo)")
	f.Float64Var(&in.AccDrop, "acc-drop", 0, "score: mean accuracy drop against BF16, in points")
	f.Float64Var(&in.Memory, "mem-ratio", 1, "score: m, BF16's peak memory over the candidate's")
	f.Float64Var(&in.Speed, "speed-ratio", 1, "score: s, the candidate's throughput over BF16's")
	f.Float64Var(&in.Length, "length-change", 0, "score: L, (candidate's generated length - BF16's) / BF16's")
	f.BoolVar(&quiet, "quiet", false, "no progress bar")
	f.Float64Var(&logitScale, "logit-scale", 1, "offline: multiply both models' logits by this before the softmax (estimator studies on flat synthetic models)")
	f.MarkHidden("logit-scale")
	return cmd
}

// runOfflineKL loads both checkpoints and runs kl.Offline on the prompts,
// tokenized with the reference's tokenizer (cut to maxTokens when > 0). It
// returns a decoder for the report's token texts.
func runOfflineKL(ctx context.Context, refDir, candDir, backend string, prompts []kl.Prompt, maxTokens int, opts kl.OfflineOptions) (*kl.Result, func([]int) string, error) {
	ops, err := openBackend(backend)
	if err != nil {
		return nil, nil, err
	}
	tok, err := tokenizer.LoadDir(refDir)
	if err != nil {
		return nil, nil, err
	}
	if opts.SampleTokens > 0 {
		gen, err := runtime.ReadGenerationConfig(refDir)
		if err != nil {
			return nil, nil, err
		}
		opts.StopIDs = gen.StopIDs
	}
	ids := make([][]int, len(prompts))
	for i, p := range prompts {
		ids[i] = p.IDs
		if ids[i] == nil {
			ids[i] = tok.Encode(p.Text)
		}
		if maxTokens > 0 && len(ids[i]) > maxTokens {
			ids[i] = ids[i][:maxTokens]
		}
	}
	ref, err := runtime.Load(refDir, ops)
	if err != nil {
		return nil, nil, err
	}
	defer ref.Close()
	cand, err := runtime.Load(candDir, ops)
	if err != nil {
		return nil, nil, err
	}
	defer cand.Close()
	for _, m := range []*runtime.Model{ref, cand} {
		for _, n := range m.Notes() {
			fmt.Fprintf(os.Stderr, "lowbit: note: %s: %s\n", m.Dir(), n)
		}
	}
	res, err := kl.Offline(ctx, ref, cand, ids, opts)
	return res, func(x []int) string { return tok.Decode(x, false) }, err
}
