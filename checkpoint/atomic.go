package checkpoint

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"sync/atomic"
	"syscall"
)

// skipSync, set only by tests, skips the fsync calls, which on a busy disk
// dominate the time to write small test files. Everything else (temporary
// files, renames, cleanup) behaves the same.
var skipSync atomic.Bool

// WriteFileAtomic writes data to path so that path holds either its old
// contents or all of data, never a mix, even if the process is killed or the
// machine loses power: it writes a temporary file in the same directory
// (".<name>.tmp-<random>"), syncs and closes it, sets perm on it (exactly,
// without the umask), renames it over path, and syncs the directory. On error
// the temporary file is removed. Errors name path.
func WriteFileAtomic(path string, data []byte, perm fs.FileMode) error {
	return writeAtomic(path, perm, func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	})
}

// writeAtomic is WriteFileAtomic with the contents streamed by fill.
func writeAtomic(path string, perm fs.FileMode, fill func(w io.Writer) error) error {
	dir, name := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	tmp, err := createTemp(dir, name)
	if err != nil {
		return fmt.Errorf("checkpoint: write %s: %w", path, err)
	}
	ok := false
	defer func() {
		if !ok {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if err := fill(tmp); err != nil {
		return fmt.Errorf("checkpoint: write %s: %w", path, err)
	}
	if err := finishTemp(tmp, perm); err != nil {
		return fmt.Errorf("checkpoint: write %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("checkpoint: write %s: %w", path, err)
	}
	ok = true
	if err := syncDir(dir); err != nil {
		return fmt.Errorf("checkpoint: write %s: %w", path, err)
	}
	return nil
}

// createTemp creates the temporary file for name in dir: hidden, and named
// after its destination so a leftover one is easy to attribute.
func createTemp(dir, name string) (*os.File, error) {
	return os.CreateTemp(dir, "."+name+".tmp-*")
}

// finishTemp sets perm on a fully written temporary file, syncs it to stable
// storage and closes it. The file is closed whatever happens.
func finishTemp(f *os.File, perm fs.FileMode) error {
	err := f.Chmod(perm)
	if err == nil && !skipSync.Load() {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// syncDir makes the renames and removals in dir durable. Platforms and file
// systems that cannot sync a directory are taken at their word.
func syncDir(dir string) error {
	if runtime.GOOS == "windows" || skipSync.Load() {
		return nil
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	if errors.Is(err, syscall.EINVAL) || errors.Is(err, errors.ErrUnsupported) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("sync directory %s: %w", dir, err)
	}
	return nil
}

// ErrOutputNotEmpty is returned by NewOutputDir for a directory that already
// holds files.
var ErrOutputNotEmpty = errors.New("output directory is not empty; choose a new directory")

// NewOutputDir makes dir for a new checkpoint, refusing one that already
// holds files: writers never overwrite or mix into an existing checkpoint.
func NewOutputDir(dir string) error {
	entries, err := os.ReadDir(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("checkpoint: %w", err)
		}
		return nil
	case err != nil:
		return fmt.Errorf("checkpoint: %w", err)
	case len(entries) > 0:
		return fmt.Errorf("checkpoint: %s: %w", dir, ErrOutputNotEmpty)
	}
	return nil
}
