package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/lowbit-ai/lowbit/checkpoint/hub"
)

func newPushCmd() *cobra.Command {
	var (
		repo, endpoint string
		o              hub.PushOptions
		card           hub.CardOptions
		kl             float64
		noDelete       bool
		quiet          bool
	)
	cmd := &cobra.Command{
		Use:   "push --repo OWNER/NAME [--revision main] [--private] DIR",
		Short: "Upload a directory to the Hugging Face Hub as one commit and print its sha",
		Long: `push commits DIR's files to a Hugging Face Hub model repository (made if
missing, private with --private) as one commit, and prints the commit's sha on
stdout: an evaluation such as LowBArena needs that exact revision.

Large files go to the Hub's storage first (LFS, in parts for big ones, with a
progress bar); the commit is made only when all are uploaded, so a push that
fails leaves the repository as it was, and pushing again uploads only what the
Hub does not hold yet. The commit holds exactly DIR's files: files on the
branch that DIR lacks are deleted (--no-delete keeps them). Unchanged files are
not sent, and a push that changes nothing makes no commit and prints the
current sha.

When DIR is a checkpoint without a README.md, push writes a model card: the
scheme, KV-cache dtype and unquantized layers read from the checkpoint, and
--base-model, --method (how it was made) and --kl where given.

The token comes from HF_TOKEN, else from the file hf auth login writes
(HF_TOKEN_PATH, $HF_HOME/token or ~/.cache/huggingface/token). --endpoint (or
HF_ENDPOINT) points at a mirror.`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.Dir = args[0]
			var err error
			if o.Repo, err = hub.ParseRepoID(repo); err != nil {
				return usageError{err}
			}
			token, source, err := hub.FindToken()
			if err != nil {
				return err
			}
			c, err := hub.NewClient(endpoint, token, source)
			if err != nil {
				return usageError{err}
			}
			c.UserAgent = "lowbit/" + version
			o.Delete = !noDelete
			o.Log = os.Stderr
			if !quiet {
				o.Progress = os.Stderr
			}
			if cmd.Flags().Changed("kl") {
				card.KL = &kl
			}
			if _, err := os.Stat(filepath.Join(o.Dir, "README.md")); errors.Is(err, fs.ErrNotExist) {
				if _, err := os.Stat(filepath.Join(o.Dir, "config.json")); err == nil {
					card.Repo, card.Version = o.Repo, version
					b, err := hub.ModelCard(o.Dir, card)
					if err != nil {
						return err
					}
					o.Extra = map[string][]byte{"README.md": b}
				} else if card.KL != nil || card.Method != "" || card.BaseModel != "" {
					return usageError{fmt.Errorf("--kl, --method and --base-model go into a model card, and %s is no checkpoint (no config.json)", o.Dir)}
				}
			} else if card.KL != nil || card.Method != "" || card.BaseModel != "" {
				fmt.Fprintf(os.Stderr, "lowbit: note: %s has a README.md, which is pushed as it is; --kl, --method and --base-model are not used\n", o.Dir)
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			res, err := hub.Push(ctx, c, o)
			if err != nil {
				return err
			}
			if !res.Unchanged {
				fmt.Fprintf(os.Stderr, "committed %d changed files (%d large files uploaded, %.2f GB; %d on the Hub already), %d unchanged, %d deleted: %s\n",
					len(res.Changed), res.Uploaded, float64(res.UploadedBytes)/1e9, res.AlreadyStored, len(res.Unmodified), len(res.Deleted), res.CommitURL)
			}
			fmt.Println(res.Commit)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&repo, "repo", "", "the model repository, OWNER/NAME (required)")
	f.StringVar(&o.Revision, "revision", "main", "the branch to commit to (made from the default branch if missing)")
	f.BoolVar(&o.Private, "private", false, "make the repository private if push creates it")
	f.StringVar(&endpoint, "endpoint", "", "the Hub's URL, for a mirror (default: $HF_ENDPOINT or https://huggingface.co)")
	f.StringVar(&o.Message, "message", "", "the commit message")
	f.BoolVar(&noDelete, "no-delete", false, "keep files on the branch that DIR does not hold")
	f.StringVar(&card.BaseModel, "base-model", "", "model card: the repository quantized, such as Qwen/Qwen3-8B")
	f.StringVar(&card.Method, "method", "", "model card: how the checkpoint was made (commands, calibration data)")
	f.Float64Var(&kl, "kl", 0, "model card: measured KL(BF16 || this) in nats per token")
	f.StringVar(&card.KLData, "kl-data", "", "model card: how the KL was measured (prompts, tokens)")
	f.IntVar(&o.Workers, "workers", 4, "files uploaded at once")
	f.BoolVar(&quiet, "quiet", false, "no progress bars")
	cmd.MarkFlagRequired("repo")
	return cmd
}
