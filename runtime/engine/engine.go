package engine

import (
	"context"
	"fmt"
	"math"
	goruntime "runtime"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/lowbit-ai/lowbit/kernels"
	"github.com/lowbit-ai/lowbit/runtime"
)

// Engine runs requests on one model. Submit may be called from any
// goroutine; one goroutine owned by the Engine schedules and computes.
type Engine struct {
	m    *runtime.Model
	cfg  Config
	exec runtime.Executor
	bm   *blockManager
	// logits is the buffer a BufferedExecutor writes a step's rows into
	// (the scheduler goroutine's alone).
	logits []float32

	mu       sync.Mutex
	incoming []*seqState
	waitingN int // len(waiting) as last published, for Submit's bound
	closed   bool
	stats    Stats
	wake     chan struct{}
	done     chan struct{}

	// Owned by the loop.
	waiting []*seqState // FCFS; preempted requests go back to the front
	running []*seqState
}

// seqState is a request inside the engine.
type seqState struct {
	req     *Request
	ctx     context.Context
	out     *outbox
	tokens  []int // prompt, then generated tokens
	nPrompt int
	// computed positions have keys and values in the cache; table holds
	// their blocks (and those of positions about to be computed).
	computed int
	table    []int32
	// hashed blocks of table are registered in the prefix cache; parent is
	// the hash of the last of them.
	hashed    int
	parent    uint64
	sampler   *runtime.Sampler
	stop      map[int]bool
	generated int
	promptLP  []*PositionLogprobs // nil unless asked
	started   bool                // the first Output was sent
	cached    int                 // prompt positions from the prefix cache at first admission
	admitted  bool
}

// New starts an engine for m. The KV pool takes cfg.KVCacheBytes; it must
// hold at least one sequence of MaxModelLen positions.
func New(m *runtime.Model, cfg Config) (*Engine, error) {
	if cfg.MaxModelLen <= 0 || cfg.MaxModelLen > m.MaxPositions() {
		if cfg.MaxModelLen > m.MaxPositions() {
			return nil, fmt.Errorf("engine: max_model_len %d exceeds the model's max_position_embeddings %d", cfg.MaxModelLen, m.MaxPositions())
		}
		cfg.MaxModelLen = m.MaxPositions()
	}
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&cfg.MaxNumSeqs, 64)
	def(&cfg.MaxNumBatchedTokens, 2048)
	def(&cfg.BlockSize, 16)
	def(&cfg.MaxWaiting, 1024)
	if cfg.KVCacheBytes <= 0 {
		cfg.KVCacheBytes = 1 << 30
	}
	dt, err := ParseKVCacheDType(cfg.KVCacheDType)
	if err != nil {
		return nil, err
	}
	blocks := int(cfg.KVCacheBytes / m.KVBlockBytes(cfg.BlockSize, dt))
	if blocks*cfg.BlockSize < cfg.MaxModelLen {
		return nil, fmt.Errorf("engine: the KV cache (%d MiB of %v) holds %d positions, fewer than max_model_len %d: give it more memory or lower max_model_len",
			cfg.KVCacheBytes>>20, dt, blocks*cfg.BlockSize, cfg.MaxModelLen)
	}
	var exec runtime.Executor
	if cfg.NewExecutor != nil {
		exec, err = cfg.NewExecutor(blocks, cfg.BlockSize, dt)
	} else {
		exec, err = m.NewKVPool(blocks, cfg.BlockSize, dt)
	}
	if err != nil {
		return nil, err
	}
	e := &Engine{m: m, cfg: cfg, exec: exec, bm: newBlockManager(blocks, cfg.BlockSize),
		wake: make(chan struct{}, 1), done: make(chan struct{})}
	e.stats.KVBlocksTotal = blocks
	go e.loop()
	return e, nil
}

// ParseKVCacheDType reads a --kv-cache-dtype value: auto (BF16, what vLLM's
// auto holds for a BF16 model), fp8 or fp8_e4m3, or float32 (exact, for
// tests).
func ParseKVCacheDType(s string) (kernels.KVDType, error) {
	switch s {
	case "", "auto", "bf16", "bfloat16":
		return kernels.KVBF16, nil
	case "fp8", "fp8_e4m3":
		return kernels.KVFP8, nil
	case "float32":
		return kernels.KVFloat32, nil
	}
	return 0, fmt.Errorf("engine: kv cache dtype %q: want auto, fp8 (fp8_e4m3) or float32", s)
}

// Config returns the configuration with its defaults filled in.
func (e *Engine) Config() Config { return e.cfg }

// KVDType returns the KV cache's element type.
func (e *Engine) KVDType() kernels.KVDType { return e.exec.DType() }

// Stats returns a snapshot of the engine's counters.
func (e *Engine) Stats() Stats {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.stats
}

// Submit queues r and returns the channel of its Outputs, closed after the
// Output with Finish or Err set, or, once ctx is cancelled, possibly
// without it. Cancelling ctx aborts the request and frees its KV blocks at
// the engine's next step.
func (e *Engine) Submit(ctx context.Context, r *Request) (<-chan Output, error) {
	if err := e.validate(r); err != nil {
		return nil, err
	}
	s := &seqState{req: r, ctx: ctx, tokens: slices.Clone(r.Prompt), nPrompt: len(r.Prompt),
		sampler: runtime.NewSampler(r.Sampling), stop: map[int]bool{}}
	for _, id := range r.StopTokenIDs {
		s.stop[id] = true
	}
	if r.PromptLogprobs >= 0 {
		s.promptLP = make([]*PositionLogprobs, len(r.Prompt))
	}
	e.mu.Lock()
	switch {
	case e.closed:
		e.mu.Unlock()
		return nil, ErrClosed
	case e.waitingN+len(e.incoming) >= e.cfg.MaxWaiting:
		e.mu.Unlock()
		return nil, ErrOverloaded
	}
	s.out = newOutbox(ctx)
	e.incoming = append(e.incoming, s)
	e.mu.Unlock()
	e.poke()
	// Wake the loop when the caller cancels, so that a request waiting for
	// the loop to be idle is dropped promptly.
	context.AfterFunc(ctx, e.poke)
	return s.out.ch, nil
}

func (e *Engine) poke() {
	select {
	case e.wake <- struct{}{}:
	default:
	}
}

func (e *Engine) validate(r *Request) error {
	V := e.m.VocabSize()
	switch {
	case len(r.Prompt) == 0:
		return fmt.Errorf("%w: the prompt is empty", ErrInvalid)
	case r.MaxTokens < 0:
		return fmt.Errorf("%w: max_tokens %d is negative", ErrInvalid, r.MaxTokens)
	case r.MinTokens < 0 || r.MinTokens > max(r.MaxTokens, 0):
		return fmt.Errorf("%w: min_tokens %d must be between 0 and max_tokens %d", ErrInvalid, r.MinTokens, r.MaxTokens)
	case r.PromptLogprobs < -1 || r.Logprobs < -1:
		return fmt.Errorf("%w: logprobs %d and prompt_logprobs %d must be -1 (all) or >= 0", ErrInvalid, r.Logprobs, r.PromptLogprobs)
	case len(r.Prompt)+r.MaxTokens > e.cfg.MaxModelLen:
		return fmt.Errorf("%w: %d prompt tokens plus max_tokens %d exceed max_model_len %d", ErrPromptTooLong, len(r.Prompt), r.MaxTokens, e.cfg.MaxModelLen)
	}
	if err := r.Sampling.Validate(); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	for i, id := range r.Prompt {
		if id < 0 || id >= V {
			return fmt.Errorf("%w: prompt token %d is id %d, outside the vocabulary [0, %d)", ErrInvalid, i, id, V)
		}
	}
	return nil
}

// Close fails every request with ErrClosed and stops the loop (after the
// step in progress).
func (e *Engine) Close() {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		<-e.done
		return
	}
	e.closed = true
	e.mu.Unlock()
	e.poke()
	<-e.done
}

func (e *Engine) loop() {
	defer close(e.done)
	for {
		e.mu.Lock()
		closed := e.closed
		e.waiting = append(e.waiting, e.incoming...)
		e.incoming = nil
		e.mu.Unlock()
		if closed {
			for _, s := range slices.Concat(e.running, e.waiting) {
				e.finish(s, Output{Err: ErrClosed})
			}
			e.running, e.waiting = nil, nil
			e.publish()
			e.exec.Close()
			return
		}
		e.dropCancelled()
		if len(e.running) == 0 && len(e.waiting) == 0 {
			e.publish()
			<-e.wake
			continue
		}
		batch, sched := e.schedule()
		if len(batch) == 0 {
			// Nothing fits (cannot happen with the pool holding max_model_len);
			// wait for news rather than spin.
			e.publish()
			<-e.wake
			continue
		}
		e.step(batch, sched)
		e.publish()
	}
}

// publish updates the stats snapshot.
func (e *Engine) publish() {
	e.mu.Lock()
	e.stats.Running, e.stats.Waiting = len(e.running), len(e.waiting)+len(e.incoming)
	e.stats.KVBlocksUsed = e.bm.numUsed()
	e.stats.PrefixQueries, e.stats.PrefixHits = e.bm.queries, e.bm.hits
	e.waitingN = len(e.waiting)
	e.mu.Unlock()
}

// dropCancelled aborts requests whose context is done.
func (e *Engine) dropCancelled() {
	keep := func(list []*seqState) []*seqState {
		return slices.DeleteFunc(list, func(s *seqState) bool {
			if s.ctx.Err() == nil {
				return false
			}
			e.finish(s, Output{Finish: FinishAbort})
			return true
		})
	}
	e.running, e.waiting = keep(e.running), keep(e.waiting)
}

// finish sends the final Output and frees the request's blocks.
func (e *Engine) finish(s *seqState, out Output) {
	e.bm.release(s.table)
	s.table = nil
	s.out.push(out)
}

func (e *Engine) blocksFor(positions int) int {
	return (positions + e.cfg.BlockSize - 1) / e.cfg.BlockSize
}

// promptLPChunk caps the chunk of a request that returns prompt
// log-probabilities: each row's logits are a vocabulary of float32 (600 KB
// for Qwen3), so 256 rows bound the step's logits to about 150 MB.
const promptLPChunk = 256

// chunkOf returns how many of s's uncomputed tokens to run with budget
// tokens left in the step.
func (e *Engine) chunkOf(s *seqState, budget int) int {
	n := min(len(s.tokens)-s.computed, budget)
	if s.promptLP != nil && s.computed < s.nPrompt {
		n = min(n, promptLPChunk)
	}
	return n
}

// schedule picks this step's work: running requests first (in order,
// preempting from the back when blocks run out), then waiting ones in
// arrival order while sequences, tokens and blocks last.
//
// Under PrefillFirst, while prefillPending a step leaves out the running
// sequences that have only their next token to compute; if that leaves
// nothing to run (the prompt chunk preempted itself for blocks the
// sequences left out hold), the step is mixed.
func (e *Engine) schedule() ([]runtime.BatchEntry, []*seqState) {
	if e.cfg.Scheduling == PrefillFirst && e.prefillPending() {
		if batch, sched := e.scheduleSome(true); len(batch) > 0 {
			return batch, sched
		}
	}
	return e.scheduleSome(false)
}

// scheduleSome is schedule, leaving out generated tokens when prefillOnly.
func (e *Engine) scheduleSome(prefillOnly bool) ([]runtime.BatchEntry, []*seqState) {
	budget := e.cfg.MaxNumBatchedTokens
	var batch []runtime.BatchEntry
	var sched []*seqState
	preempted := false
	for i := 0; i < len(e.running) && budget > 0; i++ {
		s := e.running[i]
		if prefillOnly && len(s.tokens)-s.computed == 1 {
			continue
		}
		n := e.chunkOf(s, budget)
		need := e.blocksFor(s.computed+n) - len(s.table)
		for need > e.bm.numFree() {
			victim := e.running[len(e.running)-1]
			e.preempt(victim)
			preempted = true
			if victim == s {
				break
			}
		}
		if i >= len(e.running) || e.running[i] != s {
			break // s itself was preempted
		}
		s.table = append(s.table, e.bm.allocate(need)...)
		batch = append(batch, e.entry(s, n))
		sched = append(sched, s)
		budget -= n
	}
	for !preempted && len(e.waiting) > 0 && len(e.running) < e.cfg.MaxNumSeqs && budget > 0 {
		s := e.waiting[0]
		if s.table == nil && !e.cfg.DisablePrefixCaching && s.promptLP == nil {
			// At least the last token is computed, for its logits.
			hits, parent := e.bm.lookup(s.tokens, (len(s.tokens)-1)/e.cfg.BlockSize)
			s.table, s.hashed, s.parent = hits, len(hits), parent
			s.computed = len(hits) * e.cfg.BlockSize
			e.bm.queries += int64(len(s.tokens))
			e.bm.hits += int64(s.computed)
		}
		n := e.chunkOf(s, budget)
		need := e.blocksFor(s.computed+n) - len(s.table)
		if need > e.bm.numFree() {
			e.bm.release(s.table)
			s.table, s.computed, s.hashed, s.parent = nil, 0, 0, 0
			break
		}
		s.table = append(s.table, e.bm.allocate(need)...)
		if !s.admitted {
			s.admitted, s.cached = true, s.computed
		}
		e.waiting = e.waiting[1:]
		e.running = append(e.running, s)
		batch = append(batch, e.entry(s, n))
		sched = append(sched, s)
		budget -= n
	}
	return batch, sched
}

// prefillPending reports whether a step has prompt work to run: a running
// sequence with more than its next token to compute (a long prompt's next
// chunk, or a preempted sequence's recompute), or a waiting one that can be
// admitted now. The blocks its first chunk needs are counted without the
// prefix cache's hits, so it may answer false where admission would
// succeed; the step is then mixed and admits it anyway.
func (e *Engine) prefillPending() bool {
	for _, s := range e.running {
		if len(s.tokens)-s.computed > 1 {
			return true
		}
	}
	if len(e.waiting) == 0 || len(e.running) >= e.cfg.MaxNumSeqs {
		return false
	}
	s := e.waiting[0]
	n := e.chunkOf(s, e.cfg.MaxNumBatchedTokens)
	return e.blocksFor(s.computed+n)-len(s.table) <= e.bm.numFree()
}

// entry returns s's batch entry for its next n tokens.
func (e *Engine) entry(s *seqState, n int) runtime.BatchEntry {
	logits := 0
	switch {
	case s.promptLP != nil && s.computed < s.nPrompt:
		logits = n // every row scores the next prompt token (or samples)
	case s.computed+n == len(s.tokens):
		logits = 1
	}
	return runtime.BatchEntry{Blocks: s.table, Start: s.computed, Tokens: s.tokens[s.computed : s.computed+n], Logits: logits,
		Prompt: min(max(s.nPrompt-s.computed, 0), n)}
}

// preempt frees s's blocks and puts it back at the front of the queue; it
// will recompute its tokens (prompt and generated) when readmitted, with
// the same results (batch invariance).
func (e *Engine) preempt(s *seqState) {
	e.bm.release(s.table)
	s.table, s.computed, s.hashed, s.parent = nil, 0, 0, 0
	e.running = slices.DeleteFunc(e.running, func(x *seqState) bool { return x == s })
	e.waiting = slices.Insert(e.waiting, 0, s)
	e.mu.Lock()
	e.stats.Preemptions++
	e.mu.Unlock()
}

// step runs one forward and delivers its results.
func (e *Engine) step(batch []runtime.BatchEntry, sched []*seqState) {
	rows, tops, err := e.forward(batch, sched)
	if err != nil {
		for _, s := range sched {
			e.finish(s, Output{Err: fmt.Errorf("engine: forward: %w", err)})
		}
		e.running = slices.DeleteFunc(e.running, func(s *seqState) bool { return slices.Contains(sched, s) })
		return
	}
	var prompt int64
	for k, s := range sched {
		n := len(batch[k].Tokens)
		if s.computed < s.nPrompt {
			prompt += int64(min(s.computed+n, s.nPrompt) - s.computed)
		}
		s.computed += n
		e.registerBlocks(s)
	}
	// Sampling and log-probabilities touch only their own request, so the
	// requests of a step are served in parallel: a vocabulary-wide pass a
	// row adds up over a batch.
	outs := make([]Output, len(sched))
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(len(sched), goruntime.GOMAXPROCS(0)) {
		wg.Go(func() {
			var lp []float32
			for k := int(next.Add(1) - 1); k < len(sched); k = int(next.Add(1) - 1) {
				b := batch[k]
				if tops[k] != nil {
					outs[k] = e.resultsTop(sched[k], tops[k])
				} else {
					outs[k] = e.results(sched[k], rows[k], b.Start+len(b.Tokens)-b.Logits, &lp)
				}
			}
		})
	}
	wg.Wait()
	var generated int64
	var finished []*seqState
	for k, s := range sched {
		out := outs[k]
		generated += int64(len(out.Tokens))
		if out.Finish != "" {
			finished = append(finished, s)
			e.finish(s, out)
		} else if len(out.Tokens) > 0 || out.PromptTokens > 0 {
			s.out.push(out)
		}
	}
	if len(finished) > 0 {
		e.running = slices.DeleteFunc(e.running, func(s *seqState) bool { return slices.Contains(finished, s) })
	}
	e.mu.Lock()
	e.stats.Steps++
	e.stats.PromptTokens += prompt
	e.stats.GenerationTokens += generated
	e.mu.Unlock()
}

// results turns s's logits rows (the first at position first) into its
// Output: prompt log-probabilities, and at the last position the sampled
// token with its log-probabilities and whether it ends the request. lp is
// the calling worker's buffer for log-softmax rows.
func (e *Engine) results(s *seqState, rows []float32, first int, lp *[]float32) Output {
	V := e.m.VocabSize()
	logSoftmax := func(row []float32) []float32 {
		if *lp == nil {
			*lp = make([]float32, V)
		}
		e.m.Ops().LogSoftmax(*lp, row, 1, V)
		return *lp
	}
	var out Output
	for j := range len(rows) / V {
		row := rows[j*V : (j+1)*V]
		p := first + j
		if s.promptLP != nil && p+1 < s.nPrompt && s.promptLP[p+1] == nil {
			pl := positionLogprobs(logSoftmax(row), s.tokens[p+1], s.req.PromptLogprobs)
			s.promptLP[p+1] = &pl
		}
		if p != len(s.tokens)-1 {
			continue
		}
		e.generate(s, &out, func() int { return s.sample(row) }, func(tok int) PositionLogprobs {
			return positionLogprobs(logSoftmax(row), tok, s.req.Logprobs)
		})
	}
	return out
}

// generate adds to out what s's last position gives: on its first Output
// the prompt's counts and log-probabilities, then the token sample draws
// with logprobs' log-probabilities for it when asked, and whether the
// request ends there.
func (e *Engine) generate(s *seqState, out *Output, sample func() int, logprobs func(tok int) PositionLogprobs) {
	if !s.started {
		s.started = true
		out.PromptTokens, out.CachedTokens = s.nPrompt, s.cached
		if s.promptLP != nil {
			out.PromptLogprobs = s.promptLP
		}
	}
	if s.req.MaxTokens == 0 {
		out.Finish = FinishLength
		return
	}
	tok := sample()
	if s.req.Logprobs >= 0 {
		out.Logprobs = append(out.Logprobs, logprobs(tok))
	}
	s.tokens = append(s.tokens, tok)
	s.generated++
	out.Tokens = append(out.Tokens, tok)
	switch {
	case s.stop[tok] && s.generated >= s.req.MinTokens:
		out.Finish, out.StopToken = FinishStop, tok
	case s.generated >= s.req.MaxTokens || len(s.tokens) >= e.cfg.MaxModelLen:
		out.Finish = FinishLength
	}
}

// sample draws s's next token from a row of raw logits; before MinTokens
// are generated, the stop tokens are excluded.
func (s *seqState) sample(row []float32) int {
	if s.generated < s.req.MinTokens && len(s.stop) > 0 {
		row = slices.Clone(row)
		for id := range s.stop {
			if id >= 0 && id < len(row) {
				row[id] = float32(math.Inf(-1))
			}
		}
	}
	return s.sampler.Sample(row)
}

// registerBlocks enters s's newly completed full blocks in the prefix cache.
func (e *Engine) registerBlocks(s *seqState) {
	if e.cfg.DisablePrefixCaching {
		return
	}
	bs, done := e.cfg.BlockSize, s.computed
	if e.cfg.PromptNumerics {
		done = min(done, s.nPrompt)
	}
	for ; (s.hashed+1)*bs <= done; s.hashed++ {
		s.parent = e.bm.register(s.table[s.hashed], s.parent, s.tokens[s.hashed*bs:(s.hashed+1)*bs])
	}
}
