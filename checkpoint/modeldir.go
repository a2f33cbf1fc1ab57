package checkpoint

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/lowbit-ai/lowbit/format"
)

// TensorEntry is a tensor of a model directory: its header info and the base
// name of the shard file that holds it.
type TensorEntry struct {
	TensorInfo
	Shard string
}

// ShardInfo is one safetensors file of a model directory.
type ShardInfo struct {
	Name   string // base name in the directory
	Header *Header
}

// Size returns the shard file's size in bytes.
func (s ShardInfo) Size() int64 { return s.Header.DataStart + s.Header.DataSize }

// Inventory lists a model directory's tensors from the shards' headers alone.
type Inventory struct {
	Dir string
	// Sharded reports whether the checkpoint has an index; a single
	// model.safetensors has none.
	Sharded bool
	// Shards are sorted by name.
	Shards []ShardInfo
	// Tensors are in file order: by shard, then by offset.
	Tensors []TensorEntry
	// BytesByDType sums the tensors' data bytes per dtype; TotalBytes sums
	// them all (the index's metadata.total_size, as transformers defines it).
	BytesByDType map[format.DType]int64
	TotalBytes   int64

	byName map[string]int
}

// Lookup returns the named tensor's entry.
func (inv *Inventory) Lookup(name string) (TensorEntry, bool) {
	i, ok := inv.byName[name]
	if !ok {
		return TensorEntry{}, false
	}
	return inv.Tensors[i], true
}

// ReadInventory reads and cross-checks the headers of the checkpoint in dir
// (a single model.safetensors, or the shards that model.safetensors.index.json
// lists) without reading or mapping any tensor data, so it takes milliseconds
// even on a checkpoint of many gigabytes. It applies the same validation as
// OpenModel.
func ReadInventory(dir string) (*Inventory, error) {
	lay, err := locate(dir)
	if err != nil {
		return nil, err
	}
	headers := make(map[string]*Header, len(lay.shards))
	for _, s := range lay.shards {
		h, err := ReadHeader(filepath.Join(dir, s))
		if err != nil {
			return nil, lay.shardError(s, err)
		}
		headers[s] = h
	}
	return lay.inventory(headers)
}

// Model is a Hugging Face model directory with every shard mapped read-only.
// It is safe for concurrent Tensor lookups; Close must not race with them.
type Model struct {
	inv    *Inventory
	files  map[string]*File
	closed bool
}

// OpenModel validates the checkpoint in dir and maps its shards read-only.
// The checkpoint is either a single model.safetensors or the shards listed by
// model.safetensors.index.json; a directory with both is ambiguous, and one
// with .safetensors files but neither is an error (Hugging Face requires the
// index when a checkpoint is sharded), as is one with none (wrapping
// fs.ErrNotExist).
//
// Besides each shard's own validation (see ParseHeader), it checks that the
// index is well-formed JSON without duplicate keys, that its shard names are
// plain file names ending in ".safetensors", that every listed shard exists,
// that every tensor of the index is in the shard the index names, and that
// every tensor of a shard is in the index, for that shard, and in no other
// shard. Such errors wrap ErrCorrupt and name the file and tensor.
func OpenModel(dir string) (*Model, error) {
	lay, err := locate(dir)
	if err != nil {
		return nil, err
	}
	m := &Model{files: make(map[string]*File, len(lay.shards))}
	ok := false
	defer func() {
		if !ok {
			m.Close()
		}
	}()
	headers := make(map[string]*Header, len(lay.shards))
	for _, s := range lay.shards {
		f, err := OpenFile(filepath.Join(dir, s))
		if err != nil {
			return nil, lay.shardError(s, err)
		}
		m.files[s] = f
		headers[s] = f.Header()
	}
	if m.inv, err = lay.inventory(headers); err != nil {
		return nil, err
	}
	ok = true
	return m, nil
}

// Dir returns the model's directory.
func (m *Model) Dir() string { return m.inv.Dir }

// Inventory returns the model's tensors, shards and sizes.
func (m *Model) Inventory() *Inventory { return m.inv }

// Tensors returns every tensor with its shard, in file order (by shard, then
// offset). The slice is shared: do not modify it.
func (m *Model) Tensors() []TensorEntry { return m.inv.Tensors }

// Tensor returns a zero-copy view of the named tensor, valid until Close. A
// name the model does not hold gives an error wrapping ErrMissingTensor.
func (m *Model) Tensor(name string) (Tensor, error) {
	if m.closed {
		return Tensor{}, fmt.Errorf("checkpoint: %s: tensor %q: %w", m.inv.Dir, name, ErrClosed)
	}
	e, ok := m.inv.Lookup(name)
	if !ok {
		return Tensor{}, fmt.Errorf("checkpoint: %s: tensor %q: %w", m.inv.Dir, name, ErrMissingTensor)
	}
	return m.files[e.Shard].Tensor(name)
}

// Close unmaps every shard; views from Tensor become invalid. Closing twice
// is a no-op.
func (m *Model) Close() error {
	if m.closed {
		return nil
	}
	m.closed = true
	var errs []error
	for _, f := range m.files {
		errs = append(errs, f.Close())
	}
	return errors.Join(errs...)
}

// layout is where a model directory's tensors are, before reading headers.
type layout struct {
	dir       string
	indexPath string            // "" for a single file
	weightMap map[string]string // tensor -> shard; nil for a single file
	shards    []string          // sorted
}

// locate finds the checkpoint files of dir and parses its index.
func locate(dir string) (*layout, error) {
	indexPath := filepath.Join(dir, IndexFileName)
	singlePath := filepath.Join(dir, SingleFileName)
	hasIndex, err := exists(indexPath)
	if err != nil {
		return nil, err
	}
	hasSingle, err := exists(singlePath)
	if err != nil {
		return nil, err
	}
	switch {
	case hasIndex && hasSingle:
		return nil, fmt.Errorf("checkpoint: %s: %w: both %s and %s exist; which is the checkpoint is ambiguous",
			dir, ErrCorrupt, SingleFileName, IndexFileName)
	case hasSingle:
		return &layout{dir: dir, shards: []string{SingleFileName}}, nil
	case !hasIndex:
		entries, err := os.ReadDir(dir)
		if err != nil {
			return nil, fmt.Errorf("checkpoint: %w", err)
		}
		var found []string
		for _, e := range entries {
			if strings.HasSuffix(e.Name(), ".safetensors") {
				found = append(found, e.Name())
			}
		}
		if len(found) > 0 {
			list := strings.Join(found[:min(len(found), 3)], ", ")
			if len(found) > 3 {
				list += ", ..."
			}
			return nil, fmt.Errorf("checkpoint: %s: %w: %d .safetensors files (%s) but no %s: a sharded checkpoint needs its index, and a single one must be named %s",
				dir, ErrCorrupt, len(found), list, IndexFileName, SingleFileName)
		}
		return nil, fmt.Errorf("checkpoint: %s: no %s or %s: %w", dir, SingleFileName, IndexFileName, fs.ErrNotExist)
	}
	b, err := os.ReadFile(indexPath)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	wm, err := parseIndex(b)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: %s: %w", indexPath, err)
	}
	lay := &layout{dir: dir, indexPath: indexPath, weightMap: wm}
	for _, s := range wm {
		if !slices.Contains(lay.shards, s) {
			lay.shards = append(lay.shards, s)
		}
	}
	slices.Sort(lay.shards)
	return lay, nil
}

func exists(path string) (bool, error) {
	_, err := os.Stat(path)
	if err == nil {
		return true, nil
	}
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	return false, fmt.Errorf("checkpoint: %w", err)
}

// shardError explains a failure to read shard s, naming the index when the
// index is what pointed at a missing file.
func (lay *layout) shardError(s string, err error) error {
	if lay.indexPath != "" && errors.Is(err, fs.ErrNotExist) {
		var tensor string
		for t, sh := range lay.weightMap {
			if sh == s && (tensor == "" || t < tensor) {
				tensor = t
			}
		}
		return fmt.Errorf("checkpoint: %s: %w: shard %q, which the index names for tensor %q, is missing: %w",
			lay.indexPath, ErrCorrupt, s, tensor, err)
	}
	return err
}

// inventory cross-checks the shards' headers against the index and lists
// the tensors.
func (lay *layout) inventory(headers map[string]*Header) (*Inventory, error) {
	inv := &Inventory{
		Dir:          lay.dir,
		Sharded:      lay.indexPath != "",
		BytesByDType: make(map[format.DType]int64),
		byName:       make(map[string]int),
	}
	holder := make(map[string]string) // tensor -> first shard holding it
	for _, s := range lay.shards {
		for _, t := range headers[s].Tensors {
			if prev, dup := holder[t.Name]; dup {
				return nil, fmt.Errorf("checkpoint: %s: %w: tensor %q is in two shards, %s and %s",
					lay.dir, ErrCorrupt, t.Name, prev, s)
			}
			holder[t.Name] = s
		}
	}
	for _, s := range lay.shards {
		h := headers[s]
		inv.Shards = append(inv.Shards, ShardInfo{Name: s, Header: h})
		for _, t := range h.Tensors {
			if lay.weightMap != nil {
				want, ok := lay.weightMap[t.Name]
				if !ok {
					return nil, fmt.Errorf("checkpoint: %s: %w: tensor %q of shard %s is not in the index's weight_map",
						lay.indexPath, ErrCorrupt, t.Name, s)
				}
				if want != s {
					return nil, fmt.Errorf("checkpoint: %s: %w: tensor %q is in shard %s but the index places it in %s",
						lay.indexPath, ErrCorrupt, t.Name, s, want)
				}
			}
			inv.byName[t.Name] = len(inv.Tensors)
			inv.Tensors = append(inv.Tensors, TensorEntry{TensorInfo: t, Shard: s})
			inv.BytesByDType[t.DType] += t.Bytes()
			inv.TotalBytes += t.Bytes()
		}
	}
	if lay.weightMap != nil {
		names := make([]string, 0, len(lay.weightMap))
		for t := range lay.weightMap {
			names = append(names, t)
		}
		slices.Sort(names)
		for _, t := range names {
			if _, ok := inv.byName[t]; !ok {
				return nil, fmt.Errorf("checkpoint: %s: %w: the index places tensor %q in shard %s, which does not hold it",
					lay.indexPath, ErrCorrupt, t, lay.weightMap[t])
			}
		}
	}
	return inv, nil
}

// parseIndex parses model.safetensors.index.json and returns its weight_map.
// Unknown top-level keys and the contents of "metadata" are ignored
// (transformers versions differ in what they put there); duplicate keys,
// trailing data, and shard names that are not plain ".safetensors" file names
// are errors.
func parseIndex(b []byte) (map[string]string, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	p := headerParser{dec: dec}
	if err := p.delim('{', "index"); err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	var wm map[string]string
	for dec.More() {
		tok, err := p.token("index key")
		if err != nil {
			return nil, err
		}
		key, ok := tok.(string)
		if !ok {
			return nil, corruptf("index: expected a key, got %s", describeToken(tok))
		}
		if seen[key] {
			return nil, corruptf("index: duplicate key %q", key)
		}
		seen[key] = true
		switch key {
		case "weight_map":
			if wm, err = parseWeightMap(&p); err != nil {
				return nil, err
			}
		case "metadata":
			var v any
			if err := dec.Decode(&v); err != nil {
				return nil, corruptf("index metadata: malformed JSON: %v", err)
			}
			if _, ok := v.(map[string]any); !ok && v != nil {
				return nil, corruptf("index metadata: expected an object")
			}
		default:
			var v json.RawMessage
			if err := dec.Decode(&v); err != nil {
				return nil, corruptf("index %q: malformed JSON: %v", key, err)
			}
		}
	}
	if err := p.delim('}', "index"); err != nil {
		return nil, err
	}
	if tok, err := dec.Token(); err != io.EOF {
		if err != nil {
			return nil, corruptf("index: malformed JSON after the object: %v", err)
		}
		return nil, corruptf("index: unexpected %s after the object", describeToken(tok))
	}
	if wm == nil {
		return nil, corruptf("index: no weight_map")
	}
	return wm, nil
}

func parseWeightMap(p *headerParser) (map[string]string, error) {
	if err := p.delim('{', "index weight_map"); err != nil {
		return nil, err
	}
	wm := map[string]string{}
	for p.dec.More() {
		tok, err := p.token("index weight_map key")
		if err != nil {
			return nil, err
		}
		t, ok := tok.(string)
		if !ok {
			return nil, corruptf("index weight_map: expected a tensor name, got %s", describeToken(tok))
		}
		if _, dup := wm[t]; dup {
			return nil, corruptf("index weight_map: tensor %q listed twice", t)
		}
		tok, err = p.token("index weight_map value")
		if err != nil {
			return nil, err
		}
		s, ok := tok.(string)
		if !ok {
			return nil, corruptf("index weight_map: tensor %q: shard must be a string, got %s", t, describeToken(tok))
		}
		if !validShardName(s) {
			return nil, corruptf("index weight_map: tensor %q: shard %q is not a plain .safetensors file name", t, s)
		}
		wm[t] = s
	}
	if err := p.delim('}', "index weight_map"); err != nil {
		return nil, err
	}
	return wm, nil
}

// validShardName reports whether s is a plain file name (no directory part,
// nothing that could escape the model directory) ending in ".safetensors".
func validShardName(s string) bool {
	return s != "" && !strings.ContainsAny(s, `/\:`+"\x00") && s != "." && s != ".." &&
		strings.HasSuffix(s, ".safetensors") && filepath.Base(s) == s && filepath.IsLocal(s)
}
