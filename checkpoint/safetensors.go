package checkpoint

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strconv"
	"unicode/utf8"

	"github.com/lowbit-ai/lowbit/format"
)

// A safetensors file is an 8-byte little-endian header length N, N bytes of a
// JSON header, then the data section. The header maps each tensor name to
// {"dtype", "shape", "data_offsets": [begin, end]}, the offsets relative to the
// start of the data section, plus an optional "__metadata__" object of string
// values.

// MaxHeaderSize is the largest header length accepted, as in the reference Rust
// crate (100,000,000 bytes). A larger declared length is treated as corruption,
// so that a damaged length field can never make a reader allocate gigabytes.
const MaxHeaderSize = 100_000_000

// metadataKey is the reserved header key holding the string-to-string metadata.
const metadataKey = "__metadata__"

var (
	// ErrCorrupt is wrapped by every error that reports a malformed safetensors
	// file, index or model directory (as opposed to an I/O error).
	ErrCorrupt = errors.New("corrupt checkpoint")
	// ErrMissingTensor is wrapped by the error of a lookup of a tensor name
	// that the file or model does not hold.
	ErrMissingTensor = errors.New("tensor not found")
	// ErrClosed is wrapped by the error of a lookup on a closed File or Model.
	ErrClosed = errors.New("checkpoint closed")
)

// corruptf returns an error wrapping ErrCorrupt.
func corruptf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrCorrupt, fmt.Sprintf(format, args...))
}

// TensorInfo describes one tensor of a safetensors header.
type TensorInfo struct {
	Name  string
	DType format.DType
	Shape []int64
	// Begin and End are the tensor's byte offsets relative to the start of
	// the data section (Header.DataStart in the file); End-Begin == Bytes().
	Begin, End int64
}

// NumElements returns the product of the shape (1 for a scalar, shape []).
// For a TensorInfo that came from ParseHeader it cannot overflow.
func (t TensorInfo) NumElements() int64 {
	n := int64(1)
	for _, d := range t.Shape {
		n *= d
	}
	return n
}

// Bytes returns the tensor's data length, End-Begin.
func (t TensorInfo) Bytes() int64 { return t.End - t.Begin }

// Header is a parsed and validated safetensors header.
type Header struct {
	// Tensors are sorted by Begin (ties, which only zero-length tensors can
	// have, by name); they tile the data section exactly: the first begins
	// at 0, each begins where the previous one ends, the last ends at
	// DataSize.
	Tensors []TensorInfo
	// Metadata is the "__metadata__" object; nil when the header has none.
	Metadata map[string]string
	// DataStart is the file offset of the data section: 8 + header length.
	DataStart int64
	// DataSize is the length of the data section, which ends at end of file.
	DataSize int64

	byName map[string]int
}

// Lookup returns the named tensor's info. It uses the index that ParseHeader
// builds; on a Header built by hand it falls back to a linear scan.
func (h *Header) Lookup(name string) (TensorInfo, bool) {
	if h.byName == nil {
		for _, t := range h.Tensors {
			if t.Name == name {
				return t, true
			}
		}
		return TensorInfo{}, false
	}
	i, ok := h.byName[name]
	if !ok {
		return TensorInfo{}, false
	}
	return h.Tensors[i], true
}

func (h *Header) index() {
	h.byName = make(map[string]int, len(h.Tensors))
	for i, t := range h.Tensors {
		h.byName[t.Name] = i
	}
}

// ParseHeader parses and validates the JSON header b of a safetensors file
// (the N bytes after the length prefix) whose data section is dataSize bytes
// long. It is a pure function of its arguments and never panics; every error
// wraps ErrCorrupt and names the offending tensor.
//
// Beyond the JSON being well formed (valid UTF-8, no duplicate keys, an object
// starting at the first byte, nothing after it but ASCII spaces, which the
// reference writer pads with), it checks that every tensor entry has exactly
// the fields dtype (a known name), shape (non-negative integers) and
// data_offsets ([begin, end], begin <= end <= dataSize), that the shape's byte
// size equals end-begin, and that the tensors tile the data section with no
// overlap and no gap. "__metadata__", when present, must be an object of
// strings (or null).
func ParseHeader(b []byte, dataSize int64) (*Header, error) {
	if dataSize < 0 {
		return nil, corruptf("negative data section size %d", dataSize)
	}
	if len(b) > MaxHeaderSize {
		return nil, corruptf("header is %d bytes, more than the %d allowed", len(b), MaxHeaderSize)
	}
	if len(b) == 0 || b[0] != '{' {
		return nil, corruptf("header does not start with '{'")
	}
	if !utf8.Valid(b) {
		return nil, corruptf("header is not valid UTF-8")
	}
	p := headerParser{dec: json.NewDecoder(bytes.NewReader(b))}
	p.dec.UseNumber()
	h := &Header{DataStart: 8 + int64(len(b)), DataSize: dataSize}
	if err := p.parse(h); err != nil {
		return nil, err
	}
	rest := b[p.dec.InputOffset():]
	if i := bytes.IndexFunc(rest, func(r rune) bool { return r != ' ' }); i >= 0 {
		return nil, corruptf("unexpected byte %q after the header's JSON object at offset %d (only space padding may follow)",
			rest[i], len(b)-len(rest)+i)
	}
	if err := h.validateLayout(); err != nil {
		return nil, err
	}
	h.index()
	return h, nil
}

// validateLayout sorts the tensors by offset and checks that they tile
// [0, DataSize) exactly.
func (h *Header) validateLayout() error {
	slices.SortFunc(h.Tensors, func(a, b TensorInfo) int {
		return cmp.Or(cmp.Compare(a.Begin, b.Begin), cmp.Compare(a.End, b.End), cmp.Compare(a.Name, b.Name))
	})
	var pos int64
	for i, t := range h.Tensors {
		switch {
		case t.Begin < pos:
			p := h.Tensors[i-1]
			return corruptf("tensor %q: data_offsets [%d, %d] overlap tensor %q [%d, %d]", t.Name, t.Begin, t.End, p.Name, p.Begin, p.End)
		case t.Begin > pos:
			if i == 0 {
				return corruptf("tensor %q: data_offsets [%d, %d] leave a gap: the data section's first %d bytes belong to no tensor", t.Name, t.Begin, t.End, t.Begin)
			}
			p := h.Tensors[i-1]
			return corruptf("tensor %q: data_offsets [%d, %d] leave a gap of %d bytes after tensor %q [%d, %d]", t.Name, t.Begin, t.End, t.Begin-pos, p.Name, p.Begin, p.End)
		}
		pos = t.End
	}
	if pos != h.DataSize {
		if len(h.Tensors) == 0 {
			return corruptf("header declares no tensors but the data section is %d bytes", h.DataSize)
		}
		last := h.Tensors[len(h.Tensors)-1]
		return corruptf("tensors end at data offset %d (tensor %q) but the data section is %d bytes: %d trailing bytes belong to no tensor", pos, last.Name, h.DataSize, h.DataSize-pos)
	}
	return nil
}

// headerParser walks the header's JSON tokens, so that duplicate keys,
// unknown fields and wrong types are caught without an intermediate tree.
type headerParser struct {
	dec *json.Decoder
}

func (p *headerParser) token(what string) (json.Token, error) {
	tok, err := p.dec.Token()
	if err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return nil, corruptf("%s: malformed JSON near byte %d: %v", what, p.dec.InputOffset(), err)
	}
	return tok, nil
}

func (p *headerParser) delim(want json.Delim, what string) error {
	tok, err := p.token(what)
	if err != nil {
		return err
	}
	if d, ok := tok.(json.Delim); !ok || d != want {
		return corruptf("%s: expected %q, got %s", what, want, describeToken(tok))
	}
	return nil
}

// describeToken names a JSON token for an error message.
func describeToken(tok json.Token) string {
	switch v := tok.(type) {
	case json.Delim:
		switch v {
		case '{':
			return "an object"
		case '[':
			return "an array"
		}
		return fmt.Sprintf("%q", rune(v))
	case string:
		return fmt.Sprintf("string %q", truncate(v, 40))
	case json.Number:
		return "number " + truncate(string(v), 40)
	case bool:
		return fmt.Sprintf("%v", v)
	case nil:
		return "null"
	}
	return fmt.Sprintf("%v", tok)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

func (p *headerParser) parse(h *Header) error {
	if err := p.delim('{', "header"); err != nil {
		return err
	}
	seen := make(map[string]bool)
	for p.dec.More() {
		tok, err := p.token("header key")
		if err != nil {
			return err
		}
		name, ok := tok.(string)
		if !ok {
			return corruptf("header: expected a key, got %s", describeToken(tok))
		}
		if seen[name] {
			if name == metadataKey {
				return corruptf("duplicate %q key", metadataKey)
			}
			return corruptf("tensor %q: duplicate tensor name", name)
		}
		seen[name] = true
		if name == metadataKey {
			if h.Metadata, err = p.metadata(); err != nil {
				return err
			}
			continue
		}
		if name == "" {
			return corruptf("empty tensor name")
		}
		t, err := p.tensor(name, h.DataSize)
		if err != nil {
			return err
		}
		h.Tensors = append(h.Tensors, t)
	}
	return p.delim('}', "header")
}

func (p *headerParser) metadata() (map[string]string, error) {
	tok, err := p.token(metadataKey)
	if err != nil {
		return nil, err
	}
	if tok == nil {
		return nil, nil // null: no metadata, as the Rust crate's Option allows
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, corruptf("%s: expected an object of strings, got %s", metadataKey, describeToken(tok))
	}
	m := make(map[string]string)
	for p.dec.More() {
		tok, err := p.token(metadataKey + " key")
		if err != nil {
			return nil, err
		}
		k, ok := tok.(string)
		if !ok {
			return nil, corruptf("%s: expected a key, got %s", metadataKey, describeToken(tok))
		}
		if _, dup := m[k]; dup {
			return nil, corruptf("%s: duplicate key %q", metadataKey, k)
		}
		tok, err = p.token(metadataKey + " value")
		if err != nil {
			return nil, err
		}
		v, ok := tok.(string)
		if !ok {
			return nil, corruptf("%s: value of %q must be a string, got %s", metadataKey, k, describeToken(tok))
		}
		m[k] = v
	}
	if err := p.delim('}', metadataKey); err != nil {
		return nil, err
	}
	return m, nil
}

func (p *headerParser) tensor(name string, dataSize int64) (TensorInfo, error) {
	t := TensorInfo{Name: name}
	what := fmt.Sprintf("tensor %q", name)
	if err := p.delim('{', what); err != nil {
		return t, err
	}
	const (
		hasDType = 1 << iota
		hasShape
		hasOffsets
	)
	var have int
	for p.dec.More() {
		tok, err := p.token(what + " field")
		if err != nil {
			return t, err
		}
		field, ok := tok.(string)
		if !ok {
			return t, corruptf("%s: expected a field name, got %s", what, describeToken(tok))
		}
		var bit int
		switch field {
		case "dtype":
			bit = hasDType
		case "shape":
			bit = hasShape
		case "data_offsets":
			bit = hasOffsets
		default:
			return t, corruptf("%s: unknown field %q", what, truncate(field, 40))
		}
		if have&bit != 0 {
			return t, corruptf("%s: duplicate field %q", what, field)
		}
		have |= bit
		switch field {
		case "dtype":
			tok, err := p.token(what + " dtype")
			if err != nil {
				return t, err
			}
			s, ok := tok.(string)
			if !ok {
				return t, corruptf("%s: dtype must be a string, got %s", what, describeToken(tok))
			}
			d, err := format.ParseDType(s)
			if err != nil {
				return t, corruptf("%s: unknown dtype %q", what, truncate(s, 40))
			}
			t.DType = d
		case "shape":
			if t.Shape, err = p.ints(what+" shape", -1); err != nil {
				return t, err
			}
			if t.Shape == nil {
				t.Shape = []int64{}
			}
		case "data_offsets":
			offs, err := p.ints(what+" data_offsets", 2)
			if err != nil {
				return t, err
			}
			t.Begin, t.End = offs[0], offs[1]
		}
	}
	if err := p.delim('}', what); err != nil {
		return t, err
	}
	for _, f := range []struct {
		bit  int
		name string
	}{{hasDType, "dtype"}, {hasShape, "shape"}, {hasOffsets, "data_offsets"}} {
		if have&f.bit == 0 {
			return t, corruptf("%s: missing field %q", what, f.name)
		}
	}
	if t.Begin > t.End {
		return t, corruptf("%s: data_offsets [%d, %d] end before they begin", what, t.Begin, t.End)
	}
	if t.End > dataSize {
		return t, corruptf("%s: data_offsets [%d, %d] run past the end of the %d-byte data section", what, t.Begin, t.End, dataSize)
	}
	n, ok := shapeBytes(t.Shape, t.DType)
	if !ok {
		return t, corruptf("%s: shape %v of %s overflows int64 bytes", what, t.Shape, t.DType)
	}
	if n != t.End-t.Begin {
		return t, corruptf("%s: shape %v of %s is %d bytes but data_offsets [%d, %d] hold %d", what, t.Shape, t.DType, n, t.Begin, t.End, t.End-t.Begin)
	}
	return t, nil
}

// ints reads an array of non-negative int64s; n >= 0 requires exactly n.
func (p *headerParser) ints(what string, n int) ([]int64, error) {
	if err := p.delim('[', what); err != nil {
		return nil, err
	}
	var out []int64
	for p.dec.More() {
		tok, err := p.token(what)
		if err != nil {
			return nil, err
		}
		num, ok := tok.(json.Number)
		if !ok {
			return nil, corruptf("%s: expected an integer, got %s", what, describeToken(tok))
		}
		v, err := strconv.ParseInt(string(num), 10, 64)
		if err != nil || v < 0 {
			return nil, corruptf("%s: %s is not a non-negative 64-bit integer", what, truncate(string(num), 40))
		}
		if n >= 0 && len(out) == n {
			return nil, corruptf("%s: more than %d values", what, n)
		}
		out = append(out, v)
	}
	if err := p.delim(']', what); err != nil {
		return nil, err
	}
	if n >= 0 && len(out) != n {
		return nil, corruptf("%s: %d values, want %d", what, len(out), n)
	}
	return out, nil
}

// shapeBytes returns product(shape)*d.Size(), reporting false on int64
// overflow. A zero dimension makes the product 0 whatever the others are.
func shapeBytes(shape []int64, d format.DType) (int64, bool) {
	if slices.Contains(shape, 0) {
		return 0, true
	}
	n := int64(d.Size())
	for _, s := range shape {
		if s < 0 {
			return 0, false
		}
		if n > math.MaxInt64/s {
			return 0, false
		}
		n *= s
	}
	return n, true
}

// ReadHeader reads and validates only the header of the safetensors file at
// path: it reads the 8-byte length and the JSON header and takes the data
// section's size from the file's size, never reading or mapping the data. It
// is what inspecting a multi-gigabyte checkpoint should use. Errors name the
// path; malformed files give errors wrapping ErrCorrupt.
func ReadHeader(path string) (*Header, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	defer f.Close()
	h, err := readHeaderFrom(f)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: %s: %w", path, err)
	}
	return h, nil
}

// readHeaderFrom reads the header of an open safetensors file.
func readHeaderFrom(f *os.File) (*Header, error) {
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("not a regular file (%v)", st.Mode().Type())
	}
	var prefix [8]byte
	if _, err := io.ReadFull(f, prefix[:]); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, corruptf("file is %d bytes, too short for the 8-byte header length", st.Size())
		}
		return nil, err
	}
	n, err := headerLength(prefix[:], st.Size())
	if err != nil {
		return nil, err
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(f, b); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, corruptf("file truncated while reading the %d-byte header", n)
		}
		return nil, err
	}
	return ParseHeader(b, st.Size()-8-n)
}

// headerLength decodes and checks the length prefix of a fileSize-byte file.
func headerLength(prefix []byte, fileSize int64) (int64, error) {
	if fileSize < 8 {
		return 0, corruptf("file is %d bytes, too short for the 8-byte header length", fileSize)
	}
	u := binary.LittleEndian.Uint64(prefix)
	if u > MaxHeaderSize {
		return 0, corruptf("header length %d exceeds the %d-byte limit", u, MaxHeaderSize)
	}
	n := int64(u)
	if n > fileSize-8 {
		return 0, corruptf("header length %d runs past the end of the %d-byte file (truncated file?)", n, fileSize)
	}
	return n, nil
}
