package stats

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"syscall"

	"github.com/lowbit-ai/lowbit/checkpoint"
	"github.com/lowbit-ai/lowbit/format"
)

// Linear holds the statistics of one quantized linear module.
type Linear struct {
	// Module is the Hugging Face module name, "model.layers.0.self_attn.q_proj".
	Module string
	// InputAbsMax is max |x| over every input element of every token; it
	// must equal the maximum of ChannelAbsMax.
	InputAbsMax float32
	// ChannelAbsMax is max |x[c]| per input channel; its length is the
	// module's in_features.
	ChannelAbsMax []float32
	// MeanAbs is the mean of |x[c]| per input channel, len(ChannelAbsMax)
	// long, each at most ChannelAbsMax[c].
	MeanAbs []float32
	// Hessian, when set, supplies the [in, in] sum over tokens of x xᵀ; nil
	// writes none. HessianTokens is the number of tokens summed, at least
	// 1 when Hessian is set.
	Hessian       HessianRows
	HessianTokens int64
}

// HessianRows fills row, whose length n is the Hessian's size, with row i of
// an [n, n] Hessian. Write calls it for i = 0, 1, ..., n-1 in order, with a
// zeroed row each time, so a Hessian streams to disk with one row of memory.
type HessianRows func(i int, row []float32) error

// HessianFromFloat64 returns the rows of h, a row-major [n, n] float64
// Hessian (as accumulated during calibration), each element rounded to the
// nearest float32.
func HessianFromFloat64(h []float64) HessianRows {
	return func(i int, row []float32) error {
		n := len(row)
		if len(h) != n*n {
			return invalidf("Hessian holds %d elements, want %d × %d", len(h), n, n)
		}
		for j, v := range h[i*n : (i+1)*n] {
			row[j] = float32(v)
		}
		return nil
	}
}

// HessianFromFloat32 returns the rows of h, a row-major [n, n] float32
// Hessian.
func HessianFromFloat32(h []float32) HessianRows {
	return func(i int, row []float32) error {
		n := len(row)
		if len(h) != n*n {
			return invalidf("Hessian holds %d elements, want %d × %d", len(h), n, n)
		}
		copy(row, h[i*n:(i+1)*n])
		return nil
	}
}

// Attention holds the KV-cache statistics of one attention module.
type Attention struct {
	// Module is the attention module's name, "model.layers.0.self_attn".
	Module string
	// KAbsMax and VAbsMax are max |k| and max |v| over the keys (after
	// k_norm and RoPE) and values handed to the KV cache.
	KAbsMax, VAbsMax float32
	// KHeadAbsMax, optional, is max |k| per KV head; its maximum must equal
	// KAbsMax.
	KHeadAbsMax []float32
}

// WriteOptions configures Write. The zero value is usable.
type WriteOptions struct {
	// Progress, when set, is called with the bytes of tensor data written
	// so far and the total, after each tensor and every 64 MiB within one.
	Progress func(written, total int64)
}

// Write writes a statistics file to path: the metadata of meta (with the
// format version added), then the statistics of linears and attention, in
// the order given, then the Hessians. Everything but the Hessians' values is
// checked before anything is written; Hessian rows are checked as they
// stream (finite, non-negative diagonal), and a bad one aborts the write.
//
// The file is written into a temporary directory next to path, synced and
// renamed over path, so path holds either its old contents or the complete
// new file, never a part. Errors wrap ErrInvalid for statistics that break
// the format.
func Write(path string, meta Meta, linears []Linear, attention []Attention, opts WriteOptions) (err error) {
	defer func() {
		if err != nil {
			err = fmt.Errorf("stats: write %s: %w", path, err)
		}
	}()
	if err := meta.validate(); err != nil {
		return err
	}
	if len(linears) == 0 && len(attention) == 0 {
		return invalidf("no statistics to write")
	}
	seen := make(map[string]bool, len(linears)+len(attention))
	for _, l := range linears {
		if err := checkLinear(l); err != nil {
			return err
		}
		if seen[l.Module] {
			return invalidf("module %s given twice", l.Module)
		}
		seen[l.Module] = true
	}
	for _, a := range attention {
		if err := checkAttention(a); err != nil {
			return err
		}
		if seen[a.Module] {
			return invalidf("module %s given twice", a.Module)
		}
		seen[a.Module] = true
	}

	var specs []checkpoint.TensorSpec
	var fills []func(w io.Writer) error
	add := func(module, suffix string, shape []int64, fill func(w io.Writer) error) {
		specs = append(specs, checkpoint.TensorSpec{Name: module + "." + suffix, DType: suffixes[suffix].dtype, Shape: shape})
		fills = append(fills, fill)
	}
	for _, l := range linears {
		n := int64(len(l.ChannelAbsMax))
		add(l.Module, sufInputAbsMax, []int64{1}, f32Fill([]float32{l.InputAbsMax}))
		add(l.Module, sufChannelAbsMax, []int64{n}, f32Fill(l.ChannelAbsMax))
		add(l.Module, sufMeanAbs, []int64{n}, f32Fill(l.MeanAbs))
		if l.Hessian != nil {
			add(l.Module, sufHessianTokens, []int64{1}, i64Fill(l.HessianTokens))
		}
	}
	for _, a := range attention {
		add(a.Module, sufKAbsMax, []int64{1}, f32Fill([]float32{a.KAbsMax}))
		add(a.Module, sufVAbsMax, []int64{1}, f32Fill([]float32{a.VAbsMax}))
		if a.KHeadAbsMax != nil {
			add(a.Module, sufKHeadAbsMax, []int64{int64(len(a.KHeadAbsMax))}, f32Fill(a.KHeadAbsMax))
		}
	}
	for _, l := range linears {
		if l.Hessian != nil {
			n := int64(len(l.ChannelAbsMax))
			add(l.Module, sufHessian, []int64{n, n}, hessianFill(l.Module, int(n), l.Hessian))
		}
	}

	// The fill's own error, so that it is reported without the temporary
	// file's name that WriteTensors wraps around it.
	var fillErr error
	fill := func(i int, w io.Writer) error {
		if err := fills[i](w); err != nil {
			if fillErr == nil {
				fillErr = err
			}
			return err
		}
		return nil
	}
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	tmp, err := os.MkdirTemp(dir, "."+base+".tmp-*")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	_, err = checkpoint.WriteTensors(tmp, specs, fill, checkpoint.WriteOptions{
		MaxShardBytes: math.MaxInt64, // one file, whatever its size
		Metadata:      meta.encode(),
		Progress:      opts.Progress,
	})
	if err != nil {
		if fillErr != nil {
			return fillErr
		}
		return err
	}
	if err := os.Rename(filepath.Join(tmp, checkpoint.SingleFileName), path); err != nil {
		return err
	}
	return syncDir(dir)
}

// f32Fill writes v as little-endian float32s.
func f32Fill(v []float32) func(w io.Writer) error {
	return func(w io.Writer) error {
		b := make([]byte, 4*len(v))
		format.EncodeF32(b, v)
		_, err := w.Write(b)
		return err
	}
}

// i64Fill writes v as one little-endian int64.
func i64Fill(v int64) func(w io.Writer) error {
	return func(w io.Writer) error {
		var b [8]byte
		binary.LittleEndian.PutUint64(b[:], uint64(v))
		_, err := w.Write(b[:])
		return err
	}
}

// hessianFill streams an [n, n] Hessian row by row, checking each row.
func hessianFill(module string, n int, rows HessianRows) func(w io.Writer) error {
	return func(w io.Writer) error {
		row := make([]float32, n)
		buf := make([]byte, 4*n)
		for i := range n {
			clear(row)
			if err := rows(i, row); err != nil {
				return fmt.Errorf("%s.%s row %d: %w", module, sufHessian, i, err)
			}
			for j, v := range row {
				if !finite(v) {
					return invalidf("%s.%s[%d, %d] is %v", module, sufHessian, i, j, v)
				}
			}
			if row[i] < 0 {
				return invalidf("%s.%s[%d, %d] = %v: a diagonal element (a sum of squares) is negative", module, sufHessian, i, i, row[i])
			}
			format.EncodeF32(buf, row)
			if _, err := w.Write(buf); err != nil {
				return err
			}
		}
		return nil
	}
}

func finite(v float32) bool {
	return !math.IsNaN(float64(v)) && !math.IsInf(float64(v), 0)
}

// checkAbsMax checks a maximum or mean of absolute values.
func checkAbsMax(what string, v float32) error {
	if !finite(v) {
		return invalidf("%s is %v", what, v)
	}
	if v < 0 {
		return invalidf("%s = %v is negative", what, v)
	}
	return nil
}

// checkMaxes checks per-channel (or per-head) maxima and that their maximum
// is total.
func checkMaxes(what string, v []float32, total float32, totalName string) error {
	var m float32
	for c, x := range v {
		if err := checkAbsMax(fmt.Sprintf("%s[%d]", what, c), x); err != nil {
			return err
		}
		m = max(m, x)
	}
	if m != total {
		return invalidf("%s: the maximum over its %d elements is %v but %s is %v", what, len(v), m, totalName, total)
	}
	return nil
}

// checkLinear checks everything of l but the Hessian's values.
func checkLinear(l Linear) error {
	if err := checkModule(l.Module); err != nil {
		return invalidf("%v", err)
	}
	name := func(suffix string) string { return l.Module + "." + suffix }
	n := len(l.ChannelAbsMax)
	if n == 0 {
		return invalidf("%s is empty", name(sufChannelAbsMax))
	}
	if len(l.MeanAbs) != n {
		return invalidf("%s has %d elements but %s has %d", name(sufMeanAbs), len(l.MeanAbs), name(sufChannelAbsMax), n)
	}
	if err := checkAbsMax(name(sufInputAbsMax), l.InputAbsMax); err != nil {
		return err
	}
	if err := checkMaxes(name(sufChannelAbsMax), l.ChannelAbsMax, l.InputAbsMax, sufInputAbsMax); err != nil {
		return err
	}
	for c, v := range l.MeanAbs {
		if err := checkAbsMax(fmt.Sprintf("%s[%d]", name(sufMeanAbs), c), v); err != nil {
			return err
		}
		if v > l.ChannelAbsMax[c] {
			return invalidf("%s[%d] = %v exceeds %s[%d] = %v: a mean of |x| cannot exceed its maximum", name(sufMeanAbs), c, v, sufChannelAbsMax, c, l.ChannelAbsMax[c])
		}
	}
	if l.Hessian != nil && l.HessianTokens < 1 {
		return invalidf("%s = %d, want at least 1", name(sufHessianTokens), l.HessianTokens)
	}
	if l.Hessian == nil && l.HessianTokens != 0 {
		return invalidf("%s = %d without a Hessian", name(sufHessianTokens), l.HessianTokens)
	}
	return nil
}

// checkAttention checks a.
func checkAttention(a Attention) error {
	if err := checkModule(a.Module); err != nil {
		return invalidf("%v", err)
	}
	name := func(suffix string) string { return a.Module + "." + suffix }
	if err := checkAbsMax(name(sufKAbsMax), a.KAbsMax); err != nil {
		return err
	}
	if err := checkAbsMax(name(sufVAbsMax), a.VAbsMax); err != nil {
		return err
	}
	if a.KHeadAbsMax != nil {
		if len(a.KHeadAbsMax) == 0 {
			return invalidf("%s is empty", name(sufKHeadAbsMax))
		}
		if err := checkMaxes(name(sufKHeadAbsMax), a.KHeadAbsMax, a.KAbsMax, sufKAbsMax); err != nil {
			return err
		}
	}
	return nil
}

// syncDir makes a rename in dir durable; file systems that cannot sync a
// directory are taken at their word.
func syncDir(dir string) error {
	if runtime.GOOS == "windows" {
		return nil
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil && !errors.Is(err, syscall.EINVAL) && !errors.Is(err, errors.ErrUnsupported) {
		return fmt.Errorf("sync directory %s: %w", dir, err)
	}
	return nil
}
