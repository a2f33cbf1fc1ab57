package bench

import (
	"context"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	"github.com/lowbit-ai/lowbit/checkpoint"
	"github.com/lowbit-ai/lowbit/kernels"
	"github.com/lowbit-ai/lowbit/kernels/cpu"
	"github.com/lowbit-ai/lowbit/kernels/ref"
	"github.com/lowbit-ai/lowbit/runtime"
	"github.com/lowbit-ai/lowbit/runtime/engine"
	"github.com/lowbit-ai/lowbit/runtime/server"
	"github.com/lowbit-ai/lowbit/synth"
)

// tinyServer serves synth's tiny Qwen3 (real tokenizer and chat template)
// as `lowbit serve` does: runtime/server over runtime/engine, on the CPU
// kernels (or the Go reference ones in a cgo-free build).
func tinyServer(t *testing.T) *httptest.Server {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "tiny")
	if _, err := synth.Write(dir, synth.Options{Arch: checkpoint.Qwen3, Size: synth.Tiny, Seed: 1}); err != nil {
		t.Fatal(err)
	}
	var ops kernels.Ops = ref.Ops{}
	if c, err := cpu.New(); err == nil {
		ops = c
		t.Cleanup(c.Close)
	}
	m, err := runtime.Load(dir, ops)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	const maxLen = 1024
	eng, err := engine.New(m, engine.Config{MaxModelLen: maxLen, KVCacheBytes: 32 << 20, MaxNumSeqs: 16})
	if err != nil {
		t.Fatal(err)
	}
	opts, err := server.OptionsFromModelDir(dir, "", "auto")
	if err != nil {
		t.Fatal(err)
	}
	opts.Engine, opts.MaxModelLen, opts.ServedModelNames = eng, maxLen, []string{"tiny"}
	srv, err := server.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	t.Cleanup(func() { hs.Close(); srv.Close(); eng.Close() })
	return hs
}

// TestEndToEndAgainstServer replays miniatures of the arenas' workloads
// against the real server on the tiny model, and checks what only a real
// server can confirm: every request succeeds, the server counts exactly
// the prompt tokens the client built (completions), generates exactly
// max_tokens under ignore_eos, a multi-turn chat's prompt grows by the
// earlier turns, and two runs compare.
func TestEndToEndAgainstServer(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the tiny model")
	}
	tok := qwenTok(t)
	hs := tinyServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	run := func(spec Spec) *Result {
		w, err := Build(spec, tok)
		if err != nil {
			t.Fatal(err)
		}
		res, err := Run(ctx, w, Options{URL: hs.URL, Tokenizer: tok, ReadyTimeout: 10 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if res.Model != "tiny" {
			t.Errorf("model %q, want the server's first (tiny)", res.Model)
		}
		return res
	}
	// Switchboard's mix at 1 and 3 users: 20-token agent turns, bursts of
	// four chats, prefix completions and 320-token long contexts.
	sb := Spec{Name: "switchboard", Scale: 0.01, Seed: 3, Levels: []int{1, 3}}
	a := run(sb)
	for _, p := range a.Phases {
		m := p.Metrics
		t.Logf("%s: %d requests, %.1f output tok/s, TTFT p90 %.1f ms, TPOT mean %.2f ms, peak in flight %d",
			p.Name, m.Completed, m.OutputThroughput, m.TTFT.P90, m.TPOT.Mean, m.PeakInFlight)
		if m.Failed != 0 || m.Completed != p.Requests {
			t.Fatalf("phase %s: %d completed, %d failed of %d: %v", p.Name, m.Completed, m.Failed, p.Requests, distinctErrors(p.Records, 3))
		}
		if len(p.Kinds) != 4 || m.TTFT.P90 <= 0 || m.OutputThroughput <= 0 || m.PeakInFlight < 1 {
			t.Errorf("phase %s: %d kinds, TTFT p90 %v, output %v tok/s, peak %d", p.Name, len(p.Kinds), m.TTFT.P90, m.OutputThroughput, m.PeakInFlight)
		}
		for _, r := range p.Records {
			if r.OutputTokens != r.MaxTokens || r.OutputCounted {
				t.Errorf("%s request: %d tokens (counted by the client: %v), want max_tokens %d from usage", r.Kind, r.OutputTokens, r.OutputCounted, r.MaxTokens)
			}
			switch {
			case r.Endpoint == Completions && r.ServerPrompt != r.PromptLen:
				t.Errorf("%s completion: the server counted %d prompt tokens, the client built %d", r.Kind, r.ServerPrompt, r.PromptLen)
			case r.Endpoint == Chat && r.ServerPrompt <= r.InputLen():
				// The chat template adds its tokens around the turns.
				t.Errorf("%s chat: the server counted %d prompt tokens for %d tokens of turns", r.Kind, r.ServerPrompt, r.InputLen())
			case r.Kind == "agent" && r.Step > 0 && r.HistoryLen == 0:
				t.Errorf("agent turn %d resent no history", r.Step)
			}
		}
	}
	if a.Phases[1].Metrics.PeakInFlight < 3 {
		t.Errorf("3 users with bursts of 4 chats: peak in flight %d, want at least 3", a.Phases[1].Metrics.PeakInFlight)
	}
	b := run(sb)
	c, err := Compare(a, b, "a", "b")
	if err != nil {
		t.Fatal(err)
	}
	if c.Switchboard.Score <= 0 || c.LowBArena.LengthChange != 0 {
		t.Errorf("comparing two runs of one server: %+v %+v", c.Switchboard, c.LowBArena)
	}
	// LowBArena's interactive miniature: requests end at EOS or at
	// max_tokens, one at a time.
	li := run(Spec{Name: "lowbarena-interactive", Scale: 0.05, Seed: 1})
	if p := li.Phases[0]; p.Metrics.Failed != 0 || p.Metrics.PeakInFlight != 1 || p.Requests != 2 {
		t.Errorf("interactive: %+v", p.Metrics)
	}
}
