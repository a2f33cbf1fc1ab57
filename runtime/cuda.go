//go:build cgo

package runtime

import (
	"fmt"
	"unsafe"

	"github.com/lowbit-ai/lowbit/kernels"
	"github.com/lowbit-ai/lowbit/kernels/cuda"
)

// CUDAExecutor runs a Model on a GPU with everything resident on the
// device: the weights (uploaded once, as stored), a paged KV pool per layer,
// and the activations. A forward launches the kernels of kernels/cuda in
// the order of Model.layer, with the same float32 numerics (contract of
// kernels.Ops), and copies only the token ids, positions and block tables
// in and the requested logits out. Results match the CPU's within float32
// summation order, and are batch invariant in the same way.
type CUDAExecutor struct {
	m         *Model
	d         *cuda.Device
	dtype     kernels.KVDType
	blocks    int
	blockSize int

	arena  *cuda.Arena // the weights, norms and embedding: one allocation
	embed  cuda.Buf
	norm   cuda.Buf
	lmHead *cuda.Weight
	layers []cudaLayer
	allocs []cuda.Buf
	tiled  bool // every layer matmul weight in mma tiles: layersTerms

	act      cudaActs
	bufGen   int
	graphs   map[graphKey]*cuda.Graph
	graphGen map[graphKey]int

	// TopOnDevice lets the engine take rows as TopLogits reduced on the
	// device (ForwardTop) instead of whole rows. lowbit serve sets it: on
	// the H200 it took the Qwen3-0.6B shape's random 512/128 workload at 16
	// in flight from 13,043 to 16,663 tok/s (TPOT 5.63 to 4.29 ms).
	TopOnDevice bool

	// prefillBF16 (WithPrefillBF16): prompt rows' linear layers take BF16
	// activations through cuBLASLt; prompt is the current step's count of
	// them, its first rows (cuda_prefill.go).
	prefillBF16 bool
	prompt      int
	// decodeBF16 (WithBF16Activations): every row takes BF16 activations,
	// generated ones on the tensor-core GEMVs' one-term path.
	decodeBF16 bool
	gemvNorms  GEMVNorms
}

type cudaLayer struct {
	inputNorm, postNorm, qNorm, kNorm cuda.Buf
	q, k, v, o, gate, up, down        *cuda.Weight
	kv                                cuda.KVPool
}

// cudaActs are the device buffers of a forward of up to t tokens, rows
// logits rows and tables block-table entries: activations, the batch
// description the kernels read (ids to tablesBuf: spans of desc, uploaded
// from descHost with one copy before each forward, at fixed addresses so
// that a captured graph finds them) and the rows' best entries (topOut,
// topWork: ForwardTop's, cuda.TopKInto's).
type cudaActs struct {
	t, rows, tables                         int
	x, h, n, q, k, v, att, gate, up, logits cuda.Buf
	ids, pos, seq, rowsIdx, partOff, work   cuda.Buf
	tablesBuf, desc                         cuda.Buf
	descHost                                []int32
	topOut, topWork                         cuda.Buf
}

// NewCUDAExecutor uploads m's weights to d and allocates a KV pool of
// blocks blocks of blockSize positions in dtype (FP8 with the checkpoint's
// scales, 1 without).
func NewCUDAExecutor(m *Model, d *cuda.Device, blocks, blockSize int, dtype kernels.KVDType, opts ...CUDAOption) (*CUDAExecutor, error) {
	if blocks <= 0 || blockSize <= 0 || dtype.Size() == 0 {
		return nil, fmt.Errorf("runtime: CUDA executor: %d blocks of %d positions in %v", blocks, blockSize, dtype)
	}
	e := &CUDAExecutor{m: m, d: d, dtype: dtype, blocks: blocks, blockSize: blockSize,
		graphs: map[graphKey]*cuda.Graph{}, graphGen: map[graphKey]int{}}
	var err error
	if e.gemvNorms, err = gemvNormsFromEnv(); err != nil {
		return nil, err
	}
	for _, o := range opts {
		o(e)
	}
	if e.prefillBF16 {
		if err := d.OpenCuBLASLt(); err != nil {
			return nil, fmt.Errorf("runtime: BF16 prefill: %w", err)
		}
	}
	if err := e.upload(); err != nil {
		e.Close()
		return nil, err
	}
	return e, nil
}

func (e *CUDAExecutor) alloc(n int) (cuda.Buf, error) {
	b, err := e.d.Alloc(n)
	if err == nil {
		e.allocs = append(e.allocs, b)
	}
	return b, err
}

// bytes copies src into the weight arena.
func (e *CUDAExecutor) bytes(src []byte) (cuda.Buf, error) {
	b, err := e.arena.Take(len(src))
	if err != nil {
		return b, err
	}
	return b, e.d.Upload(b, src)
}

func (e *CUDAExecutor) floats(src []float32) (cuda.Buf, error) {
	if len(src) == 0 {
		return cuda.Buf{}, nil
	}
	return e.bytes(unsafe.Slice((*byte)(unsafe.Pointer(&src[0])), 4*len(src)))
}

func (e *CUDAExecutor) weight(w *kernels.Weight) (*cuda.Weight, error) {
	return e.d.UploadWeightTo(w, e.arena)
}

// upload copies the model into one device allocation (the weight arena)
// and allocates the KV pools of every layer as another.
func (e *CUDAExecutor) upload() error {
	m, d := e.m, e.m.d
	size := cuda.ArenaBytes(len(m.embed)) + cuda.ArenaBytes(4*len(m.norm)) + cuda.WeightArenaBytes(&m.lmHead)
	for i := range m.layers {
		ly := &m.layers[i]
		for _, f := range [][]float32{ly.inputNorm, ly.postNorm, ly.qNorm, ly.kNorm} {
			size += cuda.ArenaBytes(4 * len(f))
		}
		for _, w := range []*kernels.Weight{&ly.q, &ly.k, &ly.v, &ly.o, &ly.gate, &ly.up, &ly.down} {
			size += cuda.WeightArenaBytes(w)
			if e.prefillBF16 && bf16Linear(w) {
				size += cuda.ArenaBytes(len(w.Data))
			}
		}
	}
	buf, err := e.alloc(size)
	if err != nil {
		return fmt.Errorf("runtime: CUDA executor: the weights' %d bytes: %w", size, err)
	}
	e.arena = cuda.NewArena(buf)
	poolBytes := e.blocks * e.blockSize * d.kvHeads * d.headDim * e.dtype.Size()
	kvBuf, err := e.alloc(2 * d.layers * cuda.ArenaBytes(poolBytes))
	if err != nil {
		return fmt.Errorf("runtime: CUDA executor: a KV cache of %d blocks (%d bytes): %w", e.blocks, 2*d.layers*poolBytes, err)
	}
	kvArena := cuda.NewArena(kvBuf)
	if e.embed, err = e.bytes(m.embed); err != nil {
		return err
	}
	if e.norm, err = e.floats(m.norm); err != nil {
		return err
	}
	// A tied lm_head gets its own copy: the matmul reads BF16 weights in
	// mma tiles, the embedding gather reads rows.
	if e.lmHead, err = e.weight(&m.lmHead); err != nil {
		return err
	}
	e.layers = make([]cudaLayer, d.layers)
	for i := range m.layers {
		ly, dl := &m.layers[i], &e.layers[i]
		for _, f := range []struct {
			dst *cuda.Buf
			src []float32
		}{{&dl.inputNorm, ly.inputNorm}, {&dl.postNorm, ly.postNorm}, {&dl.qNorm, ly.qNorm}, {&dl.kNorm, ly.kNorm}} {
			if *f.dst, err = e.floats(f.src); err != nil {
				return err
			}
		}
		for _, w := range []struct {
			dst **cuda.Weight
			src *kernels.Weight
		}{{&dl.q, &ly.q}, {&dl.k, &ly.k}, {&dl.v, &ly.v}, {&dl.o, &ly.o}, {&dl.gate, &ly.gate}, {&dl.up, &ly.up}, {&dl.down, &ly.down}} {
			if *w.dst, err = e.weight(w.src); err != nil {
				return err
			}
			if e.prefillBF16 && (*w.dst).Tiled {
				if (*w.dst).Rows, err = e.bytes(w.src.Data); err != nil {
					return err
				}
			}
		}
		ks, vs := float32(1), float32(1)
		if e.dtype == kernels.KVFP8 && ly.kScale > 0 && ly.vScale > 0 {
			ks, vs = ly.kScale, ly.vScale
		}
		dl.kv = cuda.KVPool{DType: e.dtype, KVHeads: d.kvHeads, HeadDim: d.headDim, BlockSize: e.blockSize, KScale: ks, VScale: vs}
		if dl.kv.K, err = kvArena.Take(poolBytes); err != nil {
			return err
		}
		if dl.kv.V, err = kvArena.Take(poolBytes); err != nil {
			return err
		}
	}
	e.tiled = true
	for _, dl := range e.layers {
		for _, w := range []*cuda.Weight{dl.q, dl.k, dl.v, dl.o, dl.gate, dl.up, dl.down} {
			e.tiled = e.tiled && w.Tiled
		}
	}
	return nil
}

// Blocks returns the number of KV blocks.
func (e *CUDAExecutor) Blocks() int { return e.blocks }

// BlockSize returns the positions per block.
func (e *CUDAExecutor) BlockSize() int { return e.blockSize }

// DType returns the KV cache's element type.
func (e *CUDAExecutor) DType() kernels.KVDType { return e.dtype }

// Close frees the executor's device memory.
func (e *CUDAExecutor) Close() error {
	for k, g := range e.graphs {
		e.d.Destroy(g)
		delete(e.graphs, k)
	}
	for _, b := range e.allocs {
		e.d.Free(b)
	}
	e.allocs = nil
	e.act = cudaActs{}
	return nil
}

// free releases one of the executor's allocations.
func (e *CUDAExecutor) free(b cuda.Buf) {
	if b.Bytes() == 0 {
		return
	}
	for i, x := range e.allocs {
		if x == b {
			e.allocs = append(e.allocs[:i], e.allocs[i+1:]...)
			e.d.Free(b)
			return
		}
	}
}

// reserve makes the buffers hold t tokens, rows logits rows and tables
// block-table entries; growing them frees the old ones, which makes every
// captured graph stale (bufGen).
func (e *CUDAExecutor) reserve(t, rows, tables int) error {
	a := &e.act
	if t <= a.t && rows <= a.rows && tables <= a.tables {
		return nil
	}
	for _, b := range []cuda.Buf{a.x, a.h, a.n, a.q, a.k, a.v, a.att, a.gate, a.up, a.logits, a.desc, a.topOut, a.topWork} {
		e.free(b)
	}
	d := e.m.d
	t, rows, tables = max(t, a.t), max(rows, a.rows), max(tables, a.tables, 64)
	qd, kvd := d.heads*d.headDim, d.kvHeads*d.headDim
	n := cudaActs{t: t, rows: rows, tables: tables}
	topOut, topWork := cuda.TopKBytes(rows, d.vocab)
	var err error
	for _, f := range []struct {
		dst   *cuda.Buf
		bytes int
	}{{&n.x, 4 * t * d.hidden}, {&n.h, 4 * t * d.hidden}, {&n.n, 4 * t * d.hidden}, {&n.q, 4 * t * qd},
		{&n.k, 4 * t * kvd}, {&n.v, 4 * t * kvd}, {&n.att, 4 * t * qd}, {&n.gate, 4 * t * d.inter},
		{&n.up, 4 * t * d.inter}, {&n.logits, 4 * rows * d.vocab}, {&n.desc, 4 * n.descLen()},
		{&n.topOut, topOut}, {&n.topWork, topWork}} {
		if *f.dst, err = e.alloc(f.bytes); err != nil {
			e.act = cudaActs{}
			return err
		}
	}
	n.descSpans()
	e.act = n
	e.bufGen++
	return nil
}

// Forward runs a batch (see Model.ForwardBatch) on the device. A batch of
// decode steps only (one token and one logits row per entry) replays a CUDA
// graph captured for its size and block-table width the first time that
// shape ran; anything else launches the kernels one by one. Both run the
// same kernels on the same buffers, so they give the same bits.
func (e *CUDAExecutor) Forward(batch []BatchEntry) ([]float32, error) {
	return e.ForwardInto(batch, nil)
}

// ForwardInto is Forward copying the logits into dst when it can hold them
// (memory the host has already touched, which the copy fills faster than
// fresh pages).
func (e *CUDAExecutor) ForwardInto(batch []BatchEntry, dst []float32) ([]float32, error) {
	var logits []float32
	err := e.forward(batch, 0, func(k *cuda.K, rows int) error {
		if rows == 0 {
			return nil
		}
		logits = logitsBuffer(dst, rows*e.m.d.vocab)
		return k.Download(f32Bytes(logits), e.act.logits.F32(0, rows*e.m.d.vocab))
	})
	return logits, err
}

// TopMax is cuda.TopKMax when TopOnDevice is set, else 0.
func (e *CUDAExecutor) TopMax() int {
	if e.TopOnDevice {
		return cuda.TopKMax
	}
	return 0
}

// ForwardTop runs the batch and copies back the rows full marks whole
// (into dst when it can hold them) and the TopLogits of the others,
// reduced on the device (topk.cu): k entries a row instead of the
// vocabulary.
func (e *CUDAExecutor) ForwardTop(batch []BatchEntry, k int, full []bool, dst []float32) ([]float32, []TopLogits, error) {
	V := e.m.d.vocab
	if k < 1 || k > cuda.TopKMax || k > V {
		return nil, nil, fmt.Errorf("runtime: ForwardTop: k = %d outside [1, %d]", k, min(cuda.TopKMax, V))
	}
	var rows []float32
	var tops []TopLogits
	whole := 0
	for _, f := range full {
		if f {
			whole++
		}
	}
	top := k
	if whole == len(full) {
		top = 0
	}
	err := e.forward(batch, top, func(kk *cuda.K, n int) error {
		if n != len(full) {
			return fmt.Errorf("runtime: ForwardTop: %d logits rows, %d marks", n, len(full))
		}
		rows = logitsBuffer(dst, whole*V)
		w := 0
		for r, f := range full {
			if f {
				if err := kk.Download(f32Bytes(rows[w*V:(w+1)*V]), e.act.logits.F32(r*V, (r+1)*V)); err != nil {
					return err
				}
				w++
			}
		}
		if top == 0 {
			return nil
		}
		ids, vals, lps, ties, err := kk.TopKRead(e.act.topOut, n, k)
		if err != nil {
			return err
		}
		tops = make([]TopLogits, n)
		for r := range tops {
			if !full[r] {
				tops[r] = TopLogits{IDs: ids[r*k : (r+1)*k], Logits: vals[r*k : (r+1)*k], Logprobs: lps[r*k : (r+1)*k], Ties: int(ties[r])}
			}
		}
		return nil
	})
	return rows, tops, err
}

// forward runs the batch on the device, then with top > 0 reduces each
// logits row to its top best entries (cuda.TopKInto, into act.topOut);
// collect, inside the same Run once both are queued, copies back what the
// caller wants of the rows logits rows in act.logits.
func (e *CUDAExecutor) forward(batch []BatchEntry, top int, collect func(k *cuda.K, rows int) error) error {
	m, d := e.m, e.m.d
	T, rows, err := m.checkBatch(batch, e.blocks, e.blockSize)
	if err != nil {
		return err
	}
	// Host-side batch description: ids, positions and sequence of each
	// token, the block tables (one row of stride entries a sequence), and
	// the rows that return logits.
	stride := 1
	decode := true
	for _, b := range batch {
		for stride < len(b.Blocks) {
			stride *= 2
		}
		decode = decode && len(b.Tokens) == 1 && b.Logits == 1
	}
	// With PrefillBF16 the prompt rows of every entry come first (in entry
	// order), then the other rows: each op is row-wise or reads the cache
	// by (sequence, position), so the order changes no result.
	e.prompt = 0
	prompts := make([]int, len(batch)) // each entry's prompt rows
	if e.prefillBF16 {
		for i, b := range batch {
			prompts[i] = min(max(b.Prompt, 0), len(b.Tokens))
			e.prompt += prompts[i]
		}
		decode = decode && e.prompt == 0
	}
	ids, pos, seq := make([]int32, T), make([]int32, T), make([]int32, T)
	tables := make([]int32, len(batch)*stride)
	rowIdx := make([]int32, 0, rows)
	first, rest := 0, e.prompt // the next prompt row, the next other row
	for i, b := range batch {
		for j, blk := range b.Blocks {
			tables[i*stride+j] = blk
		}
		p := prompts[i]
		at := func(j int) int { // token j's row
			if j < p {
				return first + j
			}
			return rest + j - p
		}
		for j, id := range b.Tokens {
			r := at(j)
			ids[r], pos[r], seq[r] = int32(id), int32(b.Start+j), int32(i)
		}
		for j := len(b.Tokens) - b.Logits; j < len(b.Tokens); j++ {
			rowIdx = append(rowIdx, int32(at(j)))
		}
		first, rest = first+p, rest+len(b.Tokens)-p
	}
	if err := e.reserve(T, max(rows, 1), len(tables)); err != nil {
		return err
	}
	bf16 := e.prompt
	if e.decodeBF16 {
		bf16 = T
	}
	plan := cuda.PlanAttentionBF16(seq, pos, d.heads, &e.layers[0].kv, stride*e.blockSize, bf16)
	if err := e.d.ReserveAttention(&plan, d.heads, d.kvHeads, d.headDim); err != nil {
		return err
	}
	// The step, then (top > 0) each logits row's top best entries into
	// act.topOut, so that a decode step's graph holds both.
	run := func(k *cuda.K) error {
		if err := e.step(k, T, rows, stride, plan); err != nil || top == 0 || rows == 0 {
			return err
		}
		return k.TopKInto(e.act.logits, rows, d.vocab, top, e.act.topOut, e.act.topWork)
	}
	key := graphKey{T, stride, plan.Split, top}
	g := e.graphs[key]
	if g != nil && (g.Gen != e.d.Generation() || e.graphGen[key] != e.bufGen) {
		e.d.Destroy(g)
		delete(e.graphs, key)
		g = nil
	}
	err = e.d.Run(func(k *cuda.K) error {
		if err := k.UploadTo(e.act.desc, i32Bytes(e.act.pack(ids, pos, seq, plan.PartOff, plan.Work, rowIdx, tables))); err != nil {
			return err
		}
		if g != nil {
			if err := k.Launch(g); err != nil {
				return err
			}
		} else if err := run(k); err != nil {
			return err
		}
		return collect(k, rows)
	})
	if err != nil {
		return err
	}
	if decode && g == nil && len(e.graphs) < maxGraphs {
		// The eager run just sized every buffer this shape needs.
		if g, err := e.d.Capture(run); err == nil {
			e.graphs[key] = g
			e.graphGen[key] = e.bufGen
		}
	}
	return nil
}

// maxGraphs bounds the captured decode graphs (one per batch size, table
// width and attention mode seen).
const maxGraphs = 512

type graphKey struct {
	tokens, stride int
	split          bool
	top            int
}

// descLen is the int32 count of the batch description for t tokens, rows
// logits rows and tables table entries: ids, pos, seq, partOff (t each),
// work (2t), rowsIdx (rows), tables.
func (a *cudaActs) descLen() int { return 6*a.t + a.rows + a.tables }

// descSpans points ids ... tablesBuf at their spans of desc.
func (a *cudaActs) descSpans() {
	at := func(from, n int) cuda.Buf { return a.desc.Slice(4*from, 4*(from+n)) }
	a.ids, a.pos, a.seq, a.partOff = at(0, a.t), at(a.t, a.t), at(2*a.t, a.t), at(3*a.t, a.t)
	a.work, a.rowsIdx, a.tablesBuf = at(4*a.t, 2*a.t), at(6*a.t, a.rows), at(6*a.t+a.rows, a.tables)
}

// pack lays a batch's description out as desc holds it, in descHost, and
// returns the part to upload (through the last table entry): one copy
// instead of one a span, each of which the GPU would wait for in turn
// between two steps.
func (a *cudaActs) pack(ids, pos, seq, partOff, work, rowsIdx, tables []int32) []int32 {
	if len(a.descHost) < a.descLen() {
		a.descHost = make([]int32, a.descLen())
	}
	h := a.descHost
	for _, s := range []struct {
		from int
		src  []int32
	}{{0, ids}, {a.t, pos}, {2 * a.t, seq}, {3 * a.t, partOff}, {4 * a.t, work}, {6 * a.t, rowsIdx}, {6*a.t + a.rows, tables}} {
		copy(h[s.from:], s.src)
	}
	return h[:6*a.t+a.rows+len(tables)]
}

func f32Bytes(s []float32) []byte {
	if len(s) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&s[0])), 4*len(s))
}

func i32Bytes(s []int32) []byte {
	if len(s) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&s[0])), 4*len(s))
}
