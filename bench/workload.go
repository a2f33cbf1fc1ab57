package bench

import (
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"slices"
	"strings"

	"github.com/lowbit-ai/lowbit/tokenizer"
)

// Endpoints a request is sent to.
const (
	Completions = "completions" // POST /v1/completions, prompt as text
	Chat        = "chat"        // POST /v1/chat/completions, one user message or a session's history
)

// Spec defines a workload; Build turns it into requests. It is stored in
// the results, so that compare can check that two runs replayed the same
// requests and a run can be repeated.
type Spec struct {
	Name  string  `json:"name"`
	Scale float64 `json:"scale"`
	Seed  uint64  `json:"seed"`
	// Levels are the Switchboard load levels (concurrent users); nil takes
	// DefaultLevels.
	Levels []int `json:"levels,omitempty"`
	// IgnoreEOS overrides the workload's ignore_eos when set.
	IgnoreEOS *bool `json:"ignore_eos,omitempty"`
	// Random parameterizes the "random" workload (vLLM's random dataset).
	Random *RandomParams `json:"random,omitempty"`
}

// RandomParams are vLLM's random-dataset and load flags.
type RandomParams struct {
	InputLen   int     `json:"input_len"`
	OutputLen  int     `json:"output_len"`
	RangeRatio float64 `json:"range_ratio"`
	PrefixLen  int     `json:"prefix_len"`
	NumPrompts int     `json:"num_prompts"`
	// MaxConcurrency caps requests in flight (0: no cap).
	MaxConcurrency int `json:"max_concurrency"`
	// RequestRate is requests per second (0: all at once, vLLM's inf);
	// Burstiness is the gamma shape of the gaps (1: Poisson).
	RequestRate float64 `json:"request_rate"`
	Burstiness  float64 `json:"burstiness"`
	// Endpoint is Completions (vLLM's openai backend) or Chat.
	Endpoint string `json:"endpoint"`
}

// DefaultRandom is vLLM's defaults for the random dataset.
func DefaultRandom() RandomParams {
	return RandomParams{InputLen: 1024, OutputLen: 128, NumPrompts: 1000, Burstiness: 1, Endpoint: Completions}
}

// DefaultLevels are Switchboard's load levels: one user, the five users at
// which the seed quotes stock SGLang's throughput, and the sixteen at which
// it quotes its first-token time.
var DefaultLevels = []int{1, 5, 16}

// RequestSpec is one request before it is sent.
type RequestSpec struct {
	// Kind is the traffic kind the request belongs to ("agent", "chat",
	// "prefix", "long", or the phase's name for single-kind workloads).
	Kind     string
	Endpoint string
	// Prompt is the completion prompt, or the new user message of a chat.
	Prompt string
	// PromptLen is Prompt's token count (the client's count, as vLLM's
	// prompt_len).
	PromptLen int
	MaxTokens int
}

// Step is requests a user sends at once and waits for together.
type Step struct{ Requests []RequestSpec }

// Session is steps sent one after another. In a MultiTurn session every
// step is one chat request that carries the whole conversation so far:
// earlier user messages and the assistant's actual replies.
type Session struct {
	MultiTurn bool
	Steps     []Step
}

// User runs its sessions one after another, starting at Arrival seconds
// after the phase starts.
type User struct {
	Arrival  float64
	Sessions []Session
}

// Phase is one measured run: a traffic kind at one load level, or one
// arena scenario. Phases run one after another; each has its own duration
// and metrics.
type Phase struct {
	PhaseInfo
	Users []User
}

// PhaseInfo describes a phase in the results.
type PhaseInfo struct {
	Name string `json:"name"`
	// Group and Load place the phase in the throughput-against-load plot
	// (one line per group); LoadUnit names Load's axis.
	Group    string  `json:"group"`
	Load     float64 `json:"load"`
	LoadUnit string  `json:"load_unit"`
	// MaxConcurrency caps requests in flight (0: only the users bound it).
	MaxConcurrency int     `json:"max_concurrency"`
	RequestRate    float64 `json:"request_rate"`
	Burstiness     float64 `json:"burstiness"`
	IgnoreEOS      bool    `json:"ignore_eos"`
	NumUsers       int     `json:"users"`
	Requests       int     `json:"requests"`
}

// Workload is a built Spec.
type Workload struct {
	Spec   Spec
	Phases []Phase
}

// Requests is the number of requests of all phases.
func (w *Workload) Requests() int {
	n := 0
	for _, p := range w.Phases {
		n += p.Requests
	}
	return n
}

// Workloads lists the names Build accepts, with one line each.
func Workloads() [][2]string {
	return [][2]string{
		{"switchboard", "Switchboard's mixed replay (all four kinds per user) at each load level"},
		{"switchboard-agent", "long agent sessions: multi-turn chats resending a growing history"},
		{"switchboard-chat", "chat bursts: users sending four chats at once"},
		{"switchboard-prefix", "completions sharing one of four long prefixes"},
		{"switchboard-long", "very long contexts (32000 tokens ±20%)"},
		{"lowbarena", "LowBArena's serve, interactive and long_context"},
		{"lowbarena-serve", "64 prompts of 8192 tokens, 32 in flight, 512 generated"},
		{"lowbarena-interactive", "32 prompts of 1024 tokens, one at a time, 256 generated"},
		{"lowbarena-long_context", "128 prompts of 16000 tokens, 64 in flight, 256 generated"},
		{"flagos", "FlagOS's 4k and 16k scenarios"},
		{"flagos-4k", "[4096,1024,64,256]: 256 prompts of 4096 tokens, 64 in flight, 1024 generated"},
		{"flagos-16k", "[16384,1024,64,128]: 128 prompts of 16384 tokens, 64 in flight, 1024 generated"},
		{"random", "vLLM's random dataset with the --input-len, --output-len, ... flags"},
	}
}

// scenario is a random-dataset phase of an arena.
type scenario struct {
	name                                string
	input, output, concurrency, prompts int
	ignoreEOS                           bool
}

// LowBArena's timed workloads. The arena measures its length gate against
// BF16's generated tokens, so requests end at EOS (ignore_eos false).
var lowbarena = []scenario{
	{"serve", 8192, 512, 32, 64, false},
	{"interactive", 1024, 256, 1, 32, false},
	{"long_context", 16000, 256, 64, 128, false},
}

// FlagOS's scenarios, read as [input, output, concurrency, prompts]; the
// score is total tokens/s, measured here at fixed lengths (ignore_eos).
var flagos = []scenario{
	{"4k", 4096, 1024, 64, 256, true},
	{"16k", 16384, 1024, 64, 128, true},
}

// Build makes the requests of spec with tok (token-exact prompts).
func Build(spec Spec, tok *tokenizer.Tokenizer) (*Workload, error) {
	if spec.Scale <= 0 || math.IsNaN(spec.Scale) || math.IsInf(spec.Scale, 0) {
		return nil, fmt.Errorf("bench: scale %v: want a positive number (1 is full size, 0.01 a hundredth)", spec.Scale)
	}
	if spec.Random != nil && spec.Name != "random" {
		return nil, fmt.Errorf("bench: random-dataset parameters apply to the random workload only, not %q", spec.Name)
	}
	for _, l := range spec.Levels {
		if l < 1 {
			return nil, fmt.Errorf("bench: load level %d: want at least one user", l)
		}
	}
	b := &builder{spec: spec, tok: tok}
	w := &Workload{Spec: spec}
	var err error
	family, sub, _ := strings.Cut(spec.Name, "-")
	switch family {
	case "random":
		if sub != "" {
			break
		}
		p := DefaultRandom()
		if spec.Random != nil {
			p = *spec.Random
		}
		var ph Phase
		ph, err = b.random("random", p, spec.Name)
		w.Phases = append(w.Phases, ph)
	case "lowbarena", "flagos":
		list := lowbarena
		if family == "flagos" {
			list = flagos
		}
		for _, s := range list {
			if sub != "" && sub != s.name {
				continue
			}
			p := RandomParams{InputLen: s.input, OutputLen: s.output, NumPrompts: s.prompts,
				MaxConcurrency: s.concurrency, Burstiness: 1, Endpoint: Completions}
			var ph Phase
			if ph, err = b.random(s.name, p, s.name); err != nil {
				return nil, err
			}
			ph.IgnoreEOS = b.ignoreEOS(s.ignoreEOS)
			w.Phases = append(w.Phases, ph)
		}
	case "switchboard":
		kind := sub
		if kind == "" {
			kind = "mixed"
		}
		if !slices.Contains(switchboardKinds, kind) && kind != "mixed" {
			break
		}
		levels := spec.Levels
		if len(levels) == 0 {
			levels = DefaultLevels
		}
		for _, l := range levels {
			var ph Phase
			if ph, err = b.switchboard(kind, l); err != nil {
				return nil, err
			}
			w.Phases = append(w.Phases, ph)
		}
	}
	if err != nil {
		return nil, err
	}
	if len(w.Phases) == 0 {
		names := make([]string, 0, len(Workloads()))
		for _, n := range Workloads() {
			names = append(names, n[0])
		}
		return nil, fmt.Errorf("bench: unknown workload %q; want one of %s", spec.Name, strings.Join(names, ", "))
	}
	return w, nil
}

type builder struct {
	spec Spec
	tok  *tokenizer.Tokenizer
}

// scaleLen and scaleCount apply --scale, never below 1.
func (b *builder) scaleLen(n int) int   { return max(1, int(math.Round(float64(n)*b.spec.Scale))) }
func (b *builder) scaleCount(n int) int { return max(1, int(math.Round(float64(n)*b.spec.Scale))) }

func (b *builder) ignoreEOS(def bool) bool {
	if b.spec.IgnoreEOS != nil {
		return *b.spec.IgnoreEOS
	}
	return def
}

// gen returns a prompt generator whose stream depends on the seed and the
// phase, so that every phase is the same in every run of the spec.
func (b *builder) gen(phase string) (*promptGen, error) {
	h := fnv.New64a()
	h.Write([]byte(phase))
	return newPromptGen(b.tok, b.spec.Seed, h.Sum64())
}

// random is vLLM's random dataset as one phase, one user per prompt.
func (b *builder) random(name string, p RandomParams, kind string) (Phase, error) {
	switch {
	case p.InputLen < 1 || p.OutputLen < 1 || p.NumPrompts < 1:
		return Phase{}, fmt.Errorf("bench: random dataset: input length %d, output length %d, prompts %d: want each at least 1", p.InputLen, p.OutputLen, p.NumPrompts)
	case p.RangeRatio < 0 || p.RangeRatio >= 1:
		return Phase{}, fmt.Errorf("bench: range ratio %v: want 0 <= r < 1 (as vLLM)", p.RangeRatio)
	case p.PrefixLen < 0 || p.MaxConcurrency < 0 || p.RequestRate < 0:
		return Phase{}, fmt.Errorf("bench: prefix length, max concurrency and request rate must not be negative")
	case p.RequestRate > 0 && p.Burstiness <= 0:
		return Phase{}, fmt.Errorf("bench: burstiness %v: want > 0", p.Burstiness)
	case p.Endpoint != Completions && p.Endpoint != Chat:
		return Phase{}, fmt.Errorf("bench: endpoint %q: want %q or %q", p.Endpoint, Completions, Chat)
	}
	g, err := b.gen(name)
	if err != nil {
		return Phase{}, err
	}
	n := b.scaleCount(p.NumPrompts)
	ins := g.inputLengths(n, b.scaleLen(p.InputLen), p.RangeRatio)
	outs := g.lengths(n, b.scaleLen(p.OutputLen), p.RangeRatio, 1)
	var prefix []int
	if p.PrefixLen > 0 {
		prefix = g.randomIDs(b.scaleLen(p.PrefixLen))
	}
	at := arrivals(rand.NewPCG(b.spec.Seed, 0xa441), n, p.RequestRate, p.Burstiness)
	ph := Phase{PhaseInfo: PhaseInfo{Name: name, Group: kind, LoadUnit: "max concurrency",
		MaxConcurrency: p.MaxConcurrency, RequestRate: p.RequestRate, Burstiness: p.Burstiness,
		IgnoreEOS: b.ignoreEOS(false), NumUsers: n, Requests: n}}
	ph.Load = float64(p.MaxConcurrency)
	if p.MaxConcurrency == 0 {
		ph.Load = float64(n)
	}
	if p.RequestRate > 0 {
		ph.Load, ph.LoadUnit = p.RequestRate, "requests/s"
	}
	for i := range n {
		text, l := g.prompt(prefix, ins[i], i)
		r := RequestSpec{Kind: kind, Endpoint: p.Endpoint, Prompt: text, PromptLen: l, MaxTokens: outs[i]}
		ph.Users = append(ph.Users, User{Arrival: at[i], Sessions: []Session{{Steps: []Step{{Requests: []RequestSpec{r}}}}}})
	}
	return ph, nil
}
