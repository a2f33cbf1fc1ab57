package runtime

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/lowbit-ai/lowbit/checkpoint"
	"github.com/lowbit-ai/lowbit/format"
)

// ErrBinding is wrapped by every error Load returns for a checkpoint whose
// tensors do not match what the architecture needs: a missing tensor, a
// wrong dtype or shape, or a tensor left over.
var ErrBinding = errors.New("checkpoint tensors do not match the model")

// ErrUnsupported is wrapped by the error for an architecture, config
// setting or quantization that the runtime does not run yet.
var ErrUnsupported = errors.New("not supported yet")

// floatDTypes are the dtypes small float tensors (norm gains, scales) may
// have; they are converted to float32 at load.
var floatDTypes = []format.DType{format.BF16, format.F16, format.F32}

// want is what a tensor must be: one of dtypes, and one of shapes.
type want struct {
	dtypes []format.DType
	shapes [][]int64
}

func (w want) String() string {
	ds := make([]string, len(w.dtypes))
	for i, d := range w.dtypes {
		ds[i] = d.String()
	}
	ss := make([]string, len(w.shapes))
	for i, s := range w.shapes {
		ss[i] = fmt.Sprint(s)
	}
	return strings.Join(ds, " or ") + " " + strings.Join(ss, " or ")
}

// shape builds a shape from ints.
func shape(d ...int) []int64 {
	s := make([]int64, len(d))
	for i, v := range d {
		s[i] = int64(v)
	}
	return s
}

// Shapes of per-tensor scales: vLLM's PerTensorScaleParameter loads [1] or
// a 0-d scalar, so both are accepted wherever a scalar is stored.
var scalarShapes = [][]int64{{1}, {}}

// binder looks tensors up by name, checks their dtype and shape, and records
// which it used, so that leftovers can be reported. It collects every error
// instead of stopping at the first, so one Load names every problem.
type binder struct {
	ck   *checkpoint.Model
	used map[string]bool
	errs []error
}

func newBinder(ck *checkpoint.Model) *binder {
	return &binder{ck: ck, used: make(map[string]bool)}
}

func (b *binder) errorf(format string, args ...any) {
	b.errs = append(b.errs, fmt.Errorf(format, args...))
}

// info returns a tensor's header entry without marking it used.
func (b *binder) info(name string) (checkpoint.TensorEntry, bool) {
	return b.ck.Inventory().Lookup(name)
}

// get returns the named tensor if it exists and matches w; otherwise it
// records an error naming the tensor and what was expected.
func (b *binder) get(name string, w want) (checkpoint.Tensor, bool) {
	e, ok := b.info(name)
	if !ok {
		b.errorf("tensor %s: missing (want %s)", name, w)
		return checkpoint.Tensor{}, false
	}
	if b.used[name] {
		b.errorf("tensor %s: bound twice", name)
		return checkpoint.Tensor{}, false
	}
	b.used[name] = true
	if !slices.Contains(w.dtypes, e.DType) {
		b.errorf("tensor %s: dtype %s %v, want %s", name, e.DType, e.Shape, w)
		return checkpoint.Tensor{}, false
	}
	if !slices.ContainsFunc(w.shapes, func(s []int64) bool { return slices.Equal(s, e.Shape) }) {
		b.errorf("tensor %s: shape %s %v, want %s", name, e.DType, e.Shape, w)
		return checkpoint.Tensor{}, false
	}
	t, err := b.ck.Tensor(name)
	if err != nil {
		b.errs = append(b.errs, err)
		return checkpoint.Tensor{}, false
	}
	return t, true
}

// floats returns the named float tensor (any of floatDTypes, or dtypes when
// given) converted to float32.
func (b *binder) floats(name string, shapes [][]int64, dtypes ...format.DType) []float32 {
	if len(dtypes) == 0 {
		dtypes = floatDTypes
	}
	t, ok := b.get(name, want{dtypes, shapes})
	if !ok {
		return nil
	}
	out := make([]float32, t.Info.NumElements())
	format.DecodeFloat32s(t.Info.DType, out, t.Data)
	return out
}

// vector returns a float32 copy of a [n] float tensor, such as a norm gain.
func (b *binder) vector(name string, n int) []float32 {
	return b.floats(name, [][]int64{shape(n)})
}

// scalar returns a per-tensor scale, which must be finite and positive.
func (b *binder) scalar(name string, dtypes ...format.DType) float32 {
	v := b.floats(name, scalarShapes, dtypes...)
	if v == nil {
		return 0
	}
	if !(v[0] > 0) || v[0] > 3.4e38 {
		b.errorf("tensor %s: %g, want a finite positive scale", name, v[0])
		return 0
	}
	return v[0]
}

// ignorable matches tensors a checkpoint may hold that the runtime does not
// need, and that vLLM and transformers skip as well: the rotary inverse
// frequencies some older Llama checkpoints store (recomputed from the
// config).
var ignorable = regexp.MustCompile(`\.rotary_emb\.inv_freq$`)

// leftovers records an error for every tensor of the checkpoint that was
// not bound and that skip does not excuse.
func (b *binder) leftovers(skip func(name string) bool) {
	var left []string
	for _, e := range b.ck.Tensors() {
		if !b.used[e.Name] && !ignorable.MatchString(e.Name) && (skip == nil || !skip(e.Name)) {
			left = append(left, e.Name)
		}
	}
	if n := len(left); n > 0 {
		const show = 8
		more := ""
		if n > show {
			more = fmt.Sprintf(" and %d more", n-show)
			left = left[:show]
		}
		b.errorf("%d tensor(s) the model does not use: %s%s", n, strings.Join(left, ", "), more)
	}
}

// err returns the collected errors as one, wrapping ErrBinding; at most a
// dozen are spelled out.
func (b *binder) err() error {
	if len(b.errs) == 0 {
		return nil
	}
	const show = 12
	var lines []string
	for i, e := range b.errs {
		if i == show {
			lines = append(lines, fmt.Sprintf("... and %d more", len(b.errs)-show))
			break
		}
		lines = append(lines, "  "+e.Error())
	}
	return fmt.Errorf("runtime: %s: %w:\n%s", b.ck.Dir(), ErrBinding, strings.Join(lines, "\n"))
}
