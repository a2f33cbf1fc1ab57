package checkpoint

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"unicode/utf8"

	"github.com/lowbit-ai/lowbit/format"
)

// Hugging Face file names of a checkpoint.
const (
	// SingleFileName is the file of a checkpoint that fits in one shard.
	SingleFileName = "model.safetensors"
	// IndexFileName lists which shard holds each tensor of a sharded checkpoint.
	IndexFileName = "model.safetensors.index.json"
)

// DefaultMaxShardBytes is the shard size limit when WriteOptions leaves it
// zero: Hugging Face's default max_shard_size "5GB", which it reads as
// 5*10^9 bytes.
const DefaultMaxShardBytes int64 = 5_000_000_000

// writeBufferSize is the buffer between a fill function and a shard file.
const writeBufferSize = 4 << 20

// progressStep is how many bytes a fill writes between Progress calls.
const progressStep = 64 << 20

// shardNameRE matches the names of Hugging Face shard files.
var shardNameRE = regexp.MustCompile(`^model-[0-9]{5,}-of-[0-9]{5,}\.safetensors$`)

// ShardFileName returns the Hugging Face name of shard i (0-based) of n:
// "model-00001-of-00003.safetensors". A checkpoint of one shard is named
// SingleFileName instead.
func ShardFileName(i, n int) string {
	return fmt.Sprintf("model-%05d-of-%05d.safetensors", i+1, n)
}

// TensorSpec declares a tensor to be written: its bytes are streamed later,
// but the header, which precedes the data, needs its name, dtype and shape.
type TensorSpec struct {
	Name  string
	DType format.DType
	Shape []int64
}

// Bytes returns the tensor's data bytes, or -1 when its shape overflows
// (WriteTensors rejects such a spec).
func (s TensorSpec) Bytes() int64 {
	n, ok := shapeBytes(s.Shape, s.DType)
	if !ok {
		return -1
	}
	return n
}

// WriteOptions configures WriteTensors. The zero value is usable.
type WriteOptions struct {
	// MaxShardBytes bounds the tensor data bytes of each shard (headers not
	// counted, as Hugging Face counts them); 0 means DefaultMaxShardBytes.
	// Tensors are packed greedily in the order given; a tensor larger than
	// the limit goes alone in its shard (with any zero-length tensors that
	// follow it).
	MaxShardBytes int64
	// Metadata is written as every shard's "__metadata__" (for example
	// {"format": "pt"}, which transformers expects); nil writes none.
	Metadata map[string]string
	// Progress, when set, is called with the tensor data bytes written so
	// far and the total, after each tensor and every 64 MiB within one.
	Progress func(written, total int64)
	// Overwrite allows writing into a directory that already holds a
	// checkpoint (model.safetensors, an index, or model-*-of-*.safetensors):
	// those files are removed, the index first, before anything is written.
	// Without it such a directory is an error.
	Overwrite bool

	// wrap, in tests, interposes on the writes to each shard's file.
	wrap func(shard string, w io.Writer) io.Writer
}

// WriteResult describes a written checkpoint.
type WriteResult struct {
	Dir string
	// Shards are in order; their File names are base names in Dir.
	Shards []ShardResult
	// Index is IndexFileName for a sharded checkpoint, "" for a single file.
	Index string
	// TotalBytes is the sum of the tensors' data bytes (the index's
	// metadata.total_size).
	TotalBytes int64
}

// ShardResult describes one written shard.
type ShardResult struct {
	File      string
	Tensors   []string // in the order written
	DataBytes int64    // tensor data bytes
	FileBytes int64    // file size: length prefix, header and data
}

// WriteTensors writes a checkpoint of the declared tensors into the existing
// directory dir, in Hugging Face's layout: one shard is model.safetensors;
// several are model-00001-of-0000N.safetensors plus model.safetensors.index.json
// ({"metadata": {"total_size": N}, "weight_map": {name: shard}}).
//
// fill(i, w) must write exactly the data bytes of specs[i] (little-endian, as
// the format specifies) to w; it is called once per tensor, in order, and
// writing fewer or more bytes is an error naming the tensor. Data streams
// through a fixed-size buffer, so memory use does not grow with tensor size.
//
// Each shard is written to a hidden temporary file in dir, synced and closed;
// once every shard is complete they are renamed into place, and the index (or,
// for one shard, model.safetensors itself) is renamed last, followed by a sync
// of dir. So a failed or killed write never leaves a directory that looks
// complete; on error every file this call created is removed. Callers that
// also write config.json and tokenizer files should write them first.
func WriteTensors(dir string, specs []TensorSpec, fill func(i int, w io.Writer) error, opts WriteOptions) (*WriteResult, error) {
	sizes, err := validateSpecs(specs)
	if err != nil {
		return nil, err
	}
	for k, v := range opts.Metadata {
		if !utf8.ValidString(k) || !utf8.ValidString(v) {
			return nil, fmt.Errorf("checkpoint: metadata %q: not valid UTF-8", k)
		}
	}
	maxShard := opts.MaxShardBytes
	if maxShard < 0 {
		return nil, fmt.Errorf("checkpoint: negative MaxShardBytes %d", maxShard)
	}
	if maxShard == 0 {
		maxShard = DefaultMaxShardBytes
	}
	if fill == nil {
		return nil, errors.New("checkpoint: WriteTensors: nil fill function")
	}
	if st, err := os.Stat(dir); err != nil {
		return nil, fmt.Errorf("checkpoint: %w", err)
	} else if !st.IsDir() {
		return nil, fmt.Errorf("checkpoint: %s is not a directory", dir)
	}

	// Plan the shards.
	res := &WriteResult{Dir: dir}
	var bounds []int // bounds[k] is the first spec of shard k
	var cur int64
	for i, n := range sizes {
		// A zero-length tensor never starts a shard of its own.
		if i == 0 || (cur > 0 && n > 0 && cur+n > maxShard) {
			bounds = append(bounds, i)
			cur = 0
		}
		cur += n
		res.TotalBytes += n
	}
	if len(specs) == 0 {
		bounds = []int{0}
	}
	bounds = append(bounds, len(specs))
	nShards := len(bounds) - 1
	res.Shards = make([]ShardResult, nShards)
	for k := range res.Shards {
		name := SingleFileName
		if nShards > 1 {
			name = ShardFileName(k, nShards)
			res.Index = IndexFileName
		}
		res.Shards[k].File = name
	}

	if err := clearCheckpoint(dir, opts.Overwrite); err != nil {
		return nil, err
	}

	w := &shardWriter{dir: dir, specs: specs, sizes: sizes, fill: fill, opts: opts, total: res.TotalBytes}
	ok := false
	defer func() {
		if !ok {
			w.cleanup()
		}
	}()
	if opts.Progress != nil {
		opts.Progress(0, res.TotalBytes)
	}
	for k := range res.Shards {
		if err := w.writeShard(&res.Shards[k], bounds[k], bounds[k+1]); err != nil {
			return nil, err
		}
	}

	// Every shard is complete on disk: move them into place, the file that
	// marks the checkpoint complete last.
	for k, s := range res.Shards {
		final := filepath.Join(dir, s.File)
		if err := os.Rename(w.temps[k], final); err != nil {
			return nil, fmt.Errorf("checkpoint: write %s: %w", final, err)
		}
		w.renamed = append(w.renamed, final)
	}
	if err := syncDir(dir); err != nil {
		return nil, fmt.Errorf("checkpoint: write %s: %w", filepath.Join(dir, res.Shards[nShards-1].File), err)
	}
	if nShards > 1 {
		idx, err := encodeIndex(res)
		if err != nil {
			return nil, err
		}
		if err := WriteFileAtomic(filepath.Join(dir, IndexFileName), idx, 0o644); err != nil {
			return nil, err
		}
	}
	ok = true
	return res, nil
}

// validateSpecs checks the specs and returns each tensor's data bytes.
func validateSpecs(specs []TensorSpec) ([]int64, error) {
	sizes := make([]int64, len(specs))
	seen := make(map[string]int, len(specs))
	for i, s := range specs {
		what := fmt.Sprintf("checkpoint: tensor %d (%q)", i, s.Name)
		switch {
		case s.Name == "":
			return nil, fmt.Errorf("checkpoint: tensor %d: empty name", i)
		case s.Name == metadataKey:
			return nil, fmt.Errorf("%s: the name is reserved for metadata", what)
		case !utf8.ValidString(s.Name):
			return nil, fmt.Errorf("%s: name is not valid UTF-8", what)
		case !s.DType.Valid():
			return nil, fmt.Errorf("%s: invalid dtype %v", what, s.DType)
		}
		if j, dup := seen[s.Name]; dup {
			return nil, fmt.Errorf("%s: duplicate name (also tensor %d)", what, j)
		}
		seen[s.Name] = i
		for _, d := range s.Shape {
			if d < 0 {
				return nil, fmt.Errorf("%s: negative dimension in shape %v", what, s.Shape)
			}
		}
		n, ok := shapeBytes(s.Shape, s.DType)
		if !ok {
			return nil, fmt.Errorf("%s: shape %v of %v overflows int64 bytes", what, s.Shape, s.DType)
		}
		sizes[i] = n
	}
	return sizes, nil
}

// isCheckpointFile reports whether name is one of the files of a Hugging Face
// safetensors checkpoint.
func isCheckpointFile(name string) bool {
	return name == SingleFileName || name == IndexFileName || shardNameRE.MatchString(name)
}

// clearCheckpoint refuses, or with overwrite removes, an existing checkpoint
// in dir. The index goes first, so the directory never looks complete with
// some of its shards gone.
func clearCheckpoint(dir string, overwrite bool) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	var found []string
	for _, e := range entries {
		if isCheckpointFile(e.Name()) {
			found = append(found, e.Name())
		}
	}
	if len(found) == 0 {
		return nil
	}
	if !overwrite {
		return fmt.Errorf("checkpoint: %s already holds a checkpoint (%s); remove it or set Overwrite", dir, found[0])
	}
	slices.SortStableFunc(found, func(a, b string) int {
		// The index, then the single file, then shards.
		rank := func(s string) int {
			switch s {
			case IndexFileName:
				return 0
			case SingleFileName:
				return 1
			}
			return 2
		}
		return rank(a) - rank(b)
	})
	for _, name := range found {
		if err := os.Remove(filepath.Join(dir, name)); err != nil {
			return fmt.Errorf("checkpoint: remove old checkpoint file: %w", err)
		}
		if name == IndexFileName || name == SingleFileName {
			if err := syncDir(dir); err != nil {
				return fmt.Errorf("checkpoint: %w", err)
			}
		}
	}
	return nil
}

// shardWriter streams shards to temporary files and tracks what to clean up.
type shardWriter struct {
	dir     string
	specs   []TensorSpec
	sizes   []int64
	fill    func(i int, w io.Writer) error
	opts    WriteOptions
	total   int64
	written int64

	temps   []string // temporary file of each shard written so far
	renamed []string // final files renamed into place by this call
}

// cleanup removes every file this write created.
func (w *shardWriter) cleanup() {
	for _, p := range w.temps {
		os.Remove(p)
	}
	for _, p := range w.renamed {
		os.Remove(p)
	}
	if len(w.renamed) > 0 {
		syncDir(w.dir)
	}
}

// writeShard writes specs[first:last] to a new temporary file.
func (w *shardWriter) writeShard(s *ShardResult, first, last int) error {
	final := filepath.Join(w.dir, s.File)
	infos := make([]TensorInfo, 0, last-first)
	var off int64
	for i := first; i < last; i++ {
		sp := w.specs[i]
		infos = append(infos, TensorInfo{Name: sp.Name, DType: sp.DType, Shape: sp.Shape, Begin: off, End: off + w.sizes[i]})
		off += w.sizes[i]
		s.Tensors = append(s.Tensors, sp.Name)
	}
	s.DataBytes = off
	hdr, err := encodeHeader(infos, w.opts.Metadata)
	if err != nil {
		return fmt.Errorf("checkpoint: write %s: %w", final, err)
	}
	s.FileBytes = 8 + int64(len(hdr)) + off

	f, err := createTemp(w.dir, s.File)
	if err != nil {
		return fmt.Errorf("checkpoint: write %s: %w", final, err)
	}
	w.temps = append(w.temps, f.Name())
	defer f.Close() // after finishTemp, a harmless second close

	var sink io.Writer = f
	if w.opts.wrap != nil {
		sink = w.opts.wrap(s.File, f)
	}
	bw := bufio.NewWriterSize(sink, writeBufferSize)
	var prefix [8]byte
	binary.LittleEndian.PutUint64(prefix[:], uint64(len(hdr)))
	bw.Write(prefix[:])
	if _, err := bw.Write(hdr); err != nil {
		return fmt.Errorf("checkpoint: write %s: header: %w", final, err)
	}
	for i := first; i < last; i++ {
		if err := w.writeTensor(bw, final, i); err != nil {
			return err
		}
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("checkpoint: write %s: %w", final, err)
	}
	if err := finishTemp(f, 0o644); err != nil {
		return fmt.Errorf("checkpoint: write %s: %w", final, err)
	}
	return nil
}

func (w *shardWriter) writeTensor(bw *bufio.Writer, final string, i int) error {
	name, want := w.specs[i].Name, w.sizes[i]
	cw := &countingWriter{w: bw, limit: want, sw: w}
	ferr := w.fill(i, cw)
	switch {
	case cw.err != nil:
		return fmt.Errorf("checkpoint: write %s: tensor %q: %w", final, name, cw.err)
	case cw.over:
		return fmt.Errorf("checkpoint: write %s: tensor %q: fill wrote more than the tensor's %d bytes", final, name, want)
	case ferr != nil:
		return fmt.Errorf("checkpoint: write %s: tensor %q: %w", final, name, ferr)
	case cw.n != want:
		return fmt.Errorf("checkpoint: write %s: tensor %q: fill wrote %d bytes, want %d", final, name, cw.n, want)
	}
	if w.opts.Progress != nil {
		w.opts.Progress(w.written, w.total)
	}
	return nil
}

// countingWriter passes a tensor's bytes through, refusing any beyond its
// length, and reports progress.
type countingWriter struct {
	w      io.Writer
	limit  int64
	n      int64
	over   bool
	err    error // the first error of the underlying writer
	sw     *shardWriter
	report int64 // bytes since the last Progress call
}

var errTooMuchData = errors.New("more bytes than the tensor holds")

func (c *countingWriter) Write(p []byte) (int, error) {
	if c.err != nil {
		return 0, c.err
	}
	if int64(len(p)) > c.limit-c.n {
		c.over = true
		return 0, errTooMuchData
	}
	n, err := c.w.Write(p)
	c.n += int64(n)
	c.sw.written += int64(n)
	if err != nil {
		c.err = err
		return n, err
	}
	if c.sw.opts.Progress != nil {
		c.report += int64(n)
		if c.report >= progressStep {
			c.report = 0
			c.sw.opts.Progress(c.sw.written, c.sw.total)
		}
	}
	return n, nil
}

// encodeHeader returns the JSON header of tensors (in the order given), with
// "__metadata__" first when metadata is non-empty, padded with spaces so the
// data section starts 8-byte aligned, as the reference writer does.
func encodeHeader(tensors []TensorInfo, metadata map[string]string) ([]byte, error) {
	var b []byte
	b = append(b, '{')
	if len(metadata) > 0 {
		b = appendJSONString(b, metadataKey)
		b = append(b, ":{"...)
		keys := make([]string, 0, len(metadata))
		for k := range metadata {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for i, k := range keys {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendJSONString(b, k)
			b = append(b, ':')
			b = appendJSONString(b, metadata[k])
		}
		b = append(b, '}')
	}
	for i, t := range tensors {
		if i > 0 || len(metadata) > 0 {
			b = append(b, ',')
		}
		b = appendJSONString(b, t.Name)
		b = append(b, `:{"dtype":`...)
		b = appendJSONString(b, t.DType.String())
		b = append(b, `,"shape":[`...)
		for j, d := range t.Shape {
			if j > 0 {
				b = append(b, ',')
			}
			b = strconv.AppendInt(b, d, 10)
		}
		b = append(b, `],"data_offsets":[`...)
		b = strconv.AppendInt(b, t.Begin, 10)
		b = append(b, ',')
		b = strconv.AppendInt(b, t.End, 10)
		b = append(b, "]}"...)
	}
	b = append(b, '}')
	for len(b)%8 != 0 {
		b = append(b, ' ')
	}
	if len(b) > MaxHeaderSize {
		return nil, fmt.Errorf("header would be %d bytes, more than the %d allowed", len(b), MaxHeaderSize)
	}
	return b, nil
}

// appendJSONString appends s as a JSON string, without HTML escaping.
func appendJSONString(b []byte, s string) []byte {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.Encode(s) // a string always encodes
	return append(b, bytes.TrimSuffix(buf.Bytes(), []byte("\n"))...)
}

// encodeIndex returns the index of a sharded checkpoint, formatted as
// transformers writes it (sorted keys, two-space indent, final newline).
func encodeIndex(res *WriteResult) ([]byte, error) {
	type meta struct {
		TotalBytes int64 `json:"total_size"`
	}
	idx := struct {
		Metadata  meta              `json:"metadata"`
		WeightMap map[string]string `json:"weight_map"`
	}{Metadata: meta{res.TotalBytes}, WeightMap: map[string]string{}}
	for _, s := range res.Shards {
		for _, t := range s.Tensors {
			idx.WeightMap[t] = s.File
		}
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(idx); err != nil {
		return nil, fmt.Errorf("checkpoint: encode index: %w", err)
	}
	return buf.Bytes(), nil
}
