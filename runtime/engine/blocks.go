package engine

import (
	"encoding/binary"
	"hash/maphash"
	"slices"
)

// blockManager hands out the KV pool's blocks and keeps the prefix cache.
//
// A block is free (refs 0) or used by refs requests. A full block whose
// positions were all computed may carry a hash: the hash chain of its
// tokens, h_i = H(h_{i-1}, tokens of block i), which names the whole prefix
// up to its end, so two prompts that share the first n·BlockSize tokens
// share n blocks. Hashed blocks stay in the cache after their last user
// frees them; the free list is kept in LRU order (freed blocks at the
// back, taken from the front), so a block that is evicted to serve an
// allocation is the least recently used one, as in vLLM. A hit is checked
// against the block's stored tokens and parent, so a hash collision can
// cost a miss, never a wrong answer.
type blockManager struct {
	size   int // positions per block
	refs   []int32
	hashed []bool
	hash   []uint64
	parent []uint64
	tokens [][]int32 // of hashed blocks
	free   lruList
	cache  map[uint64]int32
	seed   maphash.Seed

	queries, hits int64 // prompt positions looked up, found
}

// lruList is a doubly linked list of block ids with O(1) removal.
type lruList struct {
	prev, next []int32 // -1 terminates
	head, tail int32
	n          int
}

func newBlockManager(blocks, size int) *blockManager {
	bm := &blockManager{size: size, refs: make([]int32, blocks), hashed: make([]bool, blocks),
		hash: make([]uint64, blocks), parent: make([]uint64, blocks), tokens: make([][]int32, blocks),
		cache: map[uint64]int32{}, seed: maphash.MakeSeed()}
	bm.free = lruList{prev: make([]int32, blocks), next: make([]int32, blocks), head: -1, tail: -1}
	for b := range blocks {
		bm.free.pushBack(int32(b))
	}
	return bm
}

func (l *lruList) pushBack(b int32) {
	l.prev[b], l.next[b] = l.tail, -1
	if l.tail >= 0 {
		l.next[l.tail] = b
	} else {
		l.head = b
	}
	l.tail = b
	l.n++
}

func (l *lruList) remove(b int32) {
	if l.prev[b] >= 0 {
		l.next[l.prev[b]] = l.next[b]
	} else {
		l.head = l.next[b]
	}
	if l.next[b] >= 0 {
		l.prev[l.next[b]] = l.prev[b]
	} else {
		l.tail = l.prev[b]
	}
	l.n--
}

// numFree is the number of blocks an allocation can take (free ones,
// cached or not).
func (bm *blockManager) numFree() int { return bm.free.n }

// numUsed is the number of blocks some request holds.
func (bm *blockManager) numUsed() int { return len(bm.refs) - bm.free.n }

// allocate takes n blocks from the front of the free list, evicting their
// cache entries; it returns nil if there are fewer than n.
func (bm *blockManager) allocate(n int) []int32 {
	if n > bm.free.n {
		return nil
	}
	out := make([]int32, 0, n)
	for range n {
		b := bm.free.head
		bm.free.remove(b)
		bm.evict(b)
		bm.refs[b] = 1
		out = append(out, b)
	}
	return out
}

func (bm *blockManager) evict(b int32) {
	if bm.hashed[b] {
		if bm.cache[bm.hash[b]] == b {
			delete(bm.cache, bm.hash[b])
		}
		bm.hashed[b], bm.tokens[b] = false, nil
	}
}

// release drops one reference to each block of table, last block first,
// so that a prompt's tail blocks are evicted before its head (whose hashes
// later prompts are likelier to share).
func (bm *blockManager) release(table []int32) {
	for _, b := range slices.Backward(table) {
		bm.refs[b]--
		if bm.refs[b] == 0 {
			bm.free.pushBack(b)
		}
	}
}

// chainHash returns the hash of a block with the given parent hash and
// tokens.
func (bm *blockManager) chainHash(parent uint64, tokens []int) uint64 {
	var h maphash.Hash
	h.SetSeed(bm.seed)
	var buf [8]byte
	binary.LittleEndian.PutUint64(buf[:], parent)
	h.Write(buf[:])
	for _, t := range tokens {
		binary.LittleEndian.PutUint32(buf[:4], uint32(t))
		h.Write(buf[:4])
	}
	return h.Sum64()
}

// lookup returns the cached blocks that hold the longest prefix of tokens
// made of full blocks, at most maxBlocks of them, taking a reference to
// each; and the hash of the last one (0 if none).
func (bm *blockManager) lookup(tokens []int, maxBlocks int) ([]int32, uint64) {
	var out []int32
	var parent uint64
	for i := 0; i < maxBlocks && (i+1)*bm.size <= len(tokens); i++ {
		blk := tokens[i*bm.size : (i+1)*bm.size]
		h := bm.chainHash(parent, blk)
		b, ok := bm.cache[h]
		if !ok || bm.parent[b] != parent || !equalTokens(bm.tokens[b], blk) {
			break
		}
		if bm.refs[b] == 0 {
			bm.free.remove(b)
		}
		bm.refs[b]++
		out = append(out, b)
		parent = h
	}
	return out, parent
}

func equalTokens(a []int32, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if int(a[i]) != b[i] {
			return false
		}
	}
	return true
}

// register records block b, computed and full, as holding tokens after the
// prefix named parent, and returns its hash. If another block already
// holds that prefix, b stays unhashed (both hold the same values).
func (bm *blockManager) register(b int32, parent uint64, tokens []int) uint64 {
	h := bm.chainHash(parent, tokens)
	if _, ok := bm.cache[h]; ok || bm.hashed[b] {
		return h
	}
	bm.cache[h] = b
	bm.hashed[b], bm.hash[b], bm.parent[b] = true, h, parent
	bm.tokens[b] = make([]int32, len(tokens))
	for i, t := range tokens {
		bm.tokens[b][i] = int32(t)
	}
	return h
}
