package arena

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"unicode/utf8"
)

// SwitchboardOptions say how to make a Switchboard submission directory.
type SwitchboardOptions struct {
	// SourceRoot is the lowbit git checkout to export ("" finds it from the
	// working directory).
	SourceRoot string
	// Device is lowbit serve's --device in start.sh (cuda when "").
	Device string
	// Port is where start.sh serves by default (30000, SGLang's, when 0).
	Port int
	// Version is lowbit's version, linked into the binary build.sh makes.
	Version string
}

// SwitchboardResult says what a Switchboard directory holds.
type SwitchboardResult struct {
	Dir string
	// Revision is the commit exported; Uncommitted counts the changes in
	// the checkout that are therefore not in it.
	Revision    string
	Uncommitted int
	// Files counts the exported source files; Modules the vendored
	// dependencies.
	Files, Modules int
	// NotText lists files that are not plain UTF-8 text (data the build
	// embeds), which a reviewer of "readable source" will ask about.
	NotText []string
}

// WriteSwitchboard writes a Switchboard submission to out (which must not
// exist or be empty): the source at HEAD of the checkout as plain files,
// without tests and test data, its Go dependencies vendored, build and
// start scripts, switchboard.json and SWITCHBOARD.md.
func WriteSwitchboard(ctx context.Context, out string, o SwitchboardOptions) (*SwitchboardResult, error) {
	if o.Device == "" {
		o.Device = "cuda"
	}
	if o.Device != "cuda" && o.Device != "cpu" {
		return nil, fmt.Errorf("arena: device %q: choose cuda or cpu", o.Device)
	}
	if o.Port == 0 {
		o.Port = 30000
	}
	root := o.SourceRoot
	if root == "" {
		wd, _ := os.Getwd()
		if root = FindSourceRoot(wd); root == "" {
			return nil, errors.New("arena: Switchboard takes source, and there is no lowbit checkout here: " +
				"run lowbit engine from a git checkout of lowbit, or pass --source DIR")
		}
	}
	gitOut := func(args ...string) ([]byte, error) {
		cmd := exec.CommandContext(ctx, "git", append([]string{"-C", root}, args...)...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		b, err := cmd.Output()
		if err != nil {
			return nil, fmt.Errorf("arena: git %s in %s: %v: %s; the Switchboard target exports the source with git, "+
				"so run it in a git checkout of lowbit with at least one commit", args[0], root, err, strings.TrimSpace(stderr.String()))
		}
		return b, nil
	}
	rev, err := gitOut("rev-parse", "HEAD")
	if err != nil {
		return nil, err
	}
	res := &SwitchboardResult{Dir: out, Revision: strings.TrimSpace(string(rev))}
	status, err := gitOut("status", "--porcelain")
	if err != nil {
		return nil, err
	}
	if s := strings.TrimSpace(string(status)); s != "" {
		res.Uncommitted = strings.Count(s, "\n") + 1
	}
	archive, err := gitOut("archive", "--format=tar", "HEAD")
	if err != nil {
		return nil, err
	}
	err = buildDir(out, func(tmp string) error {
		if res.Files, err = unpackSource(bytes.NewReader(archive), tmp); err != nil {
			return err
		}
		if res.Modules, err = vendor(ctx, tmp); err != nil {
			return err
		}
		if err := writeSwitchboardFiles(tmp, res, o); err != nil {
			return err
		}
		res.NotText, err = notText(tmp)
		return err
	})
	if err != nil {
		return nil, err
	}
	return res, nil
}

// leftOut reports whether an exported path stays out of the submission:
// tests and their data, which the build does not need and which hold the
// binary fixtures Switchboard does not accept.
func leftOut(p string) bool {
	return strings.HasSuffix(p, "_test.go") || p == "testdata" || strings.HasPrefix(p, "testdata/") ||
		strings.Contains(p, "/testdata/")
}

// unpackSource writes a tar's regular files under dir and counts them.
func unpackSource(r io.Reader, dir string) (int, error) {
	tr := tar.NewReader(r)
	n := 0
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return n, nil
		}
		if err != nil {
			return n, fmt.Errorf("arena: read git archive: %w", err)
		}
		name := filepath.Clean(h.Name)
		if h.Typeflag != tar.TypeReg || leftOut(filepath.ToSlash(name)) {
			continue
		}
		if !filepath.IsLocal(name) {
			return n, fmt.Errorf("arena: git archive holds %q, outside the tree", h.Name)
		}
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return n, err
		}
		perm := fs.FileMode(0o644)
		if h.Mode&0o111 != 0 {
			perm = 0o755
		}
		f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
		if err != nil {
			return n, err
		}
		if _, err := io.Copy(f, tr); err != nil {
			f.Close()
			return n, err
		}
		if err := f.Close(); err != nil {
			return n, err
		}
		n++
	}
}

// vendor copies the module's dependencies into dir/vendor from the module
// cache, offline, and returns how many modules it copied.
func vendor(ctx context.Context, dir string) (int, error) {
	goCmd, err := exec.LookPath("go")
	if err != nil {
		goCmd = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	cmd := exec.CommandContext(ctx, goCmd, "mod", "vendor")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off", "GOTOOLCHAIN=local")
	if b, err := cmd.CombinedOutput(); err != nil {
		return 0, fmt.Errorf("arena: go mod vendor failed: %v\n%s\n"+
			"it needs the module cache or the module proxy: run `go mod download` in the checkout", err, tail(b, 800))
	}
	b, err := os.ReadFile(filepath.Join(dir, "vendor", "modules.txt"))
	if err != nil {
		return 0, nil // no dependencies
	}
	n := 0
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "# ") && !strings.Contains(line, "=>") {
			n++
		}
	}
	return n, nil
}

// notText lists the files under dir that are not plain UTF-8 text.
func notText(dir string) ([]string, error) {
	var out []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if bytes.IndexByte(b, 0) >= 0 || !utf8.Valid(b) {
			rel, _ := filepath.Rel(dir, p)
			out = append(out, filepath.ToSlash(rel))
		}
		return nil
	})
	return out, err
}

func writeSwitchboardFiles(dir string, res *SwitchboardResult, o SwitchboardOptions) error {
	r := strings.NewReplacer("@VERSION@", o.Version, "@DEVICE@", o.Device, "@PORT@", fmt.Sprint(o.Port))
	files := map[string]string{
		"switchboard/build.sh": r.Replace(buildScript),
		"switchboard/start.sh": r.Replace(startScript),
		"SWITCHBOARD.md":       r.Replace(switchboardReadme),
	}
	manifest := map[string]any{
		"schema": "lowbit-assumed-1",
		"about": "Switchboard asks for readable source and a switchboard.json that says how to build and start it; " +
			"it has not published the file's schema, so these fields are lowbit's assumption (SWITCHBOARD.md)",
		"build": map[string]any{"command": []string{"bash", "switchboard/build.sh"}, "network": false, "output": "bin/lowbit"},
		"start": map[string]any{"command": []string{"bash", "switchboard/start.sh"},
			"env": map[string]string{"MODEL_PATH": "the model directory (read-only); required",
				"PORT": fmt.Sprint(o.Port), "SERVED_NAME": "optional; the model directory's name when unset",
				"MAX_MODEL_LEN": "optional; the model's when unset"}},
		"port":   o.Port,
		"health": "/health",
		"api":    []string{"/v1/completions", "/v1/chat/completions", "/v1/models"},
		"source": map[string]string{"module": modulePath, "revision": res.Revision},
	}
	b, err := json.MarshalIndent(manifest, "", "  ")
	if err != nil {
		return err
	}
	files["switchboard.json"] = string(b) + "\n"
	for name, content := range files {
		perm := fs.FileMode(0o644)
		if strings.HasSuffix(name, ".sh") {
			perm = 0o755
		}
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, []byte(content), perm); err != nil {
			return err
		}
	}
	return nil
}

const buildScript = `#!/usr/bin/env bash
# Builds bin/lowbit from this source without the network: every Go
# dependency is in vendor/. Needs the Go toolchain named by go.mod's go line
# and a C compiler (the CPU kernels are C, built through cgo; the CUDA
# kernels are compiled at run time by NVRTC).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export GOFLAGS=-mod=vendor GOPROXY=off GOTOOLCHAIN=local GOWORK=off CGO_ENABLED=1
export GOCACHE="${GOCACHE:-$PWD/.cache/go-build}"
go version
go build -trimpath -ldflags "-X main.version=@VERSION@" -o bin/lowbit ./cmd/lowbit
echo "built bin/lowbit"
`

const startScript = `#!/usr/bin/env bash
# Starts the server switchboard/build.sh built, on 127.0.0.1:$PORT, with
# vLLM's OpenAI API (/health, /v1/models, /v1/completions,
# /v1/chat/completions). Switchboard has not published its environment, so
# this is assumed: MODEL_PATH (required), PORT, SERVED_NAME, MAX_MODEL_LEN.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
: "${MODEL_PATH:?MODEL_PATH is not set: the directory of the model's weights}"
exec "$here/../bin/lowbit" serve "$MODEL_PATH" \
  --host 127.0.0.1 --port "${PORT:-@PORT@}" \
  --served-model-name "${SERVED_NAME:-$(basename "$MODEL_PATH")}" \
  ${MAX_MODEL_LEN:+--max-model-len "$MAX_MODEL_LEN"} \
  --device @DEVICE@
`

const switchboardReadme = `# Switchboard submission: lowbit @VERSION@

This directory is lowbit's source as committed, written by
` + "`lowbit engine --target switchboard`" + `, with:

- ` + "`vendor/`" + `: the Go dependencies, as ` + "`go mod vendor`" + ` copies them, so the build needs no network;
- ` + "`switchboard/build.sh`" + `: builds ` + "`bin/lowbit`" + ` offline (Go and a C compiler; no CUDA toolkit);
- ` + "`switchboard/start.sh`" + `: starts ` + "`bin/lowbit serve`" + ` on 127.0.0.1 with --device @DEVICE@;
- ` + "`switchboard.json`" + `: how to build and start it.

Tests and test data are left out: the build needs neither, and the test data
holds binary fixtures.

## What follows Switchboard's text and what is assumed

From the text: readable source and a switchboard.json that says how to build
and start the server; builds run offline from a pinned image; the server runs
as an unprivileged user, without network access, with read-only weights.

Assumed, because the text does not say:

- the schema of switchboard.json (build and start commands as argument
  lists, the port, the health path);
- the start environment: MODEL_PATH for the weights, PORT (default @PORT@,
  SGLang's), SERVED_NAME, MAX_MODEL_LEN;
- that the server binds 127.0.0.1 and is probed at /health;
- that the pinned image has the Go toolchain go.mod names and a C compiler.
  If it has not, Switchboard's rule against binaries leaves no way to bring
  one, and this target cannot build there.
`
