package tokenizer

import (
	"fmt"
	"strings"
	"sync"
	"unicode/utf8"
)

// bpe is the BPE model of tokenizers (models/bpe/model.rs).
type bpe struct {
	vocab  map[string]int32
	vocabR []string // id -> token; "" for ids not in the vocabulary
	// merges maps the pair (a, b), packed as a<<32|b, to rank<<32|newID.
	merges map[uint64]uint64

	unkID          int32 // -1 if no unk_token
	fuseUnk        bool
	byteFallback   bool
	ignoreMerges   bool
	prefix, suffix string // continuing_subword_prefix, end_of_word_suffix

	// byteInit[b] is the id of the byte-level character of byte b, or -1,
	// for the fast path of byte-level words; simpleWords is true when that
	// fast path applies (no prefix, suffix; every byte character in vocab).
	byteInit    [256]int32
	simpleWords bool
}

func packPair(a, b int32) uint64 { return uint64(uint32(a))<<32 | uint64(uint32(b)) }

// newBPE builds the model; merges are (a, b) token pairs in rank order.
func newBPE(vocab map[string]int32, merges [][2]string, unk *string, prefix, suffix string, fuseUnk, byteFallback, ignoreMerges bool) (*bpe, error) {
	m := &bpe{vocab: vocab, unkID: -1, fuseUnk: fuseUnk, byteFallback: byteFallback,
		ignoreMerges: ignoreMerges, prefix: prefix, suffix: suffix}
	maxID := int32(-1)
	for tok, id := range vocab {
		if id < 0 {
			return nil, fmt.Errorf("vocab: token %q has negative id %d", tok, id)
		}
		if id > maxID {
			maxID = id
		}
	}
	m.vocabR = make([]string, maxID+1)
	// HF builds vocab_r by iterating a hash map: where two tokens share an
	// id, which one wins is unspecified there. Refuse such files.
	seen := make([]bool, maxID+1)
	for tok, id := range vocab {
		if seen[id] {
			return nil, fmt.Errorf("vocab: id %d is used by two tokens (%q and %q)", id, m.vocabR[id], tok)
		}
		seen[id] = true
		m.vocabR[id] = tok
	}
	if unk != nil {
		id, ok := vocab[*unk]
		if !ok {
			return nil, fmt.Errorf("unk_token %q is not in the vocabulary", *unk)
		}
		m.unkID = id
	}
	m.merges = make(map[uint64]uint64, len(merges))
	var buf []byte
	for rank, mg := range merges {
		a, b := mg[0], mg[1]
		aID, ok := vocab[a]
		if !ok {
			return nil, fmt.Errorf("merge %d (%q %q): %q is not in the vocabulary", rank, a, b, a)
		}
		bID, ok := vocab[b]
		if !ok {
			return nil, fmt.Errorf("merge %d (%q %q): %q is not in the vocabulary", rank, a, b, b)
		}
		if len(b) < len(prefix) {
			return nil, fmt.Errorf("merge %d (%q %q): %q is shorter than continuing_subword_prefix %q", rank, a, b, b, prefix)
		}
		buf = append(append(buf[:0], a...), b[len(prefix):]...)
		newID, ok := vocab[string(buf)]
		if !ok {
			return nil, fmt.Errorf("merge %d (%q %q): merged token %q is not in the vocabulary", rank, a, b, buf)
		}
		// A later duplicate of a pair overrides the earlier one, as when HF
		// collects the merges into its hash map.
		m.merges[packPair(aID, bID)] = uint64(rank)<<32 | uint64(uint32(newID))
	}
	m.simpleWords = prefix == "" && suffix == ""
	for b := 0; b < 256; b++ {
		id, ok := vocab[string(byteToRune[b])]
		if !ok {
			id = -1
			m.simpleWords = false
		}
		m.byteInit[b] = id
	}
	return m, nil
}

// appendWord appends to dst the ids of one pre-token w. When byteLevel, w
// holds raw bytes and the model sees their byte-level characters (the
// mapping is done here); otherwise the model sees w itself.
func (m *bpe) appendWord(dst []int32, w string, byteLevel bool) []int32 {
	if w == "" {
		return dst
	}
	if m.ignoreMerges {
		key := w
		if byteLevel {
			key = byteLevelString(w)
		}
		if id, ok := m.vocab[key]; ok {
			return append(dst, id)
		}
	}
	var syms []int32
	if byteLevel && m.simpleWords {
		syms = make([]int32, len(w))
		for i := 0; i < len(w); i++ {
			syms[i] = m.byteInit[w[i]]
		}
	} else {
		if byteLevel {
			w = byteLevelString(w)
		}
		syms = m.initialSymbols(w)
	}
	start := len(dst)
	dst = append(dst, syms...)
	return m.mergeAll(dst, start)
}

// initialSymbols is merge_word's first part: one symbol per character,
// with continuing_subword_prefix / end_of_word_suffix, byte_fallback and
// unk (fused or not) handling. Characters with no id and no unk are dropped.
func (m *bpe) initialSymbols(w string) []int32 {
	syms := make([]int32, 0, len(w))
	unk := int32(-1) // pending unk
	for i := 0; i < len(w); {
		_, n := utf8.DecodeRuneInString(w[i:])
		s := w[i : i+n]
		if i > 0 && m.prefix != "" {
			s = m.prefix + s
		}
		if i+n == len(w) && m.suffix != "" {
			s = s + m.suffix
		}
		i += n
		if id, ok := m.vocab[s]; ok {
			if unk >= 0 {
				syms = append(syms, unk)
				unk = -1
			}
			syms = append(syms, id)
			continue
		}
		if m.byteFallback {
			ids := make([]int32, 0, len(s))
			for k := 0; k < len(s); k++ {
				id, ok := m.vocab[fmt.Sprintf("<0x%02X>", s[k])]
				if !ok {
					ids = nil
					break
				}
				ids = append(ids, id)
			}
			if ids != nil {
				syms = append(syms, ids...)
				continue
			}
		}
		if m.unkID >= 0 {
			if unk >= 0 && !m.fuseUnk {
				syms = append(syms, unk)
			}
			unk = m.unkID
		}
	}
	if unk >= 0 {
		syms = append(syms, unk)
	}
	return syms
}

// mergeAll applies the merges to the symbols s[start:] in place and returns
// s truncated to the result. It is Word::merge_all of tokenizers: the pair
// of lowest rank is merged first, the leftmost among equal ranks.
func (m *bpe) mergeAll(s []int32, start int) []int32 {
	w := s[start:]
	if len(w) < 2 {
		return s
	}
	if len(w) > 64 {
		return append(s[:start], m.mergeHeap(w)...)
	}
	// Short words: keep the rank of each adjacent pair and rescan; the
	// result equals the priority-queue algorithm's (see mergeHeap).
	var rankBuf [64]uint64
	ranks := rankBuf[:len(w)-1]
	const none = ^uint64(0)
	for i := range ranks {
		if v, ok := m.merges[packPair(w[i], w[i+1])]; ok {
			ranks[i] = v
		} else {
			ranks[i] = none
		}
	}
	for len(w) > 1 {
		best, bi := none, -1
		for i, r := range ranks {
			if r < best { // rank in the high bits; strict < keeps the leftmost
				best, bi = r, i
			}
		}
		if bi < 0 {
			break
		}
		w[bi] = int32(uint32(best))
		copy(w[bi+1:], w[bi+2:])
		w = w[:len(w)-1]
		copy(ranks[bi:], ranks[bi+1:])
		ranks = ranks[:len(ranks)-1]
		if bi > 0 {
			if v, ok := m.merges[packPair(w[bi-1], w[bi])]; ok {
				ranks[bi-1] = v
			} else {
				ranks[bi-1] = none
			}
		}
		if bi < len(w)-1 {
			if v, ok := m.merges[packPair(w[bi], w[bi+1])]; ok {
				ranks[bi] = v
			} else {
				ranks[bi] = none
			}
		}
	}
	return s[:start+len(w)]
}

// mergeHeap is Word::merge_all with its priority queue (ordered by rank,
// then position) and linked symbols, for long words.
func (m *bpe) mergeHeap(w []int32) []int32 {
	type sym struct {
		c          int32
		prev, next int32
		dead       bool
	}
	syms := make([]sym, len(w))
	for i, c := range w {
		syms[i] = sym{c: c, prev: int32(i - 1), next: int32(i + 1)}
	}
	syms[len(w)-1].next = -1
	h := mergeQueue{}
	for i := 0; i+1 < len(w); i++ {
		if v, ok := m.merges[packPair(w[i], w[i+1])]; ok {
			h.push(mergeItem{rank: uint32(v >> 32), pos: int32(i), newID: int32(uint32(v))})
		}
	}
	for len(h) > 0 {
		top := h.pop()
		cur := &syms[top.pos]
		if cur.dead || cur.next < 0 {
			continue
		}
		right := syms[cur.next]
		// Skip an expired entry: HF compares only the new id.
		v, ok := m.merges[packPair(cur.c, right.c)]
		if !ok || int32(uint32(v)) != top.newID {
			continue
		}
		cur.c = top.newID
		syms[cur.next].dead = true
		cur.next = right.next
		if right.next >= 0 {
			syms[right.next].prev = top.pos
		}
		if cur.prev >= 0 {
			if v, ok := m.merges[packPair(syms[cur.prev].c, cur.c)]; ok {
				h.push(mergeItem{rank: uint32(v >> 32), pos: cur.prev, newID: int32(uint32(v))})
			}
		}
		if cur.next >= 0 {
			if v, ok := m.merges[packPair(cur.c, syms[cur.next].c)]; ok {
				h.push(mergeItem{rank: uint32(v >> 32), pos: top.pos, newID: int32(uint32(v))})
			}
		}
	}
	out := w[:0]
	for _, s := range syms {
		if !s.dead {
			out = append(out, s.c)
		}
	}
	return out
}

type mergeItem struct {
	rank  uint32
	pos   int32
	newID int32
}

func (a mergeItem) less(b mergeItem) bool {
	if a.rank != b.rank {
		return a.rank < b.rank
	}
	return a.pos < b.pos
}

// mergeQueue is a binary min-heap of mergeItem.
type mergeQueue []mergeItem

func (h *mergeQueue) push(x mergeItem) {
	*h = append(*h, x)
	q := *h
	i := len(q) - 1
	for i > 0 {
		p := (i - 1) / 2
		if !q[i].less(q[p]) {
			break
		}
		q[i], q[p] = q[p], q[i]
		i = p
	}
}

func (h *mergeQueue) pop() mergeItem {
	q := *h
	top := q[0]
	n := len(q) - 1
	q[0] = q[n]
	q = q[:n]
	i := 0
	for {
		l := 2*i + 1
		if l >= n {
			break
		}
		c := l
		if r := l + 1; r < n && q[r].less(q[l]) {
			c = r
		}
		if !q[c].less(q[i]) {
			break
		}
		q[i], q[c] = q[c], q[i]
		i = c
	}
	*h = q
	return top
}

// byteToRune is GPT-2's bytes_to_unicode: printable Latin-1 bytes map to
// themselves, the others to U+0100 and up, in byte order.
var byteToRune, runeToByte = func() (b2r [256]rune, r2b map[rune]byte) {
	r2b = make(map[rune]byte, 256)
	n := rune(0)
	for b := 0; b < 256; b++ {
		if (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF) {
			b2r[b] = rune(b)
		} else {
			b2r[b] = 256 + n
			n++
		}
		r2b[b2r[b]] = byte(b)
	}
	return
}()

// byteLevelString maps each byte of s to its byte-level character.
func byteLevelString(s string) string {
	var sb strings.Builder
	sb.Grow(2 * len(s))
	for i := 0; i < len(s); i++ {
		sb.WriteRune(byteToRune[s[i]])
	}
	return sb.String()
}

// wordCache maps a pre-token to its ids. It is sharded, each shard a
// two-generation map: when the current generation is full the previous one
// is dropped, so recently used words survive (an approximate LRU) and memory
// stays bounded at 2*cacheShardCap entries per shard.
type wordCache struct {
	shards [cacheShards]cacheShard
}

const (
	cacheShards   = 16
	cacheShardCap = 4096 // entries per generation per shard
	cacheMaxWord  = 256  // longer words are not cached (as HF's MAX_LENGTH)
)

type cacheShard struct {
	mu        sync.Mutex
	cur, prev map[string][]int32
}

func shardOf(w string) int {
	// FNV-1a over at most the first 16 bytes and the length.
	h := uint32(2166136261) ^ uint32(len(w))
	n := len(w)
	if n > 16 {
		n = 16
	}
	for i := 0; i < n; i++ {
		h ^= uint32(w[i])
		h *= 16777619
	}
	return int(h % cacheShards)
}

func (c *wordCache) get(w string) ([]int32, bool) {
	sh := &c.shards[shardOf(w)]
	sh.mu.Lock()
	ids, ok := sh.cur[w]
	if !ok {
		if ids, ok = sh.prev[w]; ok {
			sh.putLocked(strings.Clone(w), ids) // w may point into a large input
		}
	}
	sh.mu.Unlock()
	return ids, ok
}

func (c *wordCache) put(w string, ids []int32) {
	if len(w) > cacheMaxWord {
		return
	}
	sh := &c.shards[shardOf(w)]
	sh.mu.Lock()
	sh.putLocked(strings.Clone(w), ids)
	sh.mu.Unlock()
}

func (sh *cacheShard) putLocked(w string, ids []int32) {
	if sh.cur == nil || len(sh.cur) >= cacheShardCap {
		sh.prev = sh.cur
		sh.cur = make(map[string][]int32, 64)
	}
	sh.cur[w] = ids
}
