package main

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/lowbit-ai/lowbit/bench"
	"github.com/lowbit-ai/lowbit/internal/qwen3tok"
	"github.com/lowbit-ai/lowbit/tokenizer"
)

func newBenchCmd() *cobra.Command {
	var (
		url, workload, tokDir, model, out, plotDir, levels, rate, backend string
		scale                                                             float64
		seed                                                              uint64
		ignoreEOS, quiet                                                  bool
		warmups                                                           int
		readyTimeout                                                      time.Duration
		rp                                                                = bench.DefaultRandom()
	)
	var names []string
	for _, w := range bench.Workloads() {
		names = append(names, fmt.Sprintf("  %-24s %s", w[0], w[1]))
	}
	cmd := &cobra.Command{
		Use:   "bench --url URL --workload NAME",
		Short: "Replay the arenas' traffic against an OpenAI-compatible server and measure it as vLLM's benchmark does",
		Long: `bench sends a workload's requests to a running OpenAI-compatible server (lowbit
serve, vllm serve, SGLang, ...) as streamed /v1/completions and
/v1/chat/completions requests, and reports vLLM's metrics: TTFT, TPOT, ITL and
end-to-end latency percentiles, request, output and total token throughput,
peak concurrency and errors. Prompts are token-exact with the real tokenizer
(Qwen3's unless --tokenizer). The results (every request, and the workload's
definition) go to --out as JSON; "lowbit bench compare" scores one results
file against another by the arenas' rules.

Workloads:
` + strings.Join(names, "\n") + `

--scale shrinks every count and length (0.01 makes a CPU-sized miniature).
The random workload takes vLLM's flags (--random-input-len, --num-prompts,
--max-concurrency, --request-rate, ...).`,
		Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, args []string) error {
			f := cmd.Flags()
			if url == "" || workload == "" {
				return usageError{fmt.Errorf("--url and --workload are required")}
			}
			tok, tokName, err := benchTokenizer(tokDir)
			if err != nil {
				return err
			}
			spec := bench.Spec{Name: workload, Scale: scale, Seed: seed}
			if levels != "" {
				for _, s := range strings.Split(levels, ",") {
					l, err := strconv.Atoi(strings.TrimSpace(s))
					if err != nil {
						return usageError{fmt.Errorf("--levels %q: want comma-separated user counts, e.g. 1,5,16", levels)}
					}
					spec.Levels = append(spec.Levels, l)
				}
			}
			if f.Changed("ignore-eos") {
				spec.IgnoreEOS = &ignoreEOS
			}
			randomFlags := []string{"random-input-len", "input-len", "random-output-len", "output-len", "random-range-ratio",
				"random-prefix-len", "num-prompts", "max-concurrency", "request-rate", "burstiness", "backend"}
			if workload == "random" {
				if rp.RequestRate, err = parseRate(rate); err != nil {
					return usageError{err}
				}
				switch backend {
				case "openai":
					rp.Endpoint = bench.Completions
				case "openai-chat":
					rp.Endpoint = bench.Chat
				default:
					return usageError{fmt.Errorf("--backend %q: want openai (/v1/completions) or openai-chat (/v1/chat/completions)", backend)}
				}
				spec.Random = &rp
			} else {
				for _, name := range randomFlags {
					if f.Changed(name) {
						return usageError{fmt.Errorf("--%s applies to --workload random; the arena workloads fix their own shape", name)}
					}
				}
			}
			w, err := bench.Build(spec, tok)
			if err != nil {
				return usageError{err}
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			o := bench.Options{URL: url, Model: model, Tokenizer: tok, TokenizerName: tokName,
				ReadyTimeout: readyTimeout, Warmups: warmups}
			if !quiet {
				o.Progress = os.Stderr
			}
			res, err := bench.Run(ctx, w, o)
			if err != nil {
				return err
			}
			if out == "" {
				out = "bench-" + workload + ".json"
			}
			if err := bench.WriteResult(out, res); err != nil {
				return err
			}
			if err := bench.WriteReport(os.Stdout, res); err != nil {
				return err
			}
			fmt.Fprintln(os.Stderr, "lowbit: wrote", out)
			if plotDir != "" {
				paths, err := bench.WritePlots(plotDir, []bench.Named{{Name: filepath.Base(out), Result: res}})
				if err != nil {
					return err
				}
				fmt.Fprintln(os.Stderr, "lowbit: wrote", strings.Join(paths, ", "))
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&url, "url", "", "the server's base URL, e.g. http://127.0.0.1:8000 (required)")
	f.StringVar(&workload, "workload", "", "what to replay (required; see above)")
	f.StringVar(&tokDir, "tokenizer", "", "directory with the model's tokenizer.json (default: Qwen3's, built in)")
	f.Float64Var(&scale, "scale", 1, "multiply every request count and length by this (e.g. 0.01 for a CPU server)")
	f.Uint64Var(&seed, "seed", 0, "seed of the prompts, lengths and arrivals")
	f.StringVar(&levels, "levels", "", "Switchboard load levels, concurrent users (default 1,5,16)")
	f.BoolVar(&ignoreEOS, "ignore-eos", false, "override the workload's ignore_eos (default: Switchboard and FlagOS fix output lengths; LowBArena and random end at EOS)")
	f.StringVar(&model, "model", "", "model name in requests (default: the first of GET /v1/models)")
	f.StringVar(&out, "out", "", "results file (default bench-WORKLOAD.json)")
	f.StringVar(&plotDir, "plot-dir", "", "also write throughput.png and ttft_cdf.png here")
	f.IntVar(&warmups, "num-warmups", 0, "warmup requests before measuring")
	f.DurationVar(&readyTimeout, "ready-check-timeout", 10*time.Minute, "how long to retry the first request while the server starts")
	f.BoolVar(&quiet, "quiet", false, "no progress bar")
	f.IntVar(&rp.InputLen, "random-input-len", rp.InputLen, "random: prompt tokens")
	f.IntVar(&rp.InputLen, "input-len", rp.InputLen, "random: same as --random-input-len")
	f.IntVar(&rp.OutputLen, "random-output-len", rp.OutputLen, "random: tokens to generate")
	f.IntVar(&rp.OutputLen, "output-len", rp.OutputLen, "random: same as --random-output-len")
	f.Float64Var(&rp.RangeRatio, "random-range-ratio", 0, "random: lengths drawn from [L(1-r), L(1+r)]")
	f.IntVar(&rp.PrefixLen, "random-prefix-len", 0, "random: tokens of a prefix every prompt shares")
	f.IntVar(&rp.NumPrompts, "num-prompts", rp.NumPrompts, "random: number of requests")
	f.IntVar(&rp.MaxConcurrency, "max-concurrency", 0, "random: most requests in flight (0: no cap)")
	f.StringVar(&rate, "request-rate", "inf", "random: requests per second, or inf to send all at once")
	f.Float64Var(&rp.Burstiness, "burstiness", 1, "random: gamma shape of the gaps between requests (1: Poisson)")
	f.StringVar(&backend, "backend", "openai", "random: openai (/v1/completions) or openai-chat (/v1/chat/completions)")
	cmd.AddCommand(newBenchCompareCmd())
	return cmd
}

func newBenchCompareCmd() *cobra.Command {
	var (
		asJSON  bool
		plotDir string
	)
	cmd := &cobra.Command{
		Use:   "compare BASELINE.json CANDIDATE.json",
		Short: "Score a candidate's bench results against a baseline's by the arenas' rules",
		Long: `compare recomputes both runs' metrics from their records (they must have
replayed the same workload, scale and seed) and prints, per phase, the
candidate's output throughput over the baseline's and the p90 TTFT of each
kind of traffic, then:

  Switchboard: the throughput ratio, cut where the candidate's p90 TTFT in a
    kind of traffic exceeds 1.5x the baseline's, combined over load levels;
  LowBArena: its speed term s (geometric mean of throughput ratios), the
    speed gate, the generated-length change and its gate;
  FlagOS: the performance score of the total-token throughput gain.`,
		Args: exactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			base, err := bench.ReadResult(args[0])
			if err != nil {
				return err
			}
			cand, err := bench.ReadResult(args[1])
			if err != nil {
				return err
			}
			c, err := bench.Compare(base, cand, args[0], args[1])
			if err != nil {
				return err
			}
			if asJSON {
				data, err := json.MarshalIndent(c, "", "  ")
				if err != nil {
					return err
				}
				fmt.Println(string(data))
			} else if err := bench.WriteComparison(os.Stdout, c); err != nil {
				return err
			}
			if plotDir != "" {
				paths, err := bench.WritePlots(plotDir, []bench.Named{{Name: filepath.Base(args[0]), Result: base}, {Name: filepath.Base(args[1]), Result: cand}})
				if err != nil {
					return err
				}
				fmt.Fprintln(os.Stderr, "lowbit: wrote", strings.Join(paths, ", "))
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the comparison as JSON")
	cmd.Flags().StringVar(&plotDir, "plot-dir", "", "write throughput.png and ttft_cdf.png of both runs here")
	return cmd
}

// parseRate reads --request-rate: "inf" (0 in the spec) or a positive
// number of requests per second.
func parseRate(s string) (float64, error) {
	r, err := strconv.ParseFloat(s, 64)
	if err != nil || r <= 0 || math.IsNaN(r) {
		return 0, fmt.Errorf("--request-rate %q: want a positive number of requests per second, or inf", s)
	}
	if math.IsInf(r, 1) {
		return 0, nil
	}
	return r, nil
}

// benchTokenizer loads --tokenizer, or the built-in Qwen3 tokenizer.
func benchTokenizer(dir string) (*tokenizer.Tokenizer, string, error) {
	if dir != "" {
		tok, err := tokenizer.LoadDir(dir)
		return tok, dir, err
	}
	files, err := qwen3tok.Files()
	if err != nil {
		return nil, "", err
	}
	tok, err := tokenizer.Load(files["tokenizer.json"])
	if err != nil {
		return nil, "", err
	}
	return tok, "Qwen3 (built in)", tok.SetConfig(files["tokenizer_config.json"])
}
