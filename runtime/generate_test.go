package runtime

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"testing"

	"github.com/lowbit-ai/lowbit/internal/qwen3tok"
	"github.com/lowbit-ai/lowbit/kernels/ref"
)

func TestGenerate(t *testing.T) {
	m := loadModel(t, small128.write(t), ref.Ops{})
	prompt := testTokens[:5]
	// The greedy continuation, one forward at a time.
	var want []int
	seq := m.NewSequence(0)
	logits := forward(t, m, seq, prompt)
	last := logits[(len(prompt)-1)*m.VocabSize():]
	for range 6 {
		want = append(want, argmax(last))
		last = forward(t, m, seq, want[len(want)-1:])
	}
	run := func(opts GenerateOptions, limit int) ([]int, GenerateStats, error) {
		var got []int
		st, err := m.Generate(context.Background(), m.NewSequence(limit), prompt, opts, func(id int) error {
			got = append(got, id)
			return nil
		})
		return got, st, err
	}

	got, st, err := run(GenerateOptions{MaxTokens: 6}, 0)
	if err != nil || !slices.Equal(got, want) {
		t.Fatalf("greedy Generate: %v, %v; want %v", got, err, want)
	}
	if st.PromptTokens != 5 || st.Generated != 6 || st.Stopped || st.DecodeTokensPerSecond() <= 0 || st.PrefillTokensPerSecond() <= 0 {
		t.Errorf("stats %+v", st)
	}
	got, st, _ = run(GenerateOptions{MaxTokens: 6, StopIDs: []int{want[2]}}, 0)
	if stop := slices.Index(want, want[2]); !slices.Equal(got, want[:stop+1]) || !st.Stopped {
		t.Errorf("with stop id %d: %v (stopped %v), want %v", want[2], got, st.Stopped, want[:stop+1])
	}
	if got, _, _ = run(GenerateOptions{MaxTokens: 6}, 8); !slices.Equal(got, want[:4]) {
		t.Errorf("with a limit of 8 positions: %v, want the 4 tokens that fit (the last needs no forward)", got)
	}
	a, _, _ := run(GenerateOptions{MaxTokens: 6, Sampling: SamplingOptions{Temperature: 1, Seed: 5}}, 0)
	b, _, _ := run(GenerateOptions{MaxTokens: 6, Sampling: SamplingOptions{Temperature: 1, Seed: 5}}, 0)
	if !slices.Equal(a, b) {
		t.Errorf("sampled Generate with one seed: %v and %v", a, b)
	}
	stop := errors.New("stop")
	_, err = m.Generate(context.Background(), m.NewSequence(0), prompt, GenerateOptions{MaxTokens: 6}, func(int) error { return stop })
	if !errors.Is(err, stop) {
		t.Errorf("emit error: Generate returned %v", err)
	}
	if _, _, err := run(GenerateOptions{}, 0); err == nil {
		t.Error("MaxTokens 0 accepted")
	}
	if _, _, err := run(GenerateOptions{MaxTokens: 1, Sampling: SamplingOptions{Temperature: -1}}, 0); err == nil {
		t.Error("temperature -1 accepted")
	}
}

func TestReadGenerationConfig(t *testing.T) {
	tests := []struct {
		name      string
		gen, cfg  string // "" writes no file
		want      *GenerationConfig
		wantError bool
	}{
		{"qwen3", string(qwen3tok.GenerationConfig()), `{"eos_token_id": 1}`,
			&GenerationConfig{SamplingOptions{Temperature: 0.6, TopP: 0.95, TopK: 20}, []int{151645, 151643}}, false},
		{"no generation_config.json", "", `{"eos_token_id": [1, 130073]}`,
			&GenerationConfig{SamplingOptions{Temperature: 1}, []int{1, 130073}}, false},
		{"eos from config.json", `{"temperature": 0.7, "top_k": -1, "min_p": 0.1}`, `{"eos_token_id": 7}`,
			&GenerationConfig{SamplingOptions{Temperature: 0.7, MinP: 0.1}, []int{7}}, false},
		{"nested text_config", `{}`, `{"text_config": {"eos_token_id": 248046}}`,
			&GenerationConfig{SamplingOptions{Temperature: 1}, []int{248046}}, false},
		{"no eos anywhere", `{"eos_token_id": null}`, `{}`, &GenerationConfig{SamplingOptions{Temperature: 1}, nil}, false},
		{"bad eos", `{"eos_token_id": "x"}`, `{}`, nil, true},
		{"bad temperature", `{"temperature": -2}`, `{}`, nil, true},
		{"not JSON", `{`, `{}`, nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			for name, body := range map[string]string{"generation_config.json": tt.gen, "config.json": tt.cfg} {
				if body != "" {
					if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
						t.Fatal(err)
					}
				}
			}
			got, err := ReadGenerationConfig(dir)
			if tt.wantError {
				if err == nil {
					t.Errorf("ReadGenerationConfig = %+v, want an error", got)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got, tt.want) {
				t.Errorf("ReadGenerationConfig = %+v, %v; want %+v", got, err, tt.want)
			}
		})
	}
}

func TestChatPrompt(t *testing.T) {
	if got, want := ChatPrompt("Hi"), "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"; got != want {
		t.Errorf("ChatPrompt = %q, want %q", got, want)
	}
}
