package arena

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// fakeArtifact is a model directory as far as Check reads one.
func fakeArtifact(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	os.Chmod(dir, 0o755)
	os.WriteFile(filepath.Join(dir, "config.json"), []byte(`{"max_position_embeddings": 64, "vocab_size": 1000}`), 0o644)
	os.WriteFile(filepath.Join(dir, "model.safetensors"), []byte("weights"), 0o644)
	return dir
}

// fakeEngine writes a LowBArena engine whose bin/lowbit is this test binary
// (the fake serve of TestMain), with edit applied to launch.sh.
func fakeEngine(t *testing.T, edit func(string) string) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "engine")
	if _, err := WriteLowBArena(out, LowBArenaOptions{Binary: os.Args[0], Launch: LaunchOptions{Device: "cpu"},
		SourceRoot: "..", Version: "test"}); err != nil {
		t.Fatal(err)
	}
	if edit != nil {
		p := filepath.Join(out, "launch.sh")
		b, _ := os.ReadFile(p)
		edited := edit(string(b))
		if edited == string(b) {
			t.Fatal("the edit changed nothing in launch.sh")
		}
		os.WriteFile(p, []byte(edited), 0o755)
	}
	return out
}

func addFlag(flag string) func(string) string {
	return func(s string) string { return strings.Replace(s, "--device cpu", "--device cpu "+flag, 1) }
}

func TestCheck(t *testing.T) {
	if _, err := InspectBinary(os.Args[0]); err != nil {
		t.Skipf("the test binary cannot stand in for lowbit: %v", err)
	}
	artifact := fakeArtifact(t)
	tests := []struct {
		name string
		edit func(string) string
		// want maps a check to the status it must have on some start;
		// violations lists every check that may be a violation.
		want       map[string]Status
		violations []string
	}{
		{"the engine lowbit writes", nil,
			map[string]Status{"health": Pass, "exec": Pass, "loopback only": Pass, "/v1/models": Pass, "prompt_logprobs": Pass,
				"streaming": Pass, "/v1/chat/completions": Pass, "MAX_MODEL_LEN": Pass, "stop": Pass, "read-only artifact": Pass}, nil},
		{"no exec", func(s string) string { return strings.Replace(s, `exec "$bin" serve`, `"$bin" serve`, 1) },
			map[string]Status{"exec": Warn, "stop": Pass, "prompt_logprobs": Pass}, nil},
		{"binds every interface", func(s string) string { return strings.Replace(s, "--host 127.0.0.1", "--host 0.0.0.0", 1) },
			map[string]Status{"loopback only": Violation}, []string{"loopback only"}},
		{"ignores SERVED_NAME", func(s string) string {
			return strings.Replace(s, `--served-model-name "$SERVED_NAME"`, "--served-model-name fixed", 1)
		}, map[string]Status{"SERVED_NAME": Violation, "prompt_logprobs": Violation},
			[]string{"SERVED_NAME", "prompt_logprobs", "streaming", "/v1/chat/completions", "MAX_MODEL_LEN"}},
		{"keeps the first start's PORT", func(s string) string {
			return strings.Replace(s, `--port "$PORT"`, `--port "$(cat "$HOME/port" 2>/dev/null || { echo "$PORT" >"$HOME/port"; echo "$PORT"; })"`, 1)
		}, map[string]Status{"serve": Violation}, []string{"serve"}},
		{"no prompt_logprobs", addFlag("--fake-no-prompt-logprobs"), map[string]Status{"prompt_logprobs": Violation}, []string{"prompt_logprobs"}},
		{"ignores MAX_MODEL_LEN", addFlag("--fake-ignore-max-len"), map[string]Status{"MAX_MODEL_LEN": Violation}, []string{"MAX_MODEL_LEN"}},
		{"survives SIGTERM", addFlag("--fake-ignore-term"), map[string]Status{"stop": Violation}, []string{"stop"}},
		{"writes the artifact", addFlag("--fake-write-artifact"), map[string]Status{},
			[]string{"serve", "read-only artifact"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// Ample for a loaded machine, except where the start must time
			// out.
			startTimeout := 30 * time.Second
			if tt.want["serve"] == Violation {
				startTimeout = 5 * time.Second
			}
			rep, err := Check(context.Background(), CheckOptions{EngineDir: fakeEngine(t, tt.edit), Artifact: artifact,
				StartTimeout: startTimeout, RequestTimeout: 30 * time.Second, StopTimeout: 2 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			got := map[string][]Status{}
			for _, f := range rep.Findings {
				got[f.Check] = append(got[f.Check], f.Status)
				if f.Status == Violation && !contains(tt.violations, f.Check) {
					t.Errorf("unexpected violation: %s: %s", f.Check, f.Detail)
				}
			}
			for check, st := range tt.want {
				if !contains(got[check], st) {
					t.Errorf("%s: got %v, want %v", check, got[check], st)
				}
			}
			if len(tt.violations) > 0 && rep.Violations() == 0 {
				t.Errorf("no violation reported:\n%s", rep)
			}
			if os.Geteuid() == 0 && tt.violations == nil && !contains(got["unprivileged user"], Pass) {
				t.Errorf("run as root, the engine did not run as nobody: %v", got["unprivileged user"])
			}
			if t.Failed() || testing.Verbose() {
				t.Logf("report:\n%s", rep)
			}
		})
	}
	b, _ := os.ReadFile(filepath.Join(artifact, "config.json"))
	if strings.HasSuffix(string(b), " ") && os.Geteuid() == 0 {
		t.Error("run as root, the engine could write the artifact")
	}
}

func TestCheckBadInput(t *testing.T) {
	artifact := fakeArtifact(t)
	empty := t.TempDir()
	rep, err := Check(context.Background(), CheckOptions{EngineDir: empty, Artifact: artifact})
	if err != nil || rep.Violations() != 1 || !strings.Contains(rep.String(), "no launch.sh") {
		t.Errorf("an engine without launch.sh: %v\n%v", err, rep)
	}
	for _, o := range []CheckOptions{
		{EngineDir: empty},
		{EngineDir: filepath.Join(empty, "nope"), Artifact: artifact},
		{EngineDir: empty, Artifact: empty},
		{EngineDir: empty, Artifact: artifact, KVCacheDType: "fp4"},
	} {
		if _, err := Check(context.Background(), o); err == nil {
			t.Errorf("Check(%+v) accepted bad input", o)
		}
	}
}

func contains[T comparable](s []T, v T) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}
