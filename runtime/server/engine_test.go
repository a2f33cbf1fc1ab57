package server

import (
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/lowbit-ai/lowbit/checkpoint"
	"github.com/lowbit-ai/lowbit/kernels"
	"github.com/lowbit-ai/lowbit/kernels/cpu"
	"github.com/lowbit-ai/lowbit/kernels/ref"
	"github.com/lowbit-ai/lowbit/runtime"
	"github.com/lowbit-ai/lowbit/runtime/engine"
	"github.com/lowbit-ai/lowbit/synth"
)

// TestRealEngine serves synth's tiny Qwen3 with the real engine, from
// OptionsFromModelDir: the generation config's defaults and EOS ids, the
// tokenizer's chat template, and answers that agree between streaming and
// not, and between completions and the prompt_logprobs of an echo.
func TestRealEngine(t *testing.T) {
	if testing.Short() {
		t.Skip("loads a model")
	}
	dir := t.TempDir()
	if _, err := synth.Write(dir, synth.Options{Arch: checkpoint.Qwen3, Size: synth.Tiny, Seed: 7}); err != nil {
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
	eng, err := engine.New(m, engine.Config{MaxModelLen: 128, KVCacheBytes: 8 << 20})
	if err != nil {
		t.Fatal(err)
	}
	opts, err := OptionsFromModelDir(dir, "", "auto")
	if err != nil {
		t.Fatal(err)
	}
	if d := opts.DefaultSampling; d == nil || d.Temperature != 0.6 || d.TopK != 20 || d.TopP != 0.95 {
		t.Errorf("default sampling %+v", opts.DefaultSampling)
	}
	if !slices.Equal(opts.EOSIDs, []int{151645, 151643}) || opts.ChatTemplate == "" || opts.VocabSize != 151936 {
		t.Errorf("options: EOS %v, vocab %d, template %d bytes", opts.EOSIDs, opts.VocabSize, len(opts.ChatTemplate))
	}
	// --generation-config DIR (LowBArena passes the source model's) reads
	// the same file from there; "vllm" ignores it.
	if o, err := OptionsFromModelDir(dir, "", dir); err != nil || o.DefaultSampling == nil || *o.DefaultSampling != *opts.DefaultSampling {
		t.Errorf("generation config from a directory: %+v, %v", o.DefaultSampling, err)
	}
	if o, err := OptionsFromModelDir(dir, "", "vllm"); err != nil || o.DefaultSampling != nil {
		t.Errorf("generation config vllm: %+v, %v", o.DefaultSampling, err)
	}
	opts.Engine = eng
	opts.MaxModelLen = eng.Config().MaxModelLen
	opts.ServedModelNames = []string{"tiny"}
	s, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s)
	t.Cleanup(func() {
		ts.Close()
		s.Close()
		eng.Close()
	})

	// Greedy: streaming and not give the same text and tokens.
	m1 := postJSON(t, ts.URL+"/v1/completions", `{"prompt":"The capital of France is","max_tokens":8,"temperature":0,"return_token_ids":true,"logprobs":2}`, 200)
	c1 := choiceOf(m1, 0)
	var streamed string
	var ids []int
	for _, ch := range streamChunks(t, ts.URL+"/v1/completions", `{"prompt":"The capital of France is","max_tokens":8,"temperature":0,"stream":true,"return_token_ids":true}`) {
		c := choiceOf(ch, 0)
		streamed += c["text"].(string)
		ids = append(ids, toInts(c["token_ids"])...)
	}
	if streamed != c1["text"] || !slices.Equal(ids, toInts(c1["token_ids"])) {
		t.Errorf("stream %q %v, non-stream %q %v", streamed, ids, c1["text"], c1["token_ids"])
	}
	// Greedy tokens are the argmax: rank 1, equal to the best alternative.
	lp := c1["logprobs"].(map[string]any)
	for i, tl := range lp["token_logprobs"].([]any) {
		top := lp["top_logprobs"].([]any)[i].(map[string]any)
		best := -1e9
		for _, v := range top {
			best = max(best, v.(float64))
		}
		if tl.(float64) != best {
			t.Errorf("token %d: logprob %v, best alternative %v", i, tl, best)
		}
	}

	// The echoed prompt's logprobs are the prompt_logprobs of the same
	// text scored as a prompt.
	prompt := "The capital of France is"
	m2 := postJSON(t, ts.URL+"/v1/completions", `{"prompt":"`+prompt+`","max_tokens":1,"echo":true,"logprobs":1,"temperature":0}`, 200)
	m3 := postJSON(t, ts.URL+"/v1/completions", `{"prompt":"`+prompt+`","max_tokens":1,"prompt_logprobs":1,"temperature":0}`, 200)
	echoLP := choiceOf(m2, 0)["logprobs"].(map[string]any)["token_logprobs"].([]any)
	pl := choiceOf(m3, 0)["prompt_logprobs"].([]any)
	if pl[0] != nil || echoLP[0] != nil || len(pl) != len(echoLP)-1 {
		t.Fatalf("prompt_logprobs %d entries, echo %d", len(pl), len(echoLP))
	}
	promptIDs := qwen3(t).Encode(prompt)
	for i := 1; i < len(pl); i++ {
		entry := pl[i].(map[string]any)
		actual := entry[strconv.Itoa(promptIDs[i])].(map[string]any)
		if actual["logprob"] != echoLP[i] {
			t.Errorf("position %d: prompt_logprobs %v, echo %v", i, actual["logprob"], echoLP[i])
		}
	}

	// Chat with the real template and sampling defaults; n=2 with a seed
	// is reproducible.
	body := `{"messages":[{"role":"user","content":"Hi"}],"max_tokens":6,"n":2,"seed":3,"chat_template_kwargs":{"enable_thinking":false}}`
	a := postJSON(t, ts.URL+"/v1/chat/completions", body, 200)
	b := postJSON(t, ts.URL+"/v1/chat/completions", body, 200)
	for i := 0; i < 2; i++ {
		ca, cb := choiceOf(a, i)["message"].(map[string]any)["content"], choiceOf(b, i)["message"].(map[string]any)["content"]
		if ca != cb {
			t.Errorf("choice %d not reproducible with a seed: %q vs %q", i, ca, cb)
		}
	}
	if u := a["usage"].(map[string]any); u["prompt_tokens"] != float64(len(qwen3(t).Encode("<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"))) {
		t.Errorf("chat prompt tokens %v", u["prompt_tokens"])
	}
	if status, _, body := get(t, ts.URL+"/metrics"); status != 200 || !strings.Contains(string(body), `vllm:kv_cache_usage_perc{engine="0",model_name="tiny"}`) {
		t.Errorf("metrics: %d", status)
	}
}
