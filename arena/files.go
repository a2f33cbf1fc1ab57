package arena

import (
	"archive/tar"
	"bufio"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// modulePath is lowbit's module, which FindSourceRoot looks for.
const modulePath = "github.com/lowbit-ai/lowbit"

// FindSourceRoot returns the root of the lowbit source tree that holds dir
// (the directory with lowbit's go.mod), or "" if dir is not inside one.
func FindSourceRoot(dir string) string {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return ""
	}
	for {
		if f, err := os.Open(filepath.Join(dir, "go.mod")); err == nil {
			sc := bufio.NewScanner(f)
			for sc.Scan() {
				if strings.TrimSpace(sc.Text()) == "module "+modulePath {
					f.Close()
					return dir
				}
			}
			f.Close()
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return ""
		}
		dir = parent
	}
}

// kernelExts are the kernel source files an engine directory carries.
var kernelExts = []string{".c", ".h", ".cu", ".cuh"}

// copyKernelSources copies root/kernels' C and CUDA sources to dst/kernels
// and returns their paths relative to dst.
func copyKernelSources(root, dst string) ([]string, error) {
	var copied []string
	src := filepath.Join(root, "kernels")
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if d.Name() == "testdata" {
				return filepath.SkipDir
			}
			return nil
		}
		if !slices.Contains(kernelExts, filepath.Ext(p)) {
			return nil
		}
		rel, _ := filepath.Rel(root, p)
		if err := copyFile(p, filepath.Join(dst, rel), 0o644); err != nil {
			return err
		}
		copied = append(copied, filepath.ToSlash(rel))
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("arena: copy kernel sources: %w", err)
	}
	return copied, nil
}

func copyFile(src, dst string, perm fs.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	if err := out.Chmod(perm); err != nil { // exactly perm, whatever the umask
		out.Close()
		return err
	}
	return out.Close()
}

// errOutputNotEmpty is returned for an output directory that holds files.
var errOutputNotEmpty = errors.New("output directory is not empty; choose a new directory")

// buildDir makes the directory out by filling a temporary sibling and
// renaming it into place, so out never holds half an engine. out must not
// exist or be empty.
func buildDir(out string, fill func(tmp string) error) error {
	entries, err := os.ReadDir(out)
	existsEmpty := err == nil && len(entries) == 0
	switch {
	case err == nil && len(entries) > 0:
		return fmt.Errorf("arena: %s: %w", out, errOutputNotEmpty)
	case err != nil && !errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("arena: %w", err)
	}
	parent := filepath.Dir(filepath.Clean(out))
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return fmt.Errorf("arena: %w", err)
	}
	tmp, err := os.MkdirTemp(parent, "."+filepath.Base(out)+".tmp-")
	if err != nil {
		return fmt.Errorf("arena: %w", err)
	}
	ok := false
	defer func() {
		if !ok {
			os.RemoveAll(tmp)
		}
	}()
	if err := os.Chmod(tmp, 0o755); err != nil {
		return fmt.Errorf("arena: %w", err)
	}
	if err := fill(tmp); err != nil {
		return err
	}
	if existsEmpty {
		os.Remove(out) // an empty directory gives way
	}
	if err := os.Rename(tmp, out); err != nil {
		return fmt.Errorf("arena: %w", err)
	}
	ok = true
	return nil
}

// tarGzSize is the size of dir as the gzipped tar LowBArena's inline form
// takes (tar -C dir -cz .).
func tarGzSize(dir string) (int64, error) {
	var n countWriter
	zw := gzip.NewWriter(&n)
	tw := tar.NewWriter(zw)
	if err := tw.AddFS(os.DirFS(dir)); err != nil {
		return 0, fmt.Errorf("arena: size of %s: %w", dir, err)
	}
	if err := tw.Close(); err != nil {
		return 0, err
	}
	if err := zw.Close(); err != nil {
		return 0, err
	}
	return int64(n), nil
}

type countWriter int64

func (c *countWriter) Write(p []byte) (int, error) {
	*c += countWriter(len(p))
	return len(p), nil
}
