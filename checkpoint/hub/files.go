package hub

import (
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
)

// localFile is one file to push.
type localFile struct {
	// Path is the file's path in the repository (slash-separated); Abs its
	// path here, or "" for generated content (Content).
	Path, Abs string
	Size      int64
	Sample    []byte // the first 512 bytes
	Content   []byte // generated files only
	SHA256    string // hex; set by hashing large files
}

// sampleSize is how much of a file the preupload endpoint sees.
const sampleSize = 512

// listFiles returns the regular files under dir (following symbolic
// links to files), sorted by path, leaving out what huggingface_hub's
// upload leaves out (.git/ and .cache/huggingface/) and the temporary files
// an interrupted atomic write leaves (.NAME.tmp-*), which it reports in
// skipped.
func listFiles(dir string) (files []*localFile, skipped []string, err error) {
	st, err := os.Stat(dir)
	if err != nil {
		return nil, nil, fmt.Errorf("hub: %w", err)
	}
	if !st.IsDir() {
		return nil, nil, fmt.Errorf("hub: %s is not a directory: push takes the directory that holds the files", dir)
	}
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if rel == ".git" || rel == ".cache/huggingface" {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasPrefix(d.Name(), ".") && strings.Contains(d.Name(), ".tmp-") {
			skipped = append(skipped, rel)
			return nil
		}
		info, err := os.Stat(p) // follows a link
		if err != nil {
			return err
		}
		if !info.Mode().IsRegular() {
			skipped = append(skipped, rel)
			return nil
		}
		if err := validRepoPath(rel); err != nil {
			return err
		}
		files = append(files, &localFile{Path: rel, Abs: p, Size: info.Size()})
		return nil
	})
	if err != nil {
		return nil, nil, fmt.Errorf("hub: list %s: %w", dir, err)
	}
	slices.SortFunc(files, func(a, b *localFile) int { return strings.Compare(a.Path, b.Path) })
	return files, skipped, nil
}

// validRepoPath refuses paths the Hub refuses.
func validRepoPath(p string) error {
	if p == "" || strings.HasPrefix(p, "/") || path.Clean(p) != p || p == ".." || strings.HasPrefix(p, "../") {
		return fmt.Errorf("hub: %q is not a valid path in a repository", p)
	}
	return nil
}

// readSample fills lf.Sample.
func (lf *localFile) readSample() error {
	if lf.Abs == "" {
		lf.Sample = lf.Content[:min(len(lf.Content), sampleSize)]
		return nil
	}
	f, err := os.Open(lf.Abs)
	if err != nil {
		return fmt.Errorf("hub: %w", err)
	}
	defer f.Close()
	buf := make([]byte, sampleSize)
	n, err := io.ReadFull(f, buf)
	if err != nil && err != io.ErrUnexpectedEOF && err != io.EOF {
		return fmt.Errorf("hub: read %s: %w", lf.Abs, err)
	}
	lf.Sample = buf[:n]
	return nil
}

// content returns a regular file's bytes (these are small: the Hub sends
// large files to LFS).
func (lf *localFile) content() ([]byte, error) {
	if lf.Abs == "" {
		return lf.Content, nil
	}
	b, err := os.ReadFile(lf.Abs)
	if err != nil {
		return nil, fmt.Errorf("hub: %w", err)
	}
	if int64(len(b)) != lf.Size {
		return nil, fmt.Errorf("hub: %s changed size during the push (%d bytes, then %d): push again when nothing writes to it",
			lf.Abs, lf.Size, len(b))
	}
	return b, nil
}

// hash sets lf.SHA256, counting bytes read into cnt.
func (lf *localFile) hash(cnt *counter) error {
	h := sha256.New()
	if lf.Abs == "" {
		h.Write(lf.Content)
		cnt.count(int64(len(lf.Content)))
	} else {
		f, err := os.Open(lf.Abs)
		if err != nil {
			return fmt.Errorf("hub: %w", err)
		}
		defer f.Close()
		n, err := io.Copy(h, &countingReader{f, cnt})
		if err != nil {
			return fmt.Errorf("hub: hash %s: %w", lf.Abs, err)
		}
		if n != lf.Size {
			return fmt.Errorf("hub: %s changed size during the push (%d bytes, then %d): push again when nothing writes to it",
				lf.Abs, lf.Size, n)
		}
	}
	lf.SHA256 = hex.EncodeToString(h.Sum(nil))
	return nil
}

type countingReader struct {
	r io.Reader
	c *counter
}

func (r *countingReader) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	r.c.count(int64(n))
	return n, err
}

// gitBlobSHA1 is git's object id of a blob, which the Hub reports for
// regular files.
func gitBlobSHA1(b []byte) string {
	h := sha1.New()
	fmt.Fprintf(h, "blob %d\x00", len(b))
	h.Write(b)
	return hex.EncodeToString(h.Sum(nil))
}
