package kl

import (
	"context"
	"net/http/httptest"
	"testing"

	"github.com/lowbit-ai/lowbit/runtime"
	"github.com/lowbit-ai/lowbit/runtime/engine"
	"github.com/lowbit-ai/lowbit/runtime/server"
)

// ourServer serves the named fixture model with lowbit's engine and HTTP
// server, with a float32 KV cache (so that its logits are the offline
// runtime's bit for bit) and prompt_logprobs up to the whole vocabulary.
func ourServer(t *testing.T, name string) (*httptest.Server, *runtime.Model) {
	t.Helper()
	m := load(t, name)
	eng, err := engine.New(m, engine.Config{MaxModelLen: 256, KVCacheBytes: 16 << 20, KVCacheDType: "float32"})
	if err != nil {
		t.Fatal(err)
	}
	opts, err := server.OptionsFromModelDir(modelDir(t, name), modelDir(t, "bf16"), "auto")
	if err != nil {
		t.Fatal(err)
	}
	opts.Engine = eng
	opts.MaxModelLen = 256
	opts.ServedModelNames = []string{name}
	opts.MaxLogprobs = -1
	s, err := server.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s)
	t.Cleanup(func() {
		ts.Close()
		s.Close()
		eng.Close()
	})
	return ts, m
}

// TestOnlineOurServers runs Online against two of lowbit's own servers
// (the BF16 tiny model and its NVFP4A16 quantization): with k covering the
// vocabulary, the online union and lower bound equal the offline exact KL;
// at k = 20 the online estimates equal the offline ones position by
// position, sampled continuations included.
func TestOnlineOurServers(t *testing.T) {
	if testing.Short() {
		t.Skip("serves two models")
	}
	refS, refM := ourServer(t, "bf16")
	candS, candM := ourServer(t, "nvfp4a16")
	ref, cand := &Client{URL: refS.URL}, &Client{URL: candS.URL}
	ids := testPrompts(t, 2, 6)
	prompts := []Prompt{{IDs: ids[0]}, {IDs: ids[1]}}
	ctx := context.Background()

	off, err := Offline(ctx, refM, candM, ids[:1], OfflineOptions{})
	if err != nil {
		t.Fatal(err)
	}
	on, err := Online(ctx, ref, cand, prompts[:1], OnlineOptions{K: -1})
	if err != nil {
		t.Fatal(err)
	}
	checkWholeVocabulary(t, on, off)

	samp := runtime.SamplingOptions{Temperature: 1, Seed: 9}
	for _, sample := range []int{0, 5} {
		off, err := Offline(ctx, refM, candM, ids, OfflineOptions{K: 20, SampleTokens: sample, Sampling: samp})
		if err != nil {
			t.Fatal(err)
		}
		on, err := Online(ctx, ref, cand, prompts, OnlineOptions{K: 20, SampleTokens: sample, Sampling: samp})
		if err != nil {
			t.Fatal(err)
		}
		if len(on.Positions) != len(off.Positions) {
			t.Fatalf("sample %d: online %d positions, offline %d", sample, len(on.Positions), len(off.Positions))
		}
		for i, a := range on.Positions {
			b := off.Positions[i]
			if a.Token != b.Token || a.Union != b.Union || a.Lower != b.Lower || a.Delta != b.Delta || a.RefTop1 != b.RefTop1 {
				t.Fatalf("sample %d position %d: online %+v, offline %+v", sample, i, a, b)
			}
		}
	}
}
