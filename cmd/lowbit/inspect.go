package main

import (
	"encoding/json"
	"os"

	"github.com/spf13/cobra"

	"github.com/lowbit-ai/lowbit/checkpoint"
)

func newInspectCmd() *cobra.Command {
	var tensors, asJSON bool
	cmd := &cobra.Command{
		Use:   "inspect PATH",
		Short: "Summarize a checkpoint (model directory or .safetensors file) from its headers",
		Long: `inspect reads a Hugging Face model directory or one .safetensors file and
prints its architecture, quantization scheme, files and totals per dtype. It
reads headers and JSON files only, so it takes milliseconds on any size.`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			s, err := checkpoint.Inspect(args[0], tensors)
			if err != nil {
				return err
			}
			if asJSON {
				enc := json.NewEncoder(os.Stdout)
				enc.SetIndent("", "  ")
				return enc.Encode(s)
			}
			return s.WriteText(os.Stdout)
		},
	}
	cmd.Flags().BoolVar(&tensors, "tensors", false, "list every tensor: name, dtype, shape, bytes, file")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON instead of text")
	return cmd
}

// exactArgs is cobra.ExactArgs with the error marked as a usage error.
func exactArgs(n int) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if err := cobra.ExactArgs(n)(cmd, args); err != nil {
			return usageError{err}
		}
		return nil
	}
}
