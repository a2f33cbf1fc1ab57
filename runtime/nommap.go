package runtime

import (
	"fmt"
	"unsafe"

	"github.com/lowbit-ai/lowbit/checkpoint"
	"github.com/lowbit-ai/lowbit/kernels"
)

// LoadOptions adjusts Load.
type LoadOptions struct {
	// NoMmap copies, at load, the tensors a decode step streams (every
	// linear layer's data and float32 scales, and the embedding, which is
	// also the LM head of a tied model) out of the mapped checkpoint into
	// one anonymous buffer, 2 MiB aligned and advised to use transparent
	// huge pages, then unmaps the checkpoint and drops its files from the
	// page cache. It is llama.cpp's --no-mmap.
	//
	// Why: a decode step reads every weight once, and on the 2-core VM of
	// BENCHMARKS.md the kernels stream weights at 18-19 GB/s from the
	// checkpoint's 4 KiB file pages against 26-27 GB/s from huge pages
	// (the file mapping cannot use huge pages there). The trade: the load
	// reads the whole checkpoint and copies it (there, 0.3-2.8 s for the
	// 1.2 GB BF16 Qwen3-0.6B from the page cache, the slow end when the
	// kernel has to compact memory to find huge pages; and every later
	// load of the same files reads them from disk again), and the weights
	// become private memory of the process, which two processes serving the same
	// checkpoint no longer share and which the kernel cannot evict under
	// pressure as it can clean file pages. Resident memory is not doubled:
	// the mapping is released as each tensor is copied. Logits are the
	// same bits either way.
	NoMmap bool
}

// arenaAlign is the alignment of each tensor in the arena: a cache line,
// as the file's own offsets need not be.
const arenaAlign = 64

// moveWeights implements LoadOptions.NoMmap on a bound model: it copies the
// tensors into an arena, points the model at the copies, closes the
// checkpoint and drops its files from the page cache.
func (m *Model) moveWeights() error {
	var bufs []*[]byte
	var floats []*[]float32
	bufs = append(bufs, &m.embed)
	for _, w := range m.linearWeights() {
		bufs = append(bufs, &w.Data)
		floats = append(floats, &w.Scales)
	}
	// A tied LM head is the embedding: one copy, as in the mapping.
	offset := map[*byte]int{}
	size := 0
	place := func(p *byte, n int) {
		if _, ok := offset[p]; ok || n == 0 {
			return
		}
		offset[p] = size
		size += (n + arenaAlign - 1) &^ (arenaAlign - 1)
	}
	for _, b := range bufs {
		place(unsafe.SliceData(*b), len(*b))
	}
	for _, f := range floats {
		place(floatBytes(*f))
	}
	a, err := newArena(size)
	if err != nil {
		return fmt.Errorf("runtime: %s: --no-mmap: %w", m.ck.Dir(), err)
	}
	mem := a.bytes()
	done := map[*byte]bool{}
	for _, b := range bufs {
		src := *b
		p := unsafe.SliceData(src)
		if len(src) == 0 {
			continue
		}
		off := offset[p]
		dst := mem[off : off+len(src) : off+len(src)]
		if !done[p] {
			copy(dst, src)
			// The mapping's pages leave the resident set as they are
			// copied, so the load never holds the weights twice.
			checkpoint.ReleasePages(src)
			done[p] = true
		}
		*b = dst
	}
	for _, f := range floats {
		p, n := floatBytes(*f)
		if n == 0 {
			continue
		}
		off := offset[p]
		copy(mem[off:off+n], unsafe.Slice(p, n))
		*f = unsafe.Slice((*float32)(unsafe.Pointer(&mem[off])), len(*f))
	}
	a.seal()
	m.arena = a
	shards := m.ck.Inventory().Shards
	dir := m.ck.Dir()
	if err := m.ck.Close(); err != nil {
		return err
	}
	for _, s := range shards {
		dropPageCache(dir, s.Name)
	}
	return nil
}

// floatBytes returns the bytes of a float32 slice.
func floatBytes(f []float32) (*byte, int) {
	return (*byte)(unsafe.Pointer(unsafe.SliceData(f))), 4 * len(f)
}

// linearWeights returns every linear layer of the model, the LM head last.
func (m *Model) linearWeights() []*kernels.Weight {
	var ws []*kernels.Weight
	for i := range m.layers {
		ly := &m.layers[i]
		ws = append(ws, &ly.q, &ly.k, &ly.v, &ly.o, &ly.gate, &ly.up, &ly.down)
	}
	return append(ws, &m.lmHead)
}
