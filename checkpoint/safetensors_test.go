package checkpoint

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/lowbit-ai/lowbit/format"
)

// rawFile writes a safetensors file from a literal header and data section,
// with the length prefix set to len(header).
func rawFile(t *testing.T, dir, name, header string, data []byte) string {
	t.Helper()
	var prefix [8]byte
	binary.LittleEndian.PutUint64(prefix[:], uint64(len(header)))
	return writeBytes(t, dir, name, append(append(prefix[:], header...), data...))
}

func writeBytes(t *testing.T, dir, name string, b []byte) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// prefixed returns an 8-byte little-endian length prefix of n.
func prefixed(n uint64, rest string) []byte {
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], n)
	return append(b[:], rest...)
}

// wantErr checks that err is non-nil, wraps ErrCorrupt, and mentions every
// substring.
func wantErr(t *testing.T, err error, subs ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error; want one mentioning %q", subs)
	}
	if !errors.Is(err, ErrCorrupt) {
		t.Errorf("error %q does not wrap ErrCorrupt", err)
	}
	for _, s := range subs {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q does not mention %q", err, s)
		}
	}
}

const twoTensors = `{"__metadata__":{"format":"pt"},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]},"a":{"dtype":"BF16","shape":[2],"data_offsets":[0,4]}}`

func TestReadHeaderValid(t *testing.T) {
	dir := t.TempDir()
	data := []byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}
	cases := []struct {
		name, header string
		data         []byte
		want         []TensorInfo
		meta         map[string]string
	}{
		{"two tensors", twoTensors, data, []TensorInfo{
			{Name: "a", DType: format.BF16, Shape: []int64{2}, Begin: 0, End: 4},
			{Name: "b", DType: format.F32, Shape: []int64{2}, Begin: 4, End: 12},
		}, map[string]string{"format": "pt"}},
		{"space padding", twoTensors + "       ", data, []TensorInfo{
			{Name: "a", DType: format.BF16, Shape: []int64{2}, Begin: 0, End: 4},
			{Name: "b", DType: format.F32, Shape: []int64{2}, Begin: 4, End: 12},
		}, map[string]string{"format": "pt"}},
		{"empty", `{}`, nil, nil, nil},
		{"null metadata", `{"__metadata__":null}`, nil, nil, nil},
		{"scalar and empty", `{"s":{"dtype":"F8_E4M3","shape":[],"data_offsets":[0,1]},"z":{"dtype":"F32","shape":[0,3],"data_offsets":[1,1]},"y":{"dtype":"I64","shape":[4,0],"data_offsets":[0,0]}}`, []byte{7},
			[]TensorInfo{
				{Name: "y", DType: format.I64, Shape: []int64{4, 0}, Begin: 0, End: 0},
				{Name: "s", DType: format.F8E4M3, Shape: []int64{}, Begin: 0, End: 1},
				{Name: "z", DType: format.F32, Shape: []int64{0, 3}, Begin: 1, End: 1},
			}, nil},
		{"escaped name", `{"a\"\u00e9":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}`, []byte{1},
			[]TensorInfo{{Name: "a\"é", DType: format.U8, Shape: []int64{1}, Begin: 0, End: 1}}, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path := rawFile(t, dir, strings.ReplaceAll(c.name, " ", "_"), c.header, c.data)
			h, err := ReadHeader(path)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(h.Tensors, c.want) {
				t.Errorf("tensors = %+v, want %+v", h.Tensors, c.want)
			}
			if !reflect.DeepEqual(h.Metadata, c.meta) {
				t.Errorf("metadata = %v, want %v", h.Metadata, c.meta)
			}
			if h.DataStart != 8+int64(len(c.header)) || h.DataSize != int64(len(c.data)) {
				t.Errorf("DataStart, DataSize = %d, %d", h.DataStart, h.DataSize)
			}
			for _, w := range c.want {
				got, ok := h.Lookup(w.Name)
				if !ok || !reflect.DeepEqual(got, w) {
					t.Errorf("Lookup(%q) = %+v, %v", w.Name, got, ok)
				}
			}
			if _, ok := h.Lookup("nope"); ok {
				t.Error("Lookup of a missing name succeeded")
			}
		})
	}
}

func TestReadHeaderCorrupt(t *testing.T) {
	dir := t.TempDir()
	d12 := make([]byte, 12)
	tensor := func(name, dtype, shape, offs string) string {
		return `"` + name + `":{"dtype":"` + dtype + `","shape":` + shape + `,"data_offsets":` + offs + `}`
	}
	cases := []struct {
		name string
		file []byte // whole file; nil means header+data below
		hdr  string
		data []byte
		subs []string // besides the path
	}{
		{name: "empty file", file: []byte{}, subs: []string{"too short"}},
		{name: "truncated prefix", file: []byte{1, 0, 0}, subs: []string{"too short"}},
		{name: "header length past EOF", file: prefixed(100, `{}`), subs: []string{"header length 100", "truncated"}},
		{name: "header length over cap", file: prefixed(200_000_000, `{}`), subs: []string{"200000000", "limit"}},
		{name: "header length huge", file: prefixed(1<<63, `{}`), subs: []string{"limit"}},
		{name: "empty header", file: prefixed(0, ``), subs: []string{"start with '{'"}},
		{name: "bad JSON", hdr: `{"a":`, subs: []string{"malformed JSON"}},
		{name: "bad JSON missing colon", hdr: `{"a" {}}`, subs: []string{"malformed JSON"}},
		{name: "not an object", hdr: `[1,2]`, subs: []string{"start with '{'"}},
		{name: "leading space", hdr: ` {}`, subs: []string{"start with '{'"}},
		{name: "trailing garbage", hdr: `{}x`, subs: []string{"'x'", "after the header"}},
		{name: "trailing newline", hdr: `{}` + "  \n", subs: []string{`'\n'`}},
		{name: "second object", hdr: `{}{}`, subs: []string{"after the header"}},
		{name: "invalid UTF-8", hdr: "{\"\xff\":1}", subs: []string{"UTF-8"}},
		{name: "tensor not an object", hdr: `{"w":[1]}`, subs: []string{`"w"`, "expected"}},
		{name: "overlap", hdr: "{" + tensor("a", "F32", "[2]", "[0,8]") + "," + tensor("b", "F32", "[2]", "[4,12]") + "}", data: d12, subs: []string{`"b"`, `"a"`, "overlap"}},
		{name: "same range", hdr: "{" + tensor("a", "F32", "[1]", "[0,4]") + "," + tensor("b", "F32", "[1]", "[0,4]") + "}", data: d12[:4], subs: []string{`"b"`, `"a"`, "overlap"}},
		{name: "gap", hdr: "{" + tensor("a", "F32", "[1]", "[0,4]") + "," + tensor("b", "F32", "[1]", "[8,12]") + "}", data: d12, subs: []string{`"b"`, "gap of 4 bytes", `"a"`}},
		{name: "gap at start", hdr: "{" + tensor("a", "F32", "[1]", "[4,8]") + "}", data: d12[:8], subs: []string{`"a"`, "gap"}},
		{name: "data shorter than declared", hdr: "{" + tensor("a", "F32", "[3]", "[0,12]") + "}", data: d12[:8], subs: []string{`"a"`, "past the end of the 8-byte data section"}},
		{name: "data longer than declared", hdr: "{" + tensor("a", "F32", "[2]", "[0,8]") + "}", data: d12, subs: []string{`"a"`, "4 trailing bytes"}},
		{name: "no tensors but data", hdr: `{}`, data: d12, subs: []string{"no tensors", "12 bytes"}},
		{name: "unknown dtype", hdr: "{" + tensor("a", "F128", "[1]", "[0,16]") + "}", data: make([]byte, 16), subs: []string{`"a"`, `unknown dtype "F128"`}},
		{name: "lowercase dtype", hdr: "{" + tensor("a", "f32", "[1]", "[0,4]") + "}", data: d12[:4], subs: []string{`"a"`, "unknown dtype"}},
		{name: "shape byte mismatch", hdr: "{" + tensor("a", "BF16", "[3]", "[0,8]") + "}", data: d12[:8], subs: []string{`"a"`, "is 6 bytes", "hold 8"}},
		{name: "shape overflow", hdr: "{" + tensor("a", "F32", "[4294967296,4294967296]", "[0,0]") + "}", subs: []string{`"a"`, "overflows"}},
		{name: "shape overflow by dtype", hdr: "{" + tensor("a", "F64", "[2305843009213693952]", "[0,0]") + "}", subs: []string{`"a"`, "overflows"}},
		{name: "shape too large for int64", hdr: "{" + tensor("a", "F32", "[18446744073709551616]", "[0,0]") + "}", subs: []string{`"a"`, "not a non-negative 64-bit integer"}},
		{name: "negative dim", hdr: "{" + tensor("a", "F32", "[-1]", "[0,0]") + "}", subs: []string{`"a"`, "-1", "non-negative"}},
		{name: "float dim", hdr: "{" + tensor("a", "F32", "[1.0]", "[0,4]") + "}", data: d12[:4], subs: []string{`"a"`, "1.0"}},
		{name: "string dim", hdr: "{" + tensor("a", "F32", `["1"]`, "[0,4]") + "}", data: d12[:4], subs: []string{`"a"`, "expected an integer"}},
		{name: "negative offset", hdr: "{" + tensor("a", "F32", "[1]", "[-4,0]") + "}", subs: []string{`"a"`, "-4"}},
		{name: "end before begin", hdr: "{" + tensor("a", "F32", "[0]", "[4,0]") + "}", data: d12[:4], subs: []string{`"a"`, "end before they begin"}},
		{name: "three offsets", hdr: "{" + tensor("a", "F32", "[1]", "[0,4,8]") + "}", data: d12[:4], subs: []string{`"a"`, "more than 2"}},
		{name: "one offset", hdr: "{" + tensor("a", "F32", "[1]", "[4]") + "}", data: d12[:4], subs: []string{`"a"`, "1 values, want 2"}},
		{name: "duplicate tensor", hdr: "{" + tensor("a", "F32", "[1]", "[0,4]") + "," + tensor("a", "F32", "[1]", "[4,8]") + "}", data: d12[:8], subs: []string{`"a"`, "duplicate tensor name"}},
		{name: "duplicate escaped tensor", hdr: "{" + tensor("a", "F32", "[1]", "[0,4]") + "," + tensor(`\u0061`, "F32", "[1]", "[4,8]") + "}", data: d12[:8], subs: []string{`"a"`, "duplicate"}},
		{name: "duplicate field", hdr: `{"a":{"dtype":"F32","dtype":"F32","shape":[1],"data_offsets":[0,4]}}`, data: d12[:4], subs: []string{`"a"`, `duplicate field "dtype"`}},
		{name: "unknown field", hdr: `{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4],"extra":1}}`, data: d12[:4], subs: []string{`"a"`, `unknown field "extra"`}},
		{name: "missing field", hdr: `{"a":{"dtype":"F32","shape":[1]}}`, data: d12[:4], subs: []string{`"a"`, `missing field "data_offsets"`}},
		{name: "dtype not string", hdr: `{"a":{"dtype":7,"shape":[1],"data_offsets":[0,4]}}`, data: d12[:4], subs: []string{`"a"`, "dtype must be a string"}},
		{name: "shape null", hdr: `{"a":{"dtype":"F32","shape":null,"data_offsets":[0,4]}}`, data: d12[:4], subs: []string{`"a"`, "shape"}},
		{name: "empty name", hdr: "{" + tensor("", "F32", "[1]", "[0,4]") + "}", data: d12[:4], subs: []string{"empty tensor name"}},
		{name: "metadata non-string", hdr: `{"__metadata__":{"format":"pt","n":1}}`, subs: []string{"__metadata__", `"n"`, "must be a string"}},
		{name: "metadata nested", hdr: `{"__metadata__":{"x":{}}}`, subs: []string{"__metadata__", `"x"`}},
		{name: "metadata array", hdr: `{"__metadata__":["a"]}`, subs: []string{"__metadata__", "object of strings"}},
		{name: "metadata duplicate key", hdr: `{"__metadata__":{"a":"1","a":"2"}}`, subs: []string{"__metadata__", `duplicate key "a"`}},
		{name: "metadata twice", hdr: `{"__metadata__":{},"__metadata__":{}}`, subs: []string{"duplicate", "__metadata__"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			file := c.file
			if file == nil {
				file = prefixed(uint64(len(c.hdr)), c.hdr)
				file = append(file, c.data...)
			}
			path := writeBytes(t, dir, strings.ReplaceAll(c.name, " ", "_")+".safetensors", file)
			_, err := ReadHeader(path)
			wantErr(t, err, append([]string{path}, c.subs...)...)
			// OpenFile applies the same checks.
			f, err2 := OpenFile(path)
			if err2 == nil {
				f.Close()
			}
			if err2 == nil || err2.Error() != err.Error() {
				t.Errorf("OpenFile error %v differs from ReadHeader error %v", err2, err)
			}
		})
	}
}

func TestReadHeaderNotFound(t *testing.T) {
	path := filepath.Join(t.TempDir(), "missing.safetensors")
	_, err := ReadHeader(path)
	if !errors.Is(err, os.ErrNotExist) || errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), path) {
		t.Errorf("err = %v", err)
	}
	if _, err := ReadHeader(t.TempDir()); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("reading a directory: err = %v", err)
	}
}

func TestOpenFileTensors(t *testing.T) {
	data := []byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}
	path := rawFile(t, t.TempDir(), "m.safetensors", twoTensors, data)
	f, err := OpenFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if f.Path() != path || len(f.Header().Tensors) != 2 {
		t.Errorf("Path, Header = %q, %+v", f.Path(), f.Header())
	}
	for _, c := range []struct {
		name string
		want []byte
	}{{"a", data[:4]}, {"b", data[4:]}} {
		tn, err := f.Tensor(c.name)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(tn.Data, c.want) || tn.Info.Name != c.name || cap(tn.Data) != len(tn.Data) {
			t.Errorf("Tensor(%q) = %+v (cap %d)", c.name, tn, cap(tn.Data))
		}
	}
	_, err = f.Tensor("c")
	if !errors.Is(err, ErrMissingTensor) || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), `"c"`) {
		t.Errorf("missing tensor: err = %v", err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if _, err := f.Tensor("a"); !errors.Is(err, ErrClosed) {
		t.Errorf("Tensor after Close: err = %v", err)
	}
	if f.Header().Tensors[0].Name != "a" {
		t.Error("Header invalid after Close")
	}
}

func TestNumElementsBytes(t *testing.T) {
	ti := TensorInfo{DType: format.BF16, Shape: []int64{3, 4}, Begin: 8, End: 32}
	if ti.NumElements() != 12 || ti.Bytes() != 24 {
		t.Errorf("NumElements, Bytes = %d, %d", ti.NumElements(), ti.Bytes())
	}
	if (TensorInfo{Shape: []int64{}}).NumElements() != 1 {
		t.Error("scalar NumElements != 1")
	}
}

func TestParseHeaderNegativeDataSize(t *testing.T) {
	_, err := ParseHeader([]byte(`{}`), -1)
	wantErr(t, err, "negative")
}
