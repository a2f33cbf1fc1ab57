package arena

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// argvEngine writes launch.sh beside a bin/lowbit that prints its
// arguments, one per line.
func argvEngine(t *testing.T, o LaunchOptions) string {
	t.Helper()
	dir := t.TempDir()
	script, err := LaunchScript(o, "test")
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "launch.sh"), []byte(script), 0o755)
	os.MkdirAll(filepath.Join(dir, "bin"), 0o755)
	os.WriteFile(filepath.Join(dir, "bin", "lowbit"), []byte("#!/bin/sh\nprintf '%s\\n' \"$@\"\n"), 0o755)
	return dir
}

func runLaunch(t *testing.T, dir string, env map[string]string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command("bash", append([]string{"launch.sh"}, args...)...)
	cmd.Dir = dir
	cmd.Env = []string{"PATH=/usr/bin:/bin"}
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func contractEnv(home string) map[string]string {
	return map[string]string{"ARTIFACT": "/artifact", "TOKENIZER": "/source", "PORT": "8123", "SERVED_NAME": "local",
		"MAX_MODEL_LEN": "32768", "GPU_MEMORY_UTILIZATION": "0.9", "GENERATION_CONFIG": "/source",
		"KV_CACHE_DTYPE": "fp8", "HOME": home}
}

// launch.sh maps the contract to lowbit serve's flags exactly as the stock
// vLLM launch.sh maps it to vllm serve's.
func TestLaunchScriptArguments(t *testing.T) {
	dir := argvEngine(t, LaunchOptions{Device: "cuda"})
	base := []string{"serve", "/artifact", "--tokenizer", "/source", "--served-model-name", "local",
		"--host", "127.0.0.1", "--port", "8123", "--max-model-len", "32768", "--gpu-memory-utilization", "0.9"}
	tail := []string{"--kv-cache-dtype", "fp8", "--no-enable-prefix-caching", "--seed", "0", "--device", "cuda", "--prefill-activations", "bf16", "--decode-activations", "bf16"}
	gen := []string{"--generation-config", "/source"}
	cat := func(parts ...[]string) string {
		var all []string
		for _, p := range parts {
			all = append(all, p...)
		}
		return strings.Join(all, "\n") + "\n"
	}
	for _, tt := range []struct {
		name string
		set  map[string]string
		want string
	}{
		{"the arena's values", nil, cat(base, gen, tail)},
		{"no generation config", map[string]string{"GENERATION_CONFIG": ""}, cat(base, tail)},
		{"language model only", map[string]string{"LANGUAGE_MODEL_ONLY": "1"}, cat(base, gen, tail, []string{"--language-model-only"})},
		{"values with spaces", map[string]string{"ARTIFACT": "/my models/x", "SERVED_NAME": "a b"},
			strings.Replace(strings.Replace(cat(base, gen, tail), "/artifact", "/my models/x", 1), "\nlocal\n", "\na b\n", 1)},
	} {
		env := contractEnv(t.TempDir())
		for k, v := range tt.set {
			env[k] = v
		}
		got, err := runLaunch(t, dir, env, "serve")
		if err != nil || got != tt.want {
			t.Errorf("%s: launch.sh serve ran\n%s(err %v)\nwant\n%s", tt.name, got, err, tt.want)
		}
	}
	for _, v := range []string{"ARTIFACT", "PORT", "SERVED_NAME", "MAX_MODEL_LEN", "KV_CACHE_DTYPE"} {
		env := contractEnv(t.TempDir())
		delete(env, v)
		got, err := runLaunch(t, dir, env, "serve")
		if err == nil || !strings.Contains(got, v+" is not set") {
			t.Errorf("without %s: %v %q: want exit 2 naming it", v, err, got)
		}
	}
	if got, err := runLaunch(t, dir, contractEnv(t.TempDir()), "bench"); err == nil || !strings.Contains(got, "usage: launch.sh serve") {
		t.Errorf("launch.sh bench: %v %q: want usage", err, got)
	}
}

// A download can drop the executable bit; launch.sh then runs a copy from
// $HOME rather than failing.
func TestLaunchScriptWithoutExecutableBit(t *testing.T) {
	dir := argvEngine(t, LaunchOptions{Device: "cpu"})
	os.Chmod(filepath.Join(dir, "bin", "lowbit"), 0o644)
	os.Chmod(dir, 0o555) // read-only, as the arena mounts it
	defer os.Chmod(dir, 0o755)
	home := t.TempDir()
	got, err := runLaunch(t, dir, contractEnv(home), "serve")
	if err != nil || !strings.HasPrefix(got, "serve\n/artifact\n") || !strings.Contains(got, "--device\ncpu\n") {
		t.Fatalf("launch.sh serve with a non-executable binary: %v\n%s", err, got)
	}
	if st, err := os.Stat(filepath.Join(home, ".cache", "lowbit-engine", "lowbit")); err != nil || st.Mode().Perm()&0o100 == 0 {
		t.Errorf("no executable copy in $HOME: %v", err)
	}
}

func TestLaunchOptions(t *testing.T) {
	if _, err := LaunchScript(LaunchOptions{Device: "tpu"}, "x"); err == nil {
		t.Error("device tpu accepted")
	}
	if _, err := LaunchScript(LaunchOptions{Device: "cpu", PrefillActivations: "bf16"}, "x"); err == nil {
		t.Error("bf16 prefill on the CPU accepted")
	}
	if s, err := LaunchScript(LaunchOptions{Device: "cpu"}, "x"); err != nil || !strings.Contains(s, "--device cpu --prefill-activations float32 --decode-activations float32") {
		t.Errorf("the CPU's default activations: %v", err)
	}
	if _, err := LaunchScript(LaunchOptions{PrefillActivations: "float32", DecodeActivations: "bf16"}, "x"); err == nil {
		t.Error("bf16 decode after float32 prefill accepted")
	}
	if s, err := LaunchScript(LaunchOptions{DecodeActivations: "float32"}, "x"); err != nil || !strings.Contains(s, "--prefill-activations bf16 --decode-activations float32") {
		t.Errorf("float32 decode after bf16 prefill: %v", err)
	}
	s, err := LaunchScript(LaunchOptions{MaxNumSeqs: 64, MaxNumBatchedTokens: 4096, PrefixCaching: true}, "x")
	if err != nil || !strings.Contains(s, `"$GPU_MEMORY_UTILIZATION" --max-num-seqs 64 --max-num-batched-tokens 4096 \`) ||
		!strings.Contains(s, "--device cuda --prefill-activations bf16 --decode-activations bf16") ||
		strings.Contains(s, "--no-enable-prefix-caching") {
		t.Errorf("baked settings missing: %v\n%s", err, s)
	}
}

func TestWriteLowBArena(t *testing.T) {
	if _, err := InspectBinary(os.Args[0]); err != nil {
		t.Skipf("the test binary cannot stand in for lowbit: %v", err)
	}
	out := filepath.Join(t.TempDir(), "engine")
	res, err := WriteLowBArena(out, LowBArenaOptions{Binary: os.Args[0], SourceRoot: "..", Version: "v-test"})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"launch.sh", "bin/lowbit", "ENGINE.md", "kernels/cpu/matmul_fp8.c", "kernels/cpu/lbcpu.h"} {
		if _, err := os.Stat(filepath.Join(out, p)); err != nil {
			t.Errorf("the engine directory lacks %s", p)
		}
	}
	if st, _ := os.Stat(filepath.Join(out, "bin", "lowbit")); st == nil || st.Mode().Perm() != 0o755 {
		t.Errorf("bin/lowbit is not 0755")
	}
	readme, _ := os.ReadFile(filepath.Join(out, "ENGINE.md"))
	if !strings.Contains(string(readme), res.Binary.SHA256) || !strings.Contains(string(readme), "--device cuda") {
		t.Errorf("ENGINE.md does not record the binary's sha256 and the device:\n%s", readme)
	}
	if res.TarGzBytes <= 0 || res.InlineChars != (res.TarGzBytes+2)/3*4 {
		t.Errorf("sizes %d, %d", res.TarGzBytes, res.InlineChars)
	}
	if hint := res.SubmitHint(); res.InlineChars > InlineLimit && !strings.Contains(hint, "lowbit push --repo") {
		t.Errorf("a directory over the inline limit gets hint %q", hint)
	}
	// The same directory again: refused, and left as it was.
	if _, err := WriteLowBArena(out, LowBArenaOptions{Binary: os.Args[0], SourceRoot: ".."}); !errors.Is(err, errOutputNotEmpty) {
		t.Errorf("writing into a full directory: %v", err)
	}
	if matches, _ := filepath.Glob(filepath.Join(filepath.Dir(out), ".engine.tmp-*")); len(matches) > 0 {
		t.Errorf("temporary directories left: %v", matches)
	}
	// Binaries that cannot serve are refused with what to do.
	script := filepath.Join(t.TempDir(), "lowbit")
	os.WriteFile(script, []byte("#!/bin/sh\n"), 0o755)
	for _, bin := range []string{script, filepath.Join(t.TempDir(), "missing")} {
		_, err := WriteLowBArena(filepath.Join(t.TempDir(), "e"), LowBArenaOptions{Binary: bin})
		if err == nil {
			t.Errorf("binary %s accepted", bin)
		}
	}
	_, err = WriteLowBArena(filepath.Join(t.TempDir(), "e"), LowBArenaOptions{Binary: script})
	if err == nil || !strings.Contains(err.Error(), "CGO_ENABLED=1 GOOS=linux GOARCH=amd64 go build") {
		t.Errorf("a shell script as the binary: %v: want how to build one", err)
	}
}

func TestMissingServeFlags(t *testing.T) {
	missing, noLMO := missingServeFlags(append([]string{"help"}, serveFlagsUsed...))
	if len(missing) != 0 || !noLMO {
		t.Errorf("all flags but --language-model-only: missing %v, no LMO %v", missing, noLMO)
	}
	missing, _ = missingServeFlags([]string{"port", "host"})
	if len(missing) != len(serveFlagsUsed)-2 || !strings.HasPrefix(missing[0], "--") {
		t.Errorf("missing %v", missing)
	}
}

// The Switchboard directory builds offline from its own source.
func TestWriteSwitchboard(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("no git")
	}
	root := FindSourceRoot(".")
	if root == "" {
		t.Fatal("the test does not run inside the lowbit source tree")
	}
	if err := exec.Command("git", "-C", root, "rev-parse", "HEAD").Run(); err != nil {
		t.Skip("the source tree is not a git checkout with a commit")
	}
	out := filepath.Join(t.TempDir(), "sb")
	res, err := WriteSwitchboard(context.Background(), out, SwitchboardOptions{SourceRoot: root, Version: "sb-test"})
	if err != nil {
		t.Fatal(err)
	}
	var manifest struct {
		Build struct {
			Command []string `json:"command"`
			Network bool     `json:"network"`
		} `json:"build"`
		Start struct {
			Command []string `json:"command"`
		} `json:"start"`
		Port   int    `json:"port"`
		Health string `json:"health"`
		Source struct {
			Revision string `json:"revision"`
		} `json:"source"`
	}
	b, err := os.ReadFile(filepath.Join(out, "switchboard.json"))
	if err != nil || json.Unmarshal(b, &manifest) != nil || manifest.Port != 30000 || manifest.Health != "/health" ||
		manifest.Build.Network || manifest.Source.Revision != res.Revision || len(manifest.Start.Command) == 0 {
		t.Fatalf("switchboard.json: %v\n%s", err, b)
	}
	for _, p := range []string{"go.mod", "cmd/lowbit/main.go", "kernels/cpu/matmul.c", "vendor/modules.txt", "SWITCHBOARD.md"} {
		if _, err := os.Stat(filepath.Join(out, p)); err != nil {
			t.Errorf("the submission lacks %s", p)
		}
	}
	filepath.Walk(out, func(p string, info os.FileInfo, err error) error {
		if err == nil && (strings.HasSuffix(p, "_test.go") && !strings.Contains(p, "/vendor/") || info.Name() == "testdata" && !strings.Contains(p, "/vendor/")) {
			t.Errorf("tests were exported: %s", p)
		}
		return nil
	})
	if !contains(res.NotText, "internal/qwen3tok/tokenizer.json.gz") {
		t.Errorf("the compressed tokenizer is not reported as not text: %v", res.NotText)
	}
	// Build it as Switchboard would: no module cache, no proxy.
	cmd := exec.Command("bash", filepath.Join(out, "switchboard", "build.sh"))
	gocache, _ := exec.Command("go", "env", "GOCACHE").Output()
	cmd.Env = append(os.Environ(), "GOMODCACHE="+t.TempDir(), "GOPROXY=off", "GOFLAGS=", "GOCACHE="+strings.TrimSpace(string(gocache)))
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build.sh failed offline: %v\n%s", err, b)
	}
	if b, err := exec.Command(filepath.Join(out, "bin", "lowbit"), "--version").CombinedOutput(); err != nil ||
		!strings.Contains(string(b), "sb-test") {
		t.Errorf("the built binary: %v %s", err, b)
	}
}

// The engine lowbit writes, with the real lowbit and a real (tiny) model,
// passes the check: the end-to-end test of both commands.
func TestCheckRealLowbit(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "lowbit")
	build := exec.Command("go", "build", "-o", bin, modulePath+"/cmd/lowbit")
	build.Env = append(os.Environ(), "CGO_ENABLED=1")
	if b, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/lowbit: %v\n%s", err, b)
	}
	if b, err := exec.Command(bin, "serve", "--help").CombinedOutput(); err != nil {
		t.Skipf("waits for `lowbit serve` (cmd/lowbit/serve.go, being wired now): %s", tail(b, 200))
	}
	model := filepath.Join(t.TempDir(), "tiny")
	if b, err := exec.Command(bin, "synth", "--arch", "qwen3", "--out", model, "--quiet").CombinedOutput(); err != nil {
		t.Fatalf("lowbit synth: %v\n%s", err, b)
	}
	os.Chmod(filepath.Dir(model), 0o755)
	out := filepath.Join(t.TempDir(), "engine")
	res, err := WriteLowBArena(out, LowBArenaOptions{Binary: bin, SourceRoot: "..", Launch: LaunchOptions{Device: "cpu"}, Version: "test"})
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range res.Warnings {
		t.Log("warning:", w)
	}
	rep, err := Check(context.Background(), CheckOptions{EngineDir: out, Artifact: model, MaxModelLen: 512})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("report:\n%s", rep)
	if rep.Violations() != 0 {
		t.Errorf("%d violations", rep.Violations())
	}
}
