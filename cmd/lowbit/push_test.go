package main

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lowbit-ai/lowbit/checkpoint/hub/hubtest"
)

// push against the fake Hub: the sha printed is the branch's head, and a
// checkpoint gets a model card.
func TestPushCommand(t *testing.T) {
	hubSrv := hubtest.New("hf_cmd_test", "alice")
	defer hubSrv.Close()
	t.Setenv("HF_TOKEN", "hf_cmd_test")
	dir := filepath.Join(t.TempDir(), "tiny")
	if _, err := run(t, "synth", "--arch", "qwen3", "--out", dir, "--quiet"); err != nil {
		t.Fatal(err)
	}
	out, err := run(t, "push", "--repo", "alice/tiny", "--endpoint", hubSrv.URL, "--private", "--quiet",
		"--base-model", "Qwen/Qwen3-0.6B", "--method", "lowbit synth --arch qwen3", "--kl", "0.5", dir)
	if err != nil {
		t.Fatal(err)
	}
	head, _ := hubSrv.Head("alice/tiny", "main")
	if strings.TrimSpace(out) != head {
		t.Fatalf("push printed %q, the branch is at %s", out, head)
	}
	files := hubSrv.Files("alice/tiny", "main")
	card := string(files["README.md"])
	for _, want := range []string{"base_model: Qwen/Qwen3-0.6B", "0.5000 nats per token", "lowbit synth --arch qwen3"} {
		if !strings.Contains(card, want) {
			t.Errorf("model card lacks %q:\n%s", want, card)
		}
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if files[e.Name()] == nil {
			t.Errorf("%s was not pushed", e.Name())
		}
	}
	if !hubSrv.Private("alice/tiny") {
		t.Error("--private did not make the repository private")
	}
}

func TestPushAndEngineBadInput(t *testing.T) {
	t.Setenv("HF_TOKEN", "hf_x")
	dir := t.TempDir()
	for _, c := range []struct {
		args  []string
		usage bool
		want  string
	}{
		{[]string{"push", dir}, false, `"repo" not set`},
		{[]string{"push", "--repo", "no-slash", dir}, true, "want OWNER/NAME"},
		{[]string{"push", "--repo", "a/b", "--endpoint", "huggingface.co", dir}, true, "want an http or https URL"},
		{[]string{"push", "--repo", "a/b", "--kl", "0.1", dir}, true, "no checkpoint"},
		{[]string{"engine", "--out", dir}, false, `"target" not set`},
		{[]string{"engine", "--out", dir, "--target", "x"}, true, "choose lowbarena or switchboard"},
		{[]string{"engine", "check", dir}, false, `"artifact" not set`},
		{[]string{"engine", "--out", filepath.Join(dir, "e"), "--target", "lowbarena", "--binary", "/bin/sh"}, false, "not a Go program"},
	} {
		_, err := run(t, c.args...)
		var ue usageError
		if err == nil || errors.As(err, &ue) != c.usage || !strings.Contains(err.Error(), c.want) {
			t.Errorf("lowbit %v = %v, want an error containing %q (usage error: %v)", c.args, err, c.want, c.usage)
		}
	}
}
