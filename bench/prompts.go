package bench

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sort"

	"gonum.org/v1/gonum/stat/distuv"

	"github.com/lowbit-ai/lowbit/tokenizer"
)

// promptGen builds token-exact random prompts as vLLM's RandomDataset does:
// consecutive ids of the vocabulary without added and special tokens,
// decoded to text, then re-encoded and truncated or extended (up to ten
// times) until the text encodes to the target length. The random stream is
// Go's PCG, not numpy's, so a seed gives different (but equally made)
// prompts than vLLM's.
type promptGen struct {
	tok     *tokenizer.Tokenizer
	allowed []int
	// special is num_special_tokens_to_add: what the tokenizer's
	// post-processor adds to an encoded prompt (Qwen3: none).
	special int
	rng     *rand.Rand
}

// maxPromptRetries is vLLM's max_retry of gen_prompt_decode_to_target_len.
const maxPromptRetries = 10

func newPromptGen(tok *tokenizer.Tokenizer, seed, stream uint64) (*promptGen, error) {
	added := map[int]bool{}
	for _, a := range tok.AddedTokens() {
		added[a.ID] = true
	}
	g := &promptGen{tok: tok, rng: rand.New(rand.NewPCG(seed, stream))}
	// HF's tokenizer.vocab_size counts the model's vocabulary without added
	// tokens; vLLM further drops all_special_ids. Ids with no token (holes)
	// are dropped too, since they decode to nothing.
	for id := 0; id < tok.VocabSize(); id++ {
		if !added[id] && !tok.IsSpecial(id) && tok.IDToken(id) != "" {
			g.allowed = append(g.allowed, id)
		}
	}
	if len(g.allowed) == 0 {
		return nil, fmt.Errorf("bench: the tokenizer has no ordinary tokens to build prompts from")
	}
	g.special = len(tok.EncodeWith("", tokenizer.EncodeOptions{AddSpecial: true}))
	return g, nil
}

func (g *promptGen) encode(text string) []int {
	return g.tok.EncodeWith(text, tokenizer.EncodeOptions{ParseSpecial: true})
}

// lengths draws n lengths uniformly from [floor(L(1-r)), ceil(L(1+r))], at
// least min, as vLLM's get_sampling_params does.
func (g *promptGen) lengths(n, l int, r float64, min int) []int {
	lo := max(int(math.Floor(float64(l)*(1-r))), min)
	hi := max(int(math.Ceil(float64(l)*(1+r))), lo)
	out := make([]int, n)
	for i := range out {
		out[i] = lo + g.rng.IntN(hi-lo+1)
	}
	return out
}

// inputLengths is lengths for prompts: vLLM subtracts the special tokens
// the tokenizer adds before sampling.
func (g *promptGen) inputLengths(n, l int, r float64) []int {
	return g.lengths(n, max(l-g.special, 0), r, 0)
}

// randomIDs returns n ids drawn uniformly from the allowed ones (a shared
// prefix, or the filler when a re-encoded prompt came out short).
func (g *promptGen) randomIDs(n int) []int {
	ids := make([]int, n)
	for i := range ids {
		ids[i] = g.allowed[g.rng.IntN(len(g.allowed))]
	}
	return ids
}

// prompt returns the text of prefix followed by inputLen consecutive allowed
// ids starting at a random offset (shifted by index, as vLLM does), and its
// exact token count, which equals len(prefix)+inputLen unless ten rounds of
// adjustment could not reach it.
func (g *promptGen) prompt(prefix []int, inputLen, index int) (string, int) {
	offset := g.rng.IntN(len(g.allowed))
	seq := make([]int, 0, len(prefix)+inputLen)
	seq = append(seq, prefix...)
	for i := range inputLen {
		seq = append(seq, g.allowed[(offset+index+i)%len(g.allowed)])
	}
	target := len(prefix) + inputLen
	var text string
	for try := 0; ; try++ {
		text = g.tok.Decode(seq, false)
		seq = g.encode(text)
		if len(seq) == target || try == maxPromptRetries {
			return text, len(seq)
		}
		if len(seq) < target {
			seq = append(seq, g.randomIDs(target-len(seq))...)
		} else {
			seq = seq[:target]
		}
	}
}

// arrivals returns n send times in seconds after the phase start, as vLLM's
// get_request: all at 0 for rate 0 (infinite), else gamma-distributed gaps
// with shape burstiness and mean 1/rate (Poisson at burstiness 1),
// rescaled so that the last arrival is at n/rate.
func arrivals(src rand.Source, n int, rate, burstiness float64) []float64 {
	out := make([]float64, n)
	if rate <= 0 || n == 0 {
		return out
	}
	gap := distuv.Gamma{Alpha: burstiness, Beta: rate * burstiness, Src: src}
	t := 0.0
	for i := range out {
		t += gap.Rand()
		out[i] = t
	}
	if last := out[n-1]; last > 0 {
		f := float64(n) / rate / last
		for i := range out {
			out[i] *= f
		}
	}
	return out
}

// shuffle permutes s with rng (Fisher-Yates).
func shuffle[T any](rng *rand.Rand, s []T) {
	rng.Shuffle(len(s), func(i, j int) { s[i], s[j] = s[j], s[i] })
}

// sortedCopy returns x sorted ascending.
func sortedCopy(x []float64) []float64 {
	s := append([]float64(nil), x...)
	sort.Float64s(s)
	return s
}
