package kl

import (
	"context"
	"encoding/json"
	"math"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/lowbit-ai/lowbit/runtime"
	"github.com/lowbit-ai/lowbit/tokenizer"
)

// fakeServer answers /v1/models, /tokenize and /v1/completions the way
// vLLM does, computing prompt_logprobs from m's real logits (the runtime's
// forward and log-softmax, each dict built by EntryFromRow) and sampling
// with the runtime's sampler. maxLogprobs caps k as --max-logprobs does.
func fakeServer(t *testing.T, m *runtime.Model, tok *tokenizer.Tokenizer, maxLogprobs int) *httptest.Server {
	t.Helper()
	fail := func(w http.ResponseWriter, msg string) {
		w.WriteHeader(http.StatusBadRequest)
		json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{"message": msg, "type": "BadRequestError", "param": nil, "code": 400}})
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/models", func(w http.ResponseWriter, r *http.Request) {
		json.NewEncoder(w).Encode(map[string]any{"object": "list", "data": []any{map[string]any{"id": "fake", "object": "model"}}})
	})
	mux.HandleFunc("POST /tokenize", func(w http.ResponseWriter, r *http.Request) {
		var req struct{ Prompt string }
		json.NewDecoder(r.Body).Decode(&req)
		json.NewEncoder(w).Encode(map[string]any{"tokens": tok.Encode(req.Prompt)})
	})
	mux.HandleFunc("POST /v1/completions", func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Model          string
			Prompt         []int
			MaxTokens      int     `json:"max_tokens"`
			PromptLogprobs *int    `json:"prompt_logprobs"`
			Temperature    float64 `json:"temperature"`
			TopP           float64 `json:"top_p"`
			TopK           int     `json:"top_k"`
			MinP           float64 `json:"min_p"`
			Seed           uint64  `json:"seed"`
			ReturnTokenIDs bool    `json:"return_token_ids"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			fail(w, err.Error())
			return
		}
		if req.Model != "fake" {
			fail(w, "The model `"+req.Model+"` does not exist.")
			return
		}
		choice := map[string]any{"index": 0, "text": ""}
		if req.PromptLogprobs != nil {
			k := *req.PromptLogprobs
			if k == -1 {
				k = m.VocabSize()
			}
			if k > maxLogprobs {
				fail(w, "Requested prompt logprobs of "+strconv.Itoa(k)+", which is greater than max allowed: "+strconv.Itoa(maxLogprobs))
				return
			}
			V := m.VocabSize()
			lg, err := m.Forward(m.NewSequence(len(req.Prompt)), req.Prompt)
			if err != nil {
				fail(w, err.Error())
				return
			}
			m.Ops().LogSoftmax(lg, lg, len(req.Prompt), V)
			pl := []any{nil}
			for i := 1; i < len(req.Prompt); i++ {
				row := lg[(i-1)*V : i*V]
				e := EntryFromRow(row, req.Prompt[i], TopK(row, k))
				d := map[string]any{}
				for _, x := range e.Tokens {
					d[strconv.Itoa(x.ID)] = map[string]any{"logprob": x.Logprob, "rank": x.Rank, "decoded_token": tok.Decode([]int{x.ID}, false)}
				}
				pl = append(pl, d)
			}
			choice["prompt_logprobs"] = pl
		}
		if req.ReturnTokenIDs {
			s := runtime.SamplingOptions{Temperature: req.Temperature, TopP: req.TopP, TopK: max(req.TopK, 0), MinP: req.MinP, Seed: req.Seed}
			var gen []int
			_, err := m.Generate(r.Context(), m.NewSequence(len(req.Prompt)+req.MaxTokens), req.Prompt,
				runtime.GenerateOptions{MaxTokens: req.MaxTokens, Sampling: s}, func(id int) error { gen = append(gen, id); return nil })
			if err != nil {
				fail(w, err.Error())
				return
			}
			choice["token_ids"] = gen
		}
		json.NewEncoder(w).Encode(map[string]any{"object": "text_completion", "choices": []any{choice}})
	})
	ts := httptest.NewServer(mux)
	t.Cleanup(ts.Close)
	return ts
}

// TestOnlineMatchesOffline: against servers whose prompt_logprobs are the
// runtime's own, Online's estimates at k equal Offline's at k position by
// position, in both modes (the sampled continuations too, the seeds being
// the same).
func TestOnlineMatchesOffline(t *testing.T) {
	refM, candM := load(t, "bf16"), load(t, "fp8-dynamic")
	tok, err := tokenizer.LoadDir(modelDir(t, "bf16"))
	if err != nil {
		t.Fatal(err)
	}
	refS, candS := fakeServer(t, refM, tok, 20), fakeServer(t, candM, tok, 20)
	var prompts []Prompt
	var ids [][]int
	for i, p := range Builtin()[:3] {
		text := string([]rune(p.Text)[:60])
		prompts = append(prompts, Prompt{Name: p.Name, Text: text})
		ids = append(ids, tok.Encode(text))
		if i == 2 { // one prompt given as ids
			prompts[i] = Prompt{IDs: ids[i]}
		}
	}
	samp := runtime.SamplingOptions{Temperature: 1, Seed: 5}
	for _, sample := range []int{0, 6} {
		off, err := Offline(context.Background(), refM, candM, ids, OfflineOptions{K: 7, SampleTokens: sample, Sampling: samp})
		if err != nil {
			t.Fatal(err)
		}
		on, err := Online(context.Background(), &Client{URL: refS.URL}, &Client{URL: candS.URL + "/v1/"}, prompts,
			OnlineOptions{K: 7, SampleTokens: sample, Sampling: samp, Concurrency: 2})
		if err != nil {
			t.Fatal(err)
		}
		if len(on.Positions) != len(off.Positions) || on.Mode != off.Mode {
			t.Fatalf("sample %d: online %d positions (%s), offline %d (%s)", sample, len(on.Positions), on.Mode, len(off.Positions), off.Mode)
		}
		for i, a := range on.Positions {
			b := off.Positions[i]
			if a.Prompt != b.Prompt || a.Pos != b.Pos || a.Token != b.Token || a.Union != b.Union || a.Lower != b.Lower ||
				a.Delta != b.Delta || a.Coverage != b.Coverage || a.RefTop1 != b.RefTop1 || a.CandTop1 != b.CandTop1 {
				t.Fatalf("sample %d position %d: online %+v, offline %+v", sample, i, a, b)
			}
			if !math.IsNaN(a.KL) {
				t.Fatalf("online position with an exact KL %g", a.KL)
			}
			if want := tok.Decode([]int{a.Token}, false); on.Sequences[a.Prompt].Pieces[a.Pos] != want {
				t.Fatalf("piece %q, want %q", on.Sequences[a.Prompt].Pieces[a.Pos], want)
			}
		}
	}
}

// TestOnlineWholeVocabulary: with k covering the vocabulary, the union and
// the lower bound are the exact KL of the offline run.
func TestOnlineWholeVocabulary(t *testing.T) {
	refM, candM := load(t, "bf16"), load(t, "nvfp4a16")
	tok, err := tokenizer.LoadDir(modelDir(t, "bf16"))
	if err != nil {
		t.Fatal(err)
	}
	refS, candS := fakeServer(t, refM, tok, 1<<30), fakeServer(t, candM, tok, 1<<30)
	ids := testPrompts(t, 1, 5)
	off, err := Offline(context.Background(), refM, candM, ids, OfflineOptions{})
	if err != nil {
		t.Fatal(err)
	}
	on, err := Online(context.Background(), &Client{URL: refS.URL}, &Client{URL: candS.URL}, []Prompt{{IDs: ids[0]}}, OnlineOptions{K: -1})
	if err != nil {
		t.Fatal(err)
	}
	checkWholeVocabulary(t, on, off)
}

// checkWholeVocabulary compares an online run at k = vocabulary with the
// offline exact KL.
func checkWholeVocabulary(t *testing.T, on, off *Result) {
	t.Helper()
	if len(on.Positions) != len(off.Positions) {
		t.Fatalf("online %d positions, offline %d", len(on.Positions), len(off.Positions))
	}
	for i, a := range on.Positions {
		kl := off.Positions[i].KL
		for name, v := range map[string]float64{"union": a.Union, "lower": a.Lower} {
			// The dicts' masses miss 1 by float32 rounding, which the tail
			// buckets price at about 1e-7·log(1e-7/Eps).
			if math.Abs(v-kl) > 1e-5+1e-5*kl {
				t.Errorf("position %d: online %s %g, offline exact KL %g", a.Pos, name, v, kl)
			}
		}
		if a.Coverage < 1-1e-5 {
			t.Errorf("position %d: the whole vocabulary holds %g of P", a.Pos, a.Coverage)
		}
	}
}

func TestOnlineErrors(t *testing.T) {
	refM := load(t, "bf16")
	tok, err := tokenizer.LoadDir(modelDir(t, "bf16"))
	if err != nil {
		t.Fatal(err)
	}
	s := fakeServer(t, refM, tok, 20)
	ctx := context.Background()
	_, err = Online(ctx, &Client{URL: s.URL}, &Client{URL: s.URL}, []Prompt{{Text: "hello there"}}, OnlineOptions{K: 50})
	if err == nil || !strings.Contains(err.Error(), "--max-logprobs") {
		t.Errorf("k above the server's cap: %v, want advice about --max-logprobs", err)
	}
	_, err = Online(ctx, &Client{URL: s.URL, Model: "other"}, &Client{URL: s.URL}, []Prompt{{Text: "hello there"}}, OnlineOptions{})
	if err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Errorf("unknown model: %v", err)
	}
	_, err = Online(ctx, &Client{URL: "http://127.0.0.1:1"}, &Client{URL: s.URL}, []Prompt{{Text: "x"}}, OnlineOptions{})
	if err == nil || !strings.Contains(err.Error(), "running") {
		t.Errorf("no server: %v", err)
	}
	if _, err := Online(ctx, &Client{URL: s.URL}, &Client{URL: s.URL}, []Prompt{{Text: "x"}}, OnlineOptions{K: -2}); err == nil {
		t.Error("k = -2 accepted")
	}
}

// TestParsePromptLogprobs checks the parser on vLLM's shape and on broken
// answers.
func TestParsePromptLogprobs(t *testing.T) {
	ids := []int{5, 374, 13}
	good := `{"choices":[{"prompt_logprobs":[null,{"374":{"logprob":-6.9,"rank":81,"decoded_token":" is"},"13":{"logprob":-0.1,"rank":1,"decoded_token":"."}},{"13":{"logprob":-0.5,"rank":1,"decoded_token":"."}}]}]}`
	es, err := ParsePromptLogprobs([]byte(good), ids)
	if err != nil {
		t.Fatal(err)
	}
	if es[0] != nil || len(es[1].Tokens) != 2 || es[1].Tokens[0].ID != 13 || es[1].Top1() != 13 {
		t.Fatalf("parsed %+v", es[1])
	}
	if lp, ok := es[1].Lookup(374); !ok || lp.Logprob != -6.9 || lp.Rank != 81 || lp.Decoded != " is" {
		t.Fatalf("token 374: %+v", lp)
	}
	bad := map[string]string{
		"not json":       `{`,
		"no choices":     `{"choices":[]}`,
		"no logprobs":    `{"choices":[{"text":""}]}`,
		"too few":        `{"choices":[{"prompt_logprobs":[null,{"374":{"logprob":-1,"rank":1}}]}]}`,
		"first not null": `{"choices":[{"prompt_logprobs":[{},{"374":{"logprob":-1,"rank":1}},{"13":{"logprob":-1,"rank":1}}]}]}`,
		"null entry":     `{"choices":[{"prompt_logprobs":[null,null,{"13":{"logprob":-1,"rank":1}}]}]}`,
		"lacks actual":   `{"choices":[{"prompt_logprobs":[null,{"13":{"logprob":-1,"rank":1}},{"13":{"logprob":-1,"rank":1}}]}]}`,
		"key not id":     `{"choices":[{"prompt_logprobs":[null,{" is":{"logprob":-1,"rank":1}},{"13":{"logprob":-1,"rank":1}}]}]}`,
		"no rank":        `{"choices":[{"prompt_logprobs":[null,{"374":{"logprob":-1}},{"13":{"logprob":-1,"rank":1}}]}]}`,
		"positive":       `{"choices":[{"prompt_logprobs":[null,{"374":{"logprob":2,"rank":1}},{"13":{"logprob":-1,"rank":1}}]}]}`,
	}
	for name, b := range bad {
		if _, err := ParsePromptLogprobs([]byte(b), ids); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func FuzzParsePromptLogprobs(f *testing.F) {
	f.Add([]byte(`{"choices":[{"prompt_logprobs":[null,{"374":{"logprob":-6.9,"rank":81,"decoded_token":" is"},"13":{"logprob":-0.1,"rank":1}}]}]}`), 2)
	f.Add([]byte(`{"choices":[{"prompt_logprobs":[null]}]}`), 1)
	f.Add([]byte(`{"choices":[{"prompt_logprobs":[null,{"-1":{"logprob":-9999.0,"rank":7}}]}]}`), 2)
	f.Fuzz(func(t *testing.T, data []byte, n int) {
		n = min(max(n, 0), 64)
		ids := make([]int, n)
		for i := range ids {
			ids[i] = []int{5, 374, 13}[i%3]
		}
		es, err := ParsePromptLogprobs(data, ids)
		if err != nil {
			return
		}
		if len(es) != n || (n > 0 && es[0] != nil) {
			t.Fatalf("%d entries for %d ids", len(es), n)
		}
		for i := 1; i < n; i++ {
			if _, ok := es[i].Lookup(ids[i]); !ok {
				t.Fatalf("entry %d lacks its actual token", i)
			}
			if _, err := Estimate(es[i], es[i], ids[i]); err != nil {
				t.Fatal(err)
			}
		}
	})
}
