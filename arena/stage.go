package arena

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
)

// nobody is the unprivileged user (and group) a root check runs engines as.
const nobody = 65534

// staged is the check's work directory: read-only copies of the engine
// directory and the model directories, and a private $HOME.
type staged struct {
	work, engine, artifact, tokenizer, genConfig, home string
	// cred is the user the engine runs as (nil: this process's).
	cred *syscall.Credential
}

// stage lays out the work directory. The engine directory is copied; model
// files are hard-linked where the file system allows (copied otherwise, and
// when they are not readable by others) into directories no one may write,
// as the arena copies the checkpoint to a read-only directory.
func stage(o CheckOptions) (*staged, error) {
	work, err := os.MkdirTemp("", "lowbit-engine-check-")
	if err != nil {
		return nil, fmt.Errorf("arena: %w", err)
	}
	st := &staged{work: work, home: filepath.Join(work, "home")}
	ok := false
	defer func() {
		if !ok {
			st.remove()
		}
	}()
	if err := os.Chmod(work, 0o755); err != nil {
		return nil, fmt.Errorf("arena: %w", err)
	}
	if os.Geteuid() == 0 {
		st.cred = &syscall.Credential{Uid: nobody, Gid: nobody, Groups: []uint32{}}
	}
	st.engine = filepath.Join(work, "engine")
	if err := copyTree(o.EngineDir, st.engine, false); err != nil {
		return nil, fmt.Errorf("arena: stage the engine directory: %w", err)
	}
	dirs := map[string]string{}
	for _, d := range []struct {
		src  string
		dst  *string
		name string
	}{{o.Artifact, &st.artifact, "artifact"}, {o.Tokenizer, &st.tokenizer, "tokenizer"}, {o.GenerationConfig, &st.genConfig, "generation-config"}} {
		abs, err := filepath.Abs(d.src)
		if err != nil {
			return nil, err
		}
		if prev, ok := dirs[abs]; ok {
			*d.dst = prev
			continue
		}
		*d.dst = filepath.Join(work, d.name)
		if err := copyTree(abs, *d.dst, true); err != nil {
			return nil, fmt.Errorf("arena: stage the %s %s: %w", d.name, d.src, err)
		}
		dirs[abs] = *d.dst
	}
	if err := os.MkdirAll(st.home, 0o700); err != nil {
		return nil, err
	}
	if st.cred != nil {
		if err := os.Chown(st.home, nobody, nobody); err != nil {
			return nil, fmt.Errorf("arena: %w", err)
		}
	}
	for _, d := range []string{st.engine, st.artifact, st.tokenizer, st.genConfig} {
		if err := readOnly(d); err != nil {
			return nil, fmt.Errorf("arena: make %s read-only: %w", d, err)
		}
	}
	ok = true
	return st, nil
}

// copyTree copies src to dst. With link, a file that others may read is
// hard-linked instead, or symbolically linked when it is on another file
// system and others may reach it (a checkpoint is too large to copy);
// only the rest is copied.
func copyTree(src, dst string, link bool) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		target := filepath.Join(dst, rel)
		info, err := os.Stat(p) // follows links, as a copy of the files would
		if err != nil {
			return err
		}
		if info.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		if !info.Mode().IsRegular() {
			return nil
		}
		if link && info.Mode().Perm()&0o004 != 0 {
			if os.Link(p, target) == nil {
				return nil
			}
			if abs, err := filepath.Abs(p); err == nil && othersCanReach(abs) && os.Symlink(abs, target) == nil {
				return nil
			}
		}
		perm := fs.FileMode(0o444)
		if info.Mode().Perm()&0o111 != 0 {
			perm = 0o555
		}
		return copyFile(p, target, perm)
	})
}

// othersCanReach reports whether every directory above path lets others
// through.
func othersCanReach(path string) bool {
	for d := filepath.Dir(path); ; d = filepath.Dir(d) {
		st, err := os.Stat(d)
		if err != nil || st.Mode().Perm()&0o001 == 0 {
			return false
		}
		if filepath.Dir(d) == d {
			return true
		}
	}
}

// readOnly takes write permission from every directory under dir (and
// from its copied files), so that the engine can create nothing there.
func readOnly(dir string) error {
	var dirs []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			dirs = append(dirs, p)
		}
		return nil
	})
	if err != nil {
		return err
	}
	// Deepest first, so that a parent is still writable while its child
	// changes.
	sort.Sort(sort.Reverse(sort.StringSlice(dirs)))
	for _, d := range dirs {
		if err := os.Chmod(d, 0o555); err != nil {
			return err
		}
	}
	return nil
}

// remove deletes the work directory, giving write permission back first.
func (st *staged) remove() {
	filepath.WalkDir(st.work, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			os.Chmod(p, 0o755)
		}
		return nil
	})
	os.RemoveAll(st.work)
}

// fileState is what snapshot records of a file.
type fileState struct {
	size  int64
	mtime int64
	mode  fs.FileMode
}

// snapshot records every entry under dir.
func snapshot(dir string) (map[string]fileState, error) {
	out := map[string]fileState{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := os.Stat(p) // through a link, to the file the engine reads
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		out[rel] = fileState{info.Size(), info.ModTime().UnixNano(), info.Mode()}
		return nil
	})
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("arena: %w", err)
	}
	return out, nil
}

// diffSnapshots describes what changed between two snapshots ("" for
// nothing), naming a few paths.
func diffSnapshots(before, after map[string]fileState) string {
	var changes []string
	for p, b := range before {
		a, ok := after[p]
		switch {
		case !ok:
			changes = append(changes, "removed "+p)
		case a != b:
			changes = append(changes, "modified "+p)
		}
	}
	for p := range after {
		if _, ok := before[p]; !ok {
			changes = append(changes, "created "+p)
		}
	}
	sort.Strings(changes)
	if len(changes) > 5 {
		changes = append(changes[:5], fmt.Sprintf("and %d more", len(changes)-5))
	}
	return strings.Join(changes, ", ")
}
