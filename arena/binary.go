package arena

import (
	"context"
	"crypto/sha256"
	"debug/buildinfo"
	"debug/elf"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"
)

// BinaryInfo describes a lowbit binary for an engine directory.
type BinaryInfo struct {
	Path             string
	Size             int64
	SHA256           string
	GOOS, GOARCH     string
	CGO              bool
	GoVersion        string
	MainPath         string // the main package's import path
	Revision         string // vcs.revision, if built in a checkout
	Modified         bool   // vcs.modified: built from uncommitted changes
	GLIBC            string // the newest GLIBC_x.y symbol version it needs
	ServeFlags       []string
	ServeFlagsListed bool // whether ServeFlags came from running `serve --help` here
}

// glibcLimit is the C library of the oldest image the engine is meant for:
// LowBArena's vLLM image is built on Ubuntu 22.04 (glibc 2.35).
const glibcLimit = "2.35"

// InspectBinary reads a binary's ELF header and Go build information and,
// where it can run here, the flags its `serve` command lists. It fails when
// the binary is not a linux/amd64 Go program built with cgo, since without
// cgo lowbit has no kernels to run a model with.
func InspectBinary(path string) (*BinaryInfo, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("arena: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("arena: %w", err)
	}
	info := &BinaryInfo{Path: path, Size: st.Size()}
	build := "build one with: CGO_ENABLED=1 GOOS=linux GOARCH=amd64 go build -o lowbit ./cmd/lowbit, and pass --binary"
	ef, err := elf.NewFile(f)
	if err != nil {
		return nil, fmt.Errorf("arena: %s is not a Linux (ELF) executable: %v; %s", path, err, build)
	}
	if ef.Class != elf.ELFCLASS64 || ef.Machine != elf.EM_X86_64 {
		return nil, fmt.Errorf("arena: %s is built for %v %v, not linux/amd64; %s", path, ef.Class, ef.Machine, build)
	}
	info.GLIBC = newestGLIBC(ef)
	bi, err := buildinfo.Read(f)
	if err != nil {
		return nil, fmt.Errorf("arena: %s is not a Go program with build information: %v; %s", path, err, build)
	}
	info.GoVersion, info.MainPath = bi.GoVersion, bi.Path
	for _, s := range bi.Settings {
		switch s.Key {
		case "GOOS":
			info.GOOS = s.Value
		case "GOARCH":
			info.GOARCH = s.Value
		case "CGO_ENABLED":
			info.CGO = s.Value == "1"
		case "vcs.revision":
			info.Revision = s.Value
		case "vcs.modified":
			info.Modified = s.Value == "true"
		}
	}
	if info.GOOS != "linux" || info.GOARCH != "amd64" {
		return nil, fmt.Errorf("arena: %s is built for %s/%s, not linux/amd64; %s", path, info.GOOS, info.GOARCH, build)
	}
	if !info.CGO {
		return nil, fmt.Errorf("arena: %s was built with CGO_ENABLED=0, so it has no kernels to run a model with; %s", path, build)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return nil, err
	}
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return nil, fmt.Errorf("arena: read %s: %w", path, err)
	}
	info.SHA256 = hex.EncodeToString(h.Sum(nil))
	if runtime.GOOS == "linux" && runtime.GOARCH == "amd64" {
		flags, err := serveFlags(path)
		if err != nil {
			return nil, err
		}
		info.ServeFlags, info.ServeFlagsListed = flags, true
	}
	return info, nil
}

var flagRe = regexp.MustCompile(`(?m)^\s+(?:-\w, )?--([a-z0-9][a-z0-9-]*)`)

// serveFlags runs `path serve --help` and returns the flags it lists.
func serveFlags(path string) ([]string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, path, "serve", "--help").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--port") {
		return nil, fmt.Errorf("arena: %s serve --help failed (%v): this lowbit has no `serve` command; "+
			"build lowbit from a commit that has it\n%s", path, err, tail(out, 600))
	}
	var flags []string
	for _, m := range flagRe.FindAllStringSubmatch(string(out), -1) {
		flags = append(flags, m[1])
	}
	slices.Sort(flags)
	return slices.Compact(flags), nil
}

// newestGLIBC returns the newest GLIBC_x.y version f needs, or "" for a
// static binary.
func newestGLIBC(f *elf.File) string {
	needs, err := f.DynamicVersionNeeds()
	if err != nil {
		return ""
	}
	best := ""
	for _, n := range needs {
		for _, d := range n.Needs {
			if v, ok := strings.CutPrefix(d.Dep, "GLIBC_"); ok && versionLess(best, v) {
				best = v
			}
		}
	}
	return best
}

// versionLess compares dotted versions numerically ("" is the least).
func versionLess(a, b string) bool {
	if a == "" {
		return b != ""
	}
	as, bs := strings.Split(a, "."), strings.Split(b, ".")
	for i := 0; i < max(len(as), len(bs)); i++ {
		var x, y int
		if i < len(as) {
			x, _ = strconv.Atoi(as[i])
		}
		if i < len(bs) {
			y, _ = strconv.Atoi(bs[i])
		}
		if x != y {
			return x < y
		}
	}
	return false
}

func tail(b []byte, n int) string {
	s := strings.TrimSpace(string(b))
	if len(s) > n {
		s = "..." + s[len(s)-n:]
	}
	return s
}
