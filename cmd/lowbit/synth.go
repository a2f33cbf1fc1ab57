package main

import (
	"fmt"
	"os"
	"strings"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"

	"github.com/lowbit-ai/lowbit/checkpoint"
	"github.com/lowbit-ai/lowbit/synth"
)

func newSynthCmd() *cobra.Command {
	var (
		arch, size, out, maxShard string
		seed                      uint64
		quiet                     bool
	)
	cmd := &cobra.Command{
		Use:   "synth --arch ARCH [--size SIZE] --out DIR",
		Short: "Write a deterministic synthetic BF16 checkpoint with real config fields and shapes",
		Long: `synth writes a synthetic BF16 checkpoint: the published config.json of a
public model (or, for --size tiny, one cut down from it), the Qwen3 tokenizer,
and weights drawn like a trained model's (N(0, 1/fan_in) with heavy outlier
input channels; norm gains near identity). The same flags give the same bytes.

Sizes by architecture:
` + sizeTable(),
		Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, args []string) error {
			a, err := checkpoint.ParseArch(arch)
			if err != nil {
				return usageError{err}
			}
			shard, err := parseBytes(maxShard)
			if err != nil {
				return usageError{fmt.Errorf("--max-shard-size: %w", err)}
			}
			opts := synth.Options{Arch: a, Size: size, Seed: seed, MaxShardBytes: shard}
			if !quiet {
				var bar *progressbar.ProgressBar
				opts.Progress = func(written, total int64) {
					if bar == nil {
						bar = progressbar.DefaultBytes(total, "writing "+out)
					}
					bar.Set64(written)
				}
			}
			res, err := synth.Write(out, opts)
			if err != nil {
				return err
			}
			fmt.Fprintf(os.Stderr, "wrote %s: %s %s, %d tensors, %.2f GB in %d shard(s)\n",
				res.Dir, a, size, res.Tensors, float64(res.Bytes)/1e9, res.Shards)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&arch, "arch", "", "architecture: qwen3, qwen3_moe, qwen3_5, qwen3_5_moe or llama (required)")
	f.StringVar(&size, "size", synth.Tiny, "size: tiny, or a public model of the architecture (see above)")
	f.Uint64Var(&seed, "seed", 0, "random seed")
	f.StringVar(&out, "out", "", "output directory, new or empty (required)")
	f.StringVar(&maxShard, "max-shard-size", "5GB", "largest shard, e.g. 5GB or 500MB (decimal units, as Hugging Face)")
	f.BoolVar(&quiet, "quiet", false, "no progress bar")
	cmd.MarkFlagRequired("arch")
	cmd.MarkFlagRequired("out")
	return cmd
}

func sizeTable() string {
	var b strings.Builder
	for _, a := range []checkpoint.Arch{checkpoint.Qwen3, checkpoint.Qwen3MoE, checkpoint.Qwen35, checkpoint.Qwen35MoE, checkpoint.Llama} {
		fmt.Fprintf(&b, "  %-12s %s\n", a, strings.Join(synth.Sizes(a), ", "))
	}
	return b.String()
}

// parseBytes reads a size such as "5GB", "500MB", "1.5GiB" or "1048576".
// Decimal units are powers of 1000, as in Hugging Face's max_shard_size.
func parseBytes(s string) (int64, error) {
	units := []struct {
		suffix string
		mult   float64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40}, {"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12}, {"B", 1}}
	mult := 1.0
	num := strings.TrimSpace(s)
	for _, u := range units {
		if strings.HasSuffix(strings.ToUpper(num), strings.ToUpper(u.suffix)) {
			num, mult = strings.TrimSpace(num[:len(num)-len(u.suffix)]), u.mult
			break
		}
	}
	var v float64
	if _, err := fmt.Sscanf(num, "%g", &v); err != nil || v <= 0 {
		return 0, fmt.Errorf("%q is not a positive size such as 5GB", s)
	}
	return int64(v * mult), nil
}
