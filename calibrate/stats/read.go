package stats

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"sync"

	"github.com/lowbit-ai/lowbit/checkpoint"
	"github.com/lowbit-ai/lowbit/format"
)

// Stats is an open statistics file, mapped read-only. Its accessors are safe
// for concurrent use; Close must not race with them.
type Stats struct {
	path    string
	file    *checkpoint.File
	meta    Meta
	linears map[string]*linearInfo
	attns   map[string]*attnInfo

	mu      sync.Mutex
	checked map[string]error // Hessians whose values were checked, and the result
}

// linearInfo locates one linear module's tensors.
type linearInfo struct {
	absmax, channel, mean checkpoint.TensorInfo
	hessian, tokens       checkpoint.TensorInfo
	hasHessian            bool
}

func (l *linearInfo) in() int { return int(l.channel.Shape[0]) }

// attnInfo locates one attention module's tensors.
type attnInfo struct {
	k, v     checkpoint.TensorInfo
	heads    checkpoint.TensorInfo
	hasHeads bool
}

// Open maps the statistics file at path and validates it: the metadata and
// version, every tensor's name, dtype and shape, and every value except the
// Hessians', which are checked on first access. Errors name the path; they
// wrap ErrVersion, ErrInvalid or (for a malformed safetensors file)
// checkpoint.ErrCorrupt.
func Open(path string) (*Stats, error) {
	f, err := checkpoint.OpenFile(path)
	if err != nil {
		return nil, fmt.Errorf("stats: %w", err)
	}
	s := &Stats{path: path, file: f, checked: map[string]error{}}
	if err := s.load(); err != nil {
		f.Close()
		return nil, fmt.Errorf("stats: %s: %w", path, err)
	}
	return s, nil
}

func (s *Stats) load() error {
	h := s.file.Header()
	var err error
	if s.meta, err = parseMeta(h.Metadata); err != nil {
		return err
	}
	if s.linears, s.attns, err = indexHeader(h); err != nil {
		return err
	}
	for _, m := range sortedKeys(s.linears) {
		l := s.linears[m]
		st := Linear{Module: m, ChannelAbsMax: s.f32s(l.channel), MeanAbs: s.f32s(l.mean)}
		st.InputAbsMax = s.f32s(l.absmax)[0]
		if l.hasHessian {
			st.Hessian = func(int, []float32) error { return nil } // checked on access
			st.HessianTokens = int64(binary.LittleEndian.Uint64(s.data(l.tokens)))
		}
		if err := checkLinear(st); err != nil {
			return err
		}
	}
	for _, m := range sortedKeys(s.attns) {
		a := s.attns[m]
		st := Attention{Module: m, KAbsMax: s.f32s(a.k)[0], VAbsMax: s.f32s(a.v)[0]}
		if a.hasHeads {
			st.KHeadAbsMax = s.f32s(a.heads)
		}
		if err := checkAttention(st); err != nil {
			return err
		}
	}
	return nil
}

// indexHeader groups a header's tensors by module and checks their names,
// dtypes and shapes. It reads no tensor data.
func indexHeader(h *checkpoint.Header) (map[string]*linearInfo, map[string]*attnInfo, error) {
	type found struct {
		kind    kind
		tensors map[string]checkpoint.TensorInfo
	}
	modules := map[string]*found{}
	for _, t := range h.Tensors {
		module, suffix, err := parseName(t.Name)
		if err != nil {
			return nil, nil, err
		}
		want := suffixes[suffix]
		if t.DType != want.dtype {
			return nil, nil, invalidf("tensor %s is %s, want %s", t.Name, t.DType, want.dtype)
		}
		m := modules[module]
		if m == nil {
			m = &found{kind: want.kind, tensors: map[string]checkpoint.TensorInfo{}}
			modules[module] = m
		}
		if m.kind != want.kind {
			return nil, nil, invalidf("module %s has both linear and attention statistics (tensor %s)", module, t.Name)
		}
		m.tensors[suffix] = t // names are unique, so suffixes are too
	}
	if len(modules) == 0 {
		return nil, nil, invalidf("the file holds no statistics")
	}

	linears := map[string]*linearInfo{}
	attns := map[string]*attnInfo{}
	for module, m := range modules {
		get := func(suffix string, required bool, dims ...int64) (checkpoint.TensorInfo, bool, error) {
			t, ok := m.tensors[suffix]
			if !ok {
				if required {
					return t, false, invalidf("module %s has no %s", module, suffix)
				}
				return t, false, nil
			}
			if !slices.Equal(t.Shape, dims) {
				return t, false, invalidf("tensor %s has shape %v, want %v", t.Name, t.Shape, dims)
			}
			return t, true, nil
		}
		// vector returns the length of a rank-1 tensor with at least one element.
		vector := func(suffix string) (int64, bool, error) {
			t, ok := m.tensors[suffix]
			if !ok {
				return 0, false, nil
			}
			if len(t.Shape) != 1 || t.Shape[0] < 1 {
				return 0, false, invalidf("tensor %s has shape %v, want [n] with n >= 1", t.Name, t.Shape)
			}
			return t.Shape[0], true, nil
		}
		var err error
		switch m.kind {
		case linearStat:
			l := &linearInfo{}
			n, ok, err := vector(sufChannelAbsMax)
			if err != nil {
				return nil, nil, err
			}
			if !ok {
				return nil, nil, invalidf("module %s has no %s", module, sufChannelAbsMax)
			}
			l.channel = m.tensors[sufChannelAbsMax]
			if n > math.MaxInt32 {
				return nil, nil, invalidf("tensor %s: %d input channels", l.channel.Name, n)
			}
			if l.absmax, _, err = get(sufInputAbsMax, true, 1); err != nil {
				return nil, nil, err
			}
			if l.mean, _, err = get(sufMeanAbs, true, n); err != nil {
				return nil, nil, err
			}
			var hasTokens bool
			if l.hessian, l.hasHessian, err = get(sufHessian, false, n, n); err != nil {
				return nil, nil, err
			}
			if l.tokens, hasTokens, err = get(sufHessianTokens, false, 1); err != nil {
				return nil, nil, err
			}
			if l.hasHessian != hasTokens {
				return nil, nil, invalidf("module %s has one of %s and %s without the other", module, sufHessian, sufHessianTokens)
			}
			linears[module] = l
		case attentionStat:
			a := &attnInfo{}
			if a.k, _, err = get(sufKAbsMax, true, 1); err != nil {
				return nil, nil, err
			}
			if a.v, _, err = get(sufVAbsMax, true, 1); err != nil {
				return nil, nil, err
			}
			if _, a.hasHeads, err = vector(sufKHeadAbsMax); err != nil {
				return nil, nil, err
			}
			a.heads = m.tensors[sufKHeadAbsMax]
			attns[module] = a
		}
	}
	return linears, attns, nil
}

// data returns a tensor's bytes in the mapping; the file must be open.
func (s *Stats) data(t checkpoint.TensorInfo) []byte {
	v, err := s.file.Tensor(t.Name)
	if err != nil {
		panic(err) // load runs on an open file whose header holds t
	}
	return v.Data
}

// f32s decodes an F32 tensor.
func (s *Stats) f32s(t checkpoint.TensorInfo) []float32 {
	out := make([]float32, t.NumElements())
	format.DecodeF32(out, s.data(t))
	return out
}

// read decodes an F32 tensor for an accessor: an error for a closed file.
func (s *Stats) read(t checkpoint.TensorInfo) ([]float32, error) {
	v, err := s.file.Tensor(t.Name)
	if err != nil {
		return nil, fmt.Errorf("stats: %w", err)
	}
	out := make([]float32, t.NumElements())
	format.DecodeF32(out, v.Data)
	return out, nil
}

// Close unmaps the file. Every Hessian view obtained from s becomes invalid.
// Closing twice is a no-op.
func (s *Stats) Close() error { return s.file.Close() }

// Path returns the path the file was opened with.
func (s *Stats) Path() string { return s.path }

// Meta returns how the file was made.
func (s *Stats) Meta() Meta { return s.meta }

// Modules returns the linear modules with statistics, in natural order
// (layers.2 before layers.10).
func (s *Stats) Modules() []string { return sortedKeys(s.linears) }

// AttentionModules returns the attention modules with KV-cache statistics,
// in natural order.
func (s *Stats) AttentionModules() []string { return sortedKeys(s.attns) }

// missing returns the ErrMissing error for what (a module or tensor name).
func (s *Stats) missing(what, hint string) error {
	return fmt.Errorf("stats: %w for %s: the statistics file %s was made for %s%s; run lowbit calibrate", ErrMissing, what, s.path, s.meta.describe(), hint)
}

func (s *Stats) linear(module string) (*linearInfo, error) {
	l, ok := s.linears[module]
	if !ok {
		hint := ""
		if _, isAttn := s.attns[module]; isAttn {
			hint = " (it holds KV-cache statistics for this attention module, not linear ones)"
		}
		return nil, s.missing(module, hint)
	}
	return l, nil
}

// InputAbsMax returns max |x| over the inputs of a linear module.
func (s *Stats) InputAbsMax(module string) (float32, error) {
	l, err := s.linear(module)
	if err != nil {
		return 0, err
	}
	v, err := s.read(l.absmax)
	if err != nil {
		return 0, err
	}
	return v[0], nil
}

// ChannelAbsMax returns max |x[c]| per input channel of a linear module.
func (s *Stats) ChannelAbsMax(module string) ([]float32, error) {
	l, err := s.linear(module)
	if err != nil {
		return nil, err
	}
	return s.read(l.channel)
}

// MeanAbs returns the mean of |x[c]| per input channel of a linear module.
func (s *Stats) MeanAbs(module string) ([]float32, error) {
	l, err := s.linear(module)
	if err != nil {
		return nil, err
	}
	return s.read(l.mean)
}

// HasHessian reports whether the file holds a Hessian for module.
func (s *Stats) HasHessian(module string) bool {
	l, ok := s.linears[module]
	return ok && l.hasHessian
}

// Hessian returns the Hessian of a linear module as a view of the mapping,
// valid until s is closed. On first access its values are checked (finite,
// non-negative diagonal), which reads all of it.
func (s *Stats) Hessian(module string) (Hessian, error) {
	l, err := s.linear(module)
	if err != nil {
		return Hessian{}, err
	}
	if !l.hasHessian {
		return Hessian{}, s.missing(module+"."+sufHessian, " without Hessians for this module (GPTQ needs them)")
	}
	v, err := s.file.Tensor(l.hessian.Name)
	if err != nil {
		return Hessian{}, fmt.Errorf("stats: %w", err)
	}
	tok, err := s.file.Tensor(l.tokens.Name)
	if err != nil {
		return Hessian{}, fmt.Errorf("stats: %w", err)
	}
	h := Hessian{module: module, n: l.in(), tokens: int64(binary.LittleEndian.Uint64(tok.Data)), data: v.Data}
	s.mu.Lock()
	res, done := s.checked[module]
	s.mu.Unlock()
	if !done {
		res = h.check()
		s.mu.Lock()
		s.checked[module] = res
		s.mu.Unlock()
	}
	if res != nil {
		return Hessian{}, fmt.Errorf("stats: %s: %w", s.path, res)
	}
	return h, nil
}

// KVAbsMax returns max |k| and max |v| of an attention module.
func (s *Stats) KVAbsMax(attn string) (k, v float32, err error) {
	a, ok := s.attns[attn]
	if !ok {
		return 0, 0, s.missing(attn, " (no KV-cache statistics for this attention module)")
	}
	kv, err := s.read(a.k)
	if err != nil {
		return 0, 0, err
	}
	vv, err := s.read(a.v)
	if err != nil {
		return 0, 0, err
	}
	return kv[0], vv[0], nil
}

// KHeadAbsMax returns max |k| per KV head of an attention module; it wraps
// ErrMissing when the file holds only the per-tensor maximum.
func (s *Stats) KHeadAbsMax(attn string) ([]float32, error) {
	a, ok := s.attns[attn]
	if !ok {
		return nil, s.missing(attn, " (no KV-cache statistics for this attention module)")
	}
	if !a.hasHeads {
		return nil, s.missing(attn+"."+sufKHeadAbsMax, " without per-head key statistics")
	}
	return s.read(a.heads)
}

// CheckModel returns nil when the statistics were collected on the model
// whose config.json is configJSON (its bytes hash to the file's
// config_sha256), and otherwise an error wrapping ErrWrongModel.
func (s *Stats) CheckModel(configJSON []byte) error {
	h := ConfigSHA256(configJSON)
	if h == s.meta.ConfigSHA256 {
		return nil
	}
	var cfg struct {
		ModelType string `json:"model_type"`
	}
	_ = json.Unmarshal(configJSON, &cfg) // only to name the model in the message
	if cfg.ModelType == "" {
		cfg.ModelType = "unknown model_type"
	}
	return fmt.Errorf("stats: %w (the statistics file %s was made for %s, config sha256 %s; this model is %s, config sha256 %s): rerun lowbit calibrate on this model",
		ErrWrongModel, s.path, s.meta.ModelType, shortHash(s.meta.ConfigSHA256), cfg.ModelType, shortHash(h))
}

// Hessian is a read-only view of an [N, N] float32 Hessian, the sum over
// Tokens tokens of x xᵀ, in a mapped statistics file. It is valid until the
// Stats it came from is closed; using it afterwards faults. The zero value
// is an empty Hessian.
type Hessian struct {
	module string
	n      int
	tokens int64
	data   []byte // n*n little-endian float32s, row-major
}

// Module returns the linear module the Hessian belongs to.
func (h Hessian) Module() string { return h.module }

// N returns the Hessian's size, the module's in_features.
func (h Hessian) N() int { return h.n }

// Tokens returns the number of tokens summed; H/Tokens is the mean x xᵀ.
func (h Hessian) Tokens() int64 { return h.tokens }

// At returns H[i, j]. It panics unless 0 <= i, j < N.
func (h Hessian) At(i, j int) float32 {
	if uint(i) >= uint(h.n) || uint(j) >= uint(h.n) {
		panic(fmt.Sprintf("stats: Hessian.At(%d, %d) out of range [0, %d)", i, j, h.n))
	}
	return math.Float32frombits(binary.LittleEndian.Uint32(h.data[4*(i*h.n+j):]))
}

// Row decodes row i into dst, which must hold N elements, and returns it; a
// nil dst is allocated. It panics unless 0 <= i < N.
func (h Hessian) Row(i int, dst []float32) []float32 {
	if uint(i) >= uint(h.n) {
		panic(fmt.Sprintf("stats: Hessian.Row(%d) out of range [0, %d)", i, h.n))
	}
	if dst == nil {
		dst = make([]float32, h.n)
	}
	format.DecodeF32(dst, h.data[4*i*h.n:4*(i+1)*h.n])
	return dst
}

// Float32 returns a row-major copy of the whole Hessian (N*N elements).
func (h Hessian) Float32() []float32 {
	out := make([]float32, h.n*h.n)
	format.DecodeF32(out, h.data)
	return out
}

// check verifies that every element is finite and the diagonal is
// non-negative.
func (h Hessian) check() error {
	name := h.module + "." + sufHessian
	for i := range h.n {
		row := h.data[4*i*h.n : 4*(i+1)*h.n]
		for j := range h.n {
			v := math.Float32frombits(binary.LittleEndian.Uint32(row[4*j:]))
			if !finite(v) {
				return invalidf("%s[%d, %d] is %v", name, i, j, v)
			}
			if i == j && v < 0 {
				return invalidf("%s[%d, %d] = %v: a diagonal element (a sum of squares) is negative", name, i, i, v)
			}
		}
	}
	return nil
}

// sortedKeys returns m's keys in natural order.
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, checkpoint.CompareNames)
	return keys
}
