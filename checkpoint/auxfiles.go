package checkpoint

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
)

// auxFileNames are the files besides config.json and the weights that a
// converted checkpoint carries over from its source: tokenizer, chat template
// and generation defaults.
var auxFileNames = []string{
	"tokenizer.json",
	"tokenizer_config.json",
	"special_tokens_map.json",
	"vocab.json",
	"merges.txt",
	"added_tokens.json",
	"generation_config.json",
	"chat_template.jinja",
	"chat_template.json",
	"preprocessor_config.json",
}

// AuxFileNames returns the names CopyAuxFiles looks for, in the order it
// copies them. config.json is not among them: the writer's caller writes it.
func AuxFileNames() []string { return slices.Clone(auxFileNames) }

// CopyAuxFiles copies into dstDir whichever of AuxFileNames exist in srcDir
// (following symbolic links, as a Hugging Face cache snapshot holds them),
// each atomically (see WriteFileAtomic) with permissions 0644, and returns the
// names copied, in AuxFileNames order. A name that exists but is not a regular
// file is an error. On error, files already copied stay.
func CopyAuxFiles(srcDir, dstDir string) ([]string, error) {
	var copied []string
	for _, name := range auxFileNames {
		src := filepath.Join(srcDir, name)
		in, err := os.Open(src)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return copied, fmt.Errorf("checkpoint: copy %s: %w", name, err)
		}
		err = copyOne(in, src, filepath.Join(dstDir, name))
		in.Close()
		if err != nil {
			return copied, err
		}
		copied = append(copied, name)
	}
	return copied, nil
}

func copyOne(in *os.File, src, dst string) error {
	st, err := in.Stat()
	if err != nil {
		return fmt.Errorf("checkpoint: copy %s: %w", src, err)
	}
	if !st.Mode().IsRegular() {
		return fmt.Errorf("checkpoint: copy %s: not a regular file (%v)", src, st.Mode().Type())
	}
	return writeAtomic(dst, 0o644, func(w io.Writer) error {
		if _, err := io.Copy(w, in); err != nil {
			return fmt.Errorf("copy from %s: %w", src, err)
		}
		return nil
	})
}
