package checkpoint

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/lowbit-ai/lowbit/format"
)

// Tests skip fsync, which on a busy disk costs tens of milliseconds a call;
// TestWriteDurable runs the real thing.
func init() { skipSync.Store(true) }

func TestWriteDurable(t *testing.T) {
	skipSync.Store(false)
	defer skipSync.Store(true)
	dir := t.TempDir()
	if err := WriteFileAtomic(filepath.Join(dir, "config.json"), []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	res, err := WriteTensors(dir, shardedSpecs, patternFill(shardedSpecs), WriteOptions{MaxShardBytes: 16})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Shards) != 3 {
		t.Errorf("%d shards", len(res.Shards))
	}
	checkModel(t, dir, shardedSpecs)
	if err := syncDir(t.TempDir()); err != nil {
		t.Error(err)
	}
}

// allDTypes lists every valid dtype.
func allDTypes() []format.DType {
	var ds []format.DType
	for d := format.DType(1); d.Valid(); d++ {
		ds = append(ds, d)
	}
	return ds
}

// patternBytes returns n deterministic bytes for tensor i.
func patternBytes(i int, n int64) []byte {
	b := make([]byte, n)
	for j := range b {
		b[j] = byte(i*31 + j*7 + j>>8)
	}
	return b
}

// patternFill writes patternBytes for each spec, in uneven chunks.
func patternFill(specs []TensorSpec) func(int, io.Writer) error {
	return func(i int, w io.Writer) error {
		n, _ := shapeBytes(specs[i].Shape, specs[i].DType)
		b := patternBytes(i, n)
		for len(b) > 0 {
			k := min(len(b), 3+i)
			if _, err := w.Write(b[:k]); err != nil {
				return err
			}
			b = b[k:]
		}
		return nil
	}
}

// dirNames lists the names in dir, sorted.
func dirNames(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

// checkModel opens dir with both OpenModel and ReadInventory and checks that
// they hold exactly specs, with patternBytes data.
func checkModel(t *testing.T, dir string, specs []TensorSpec) {
	t.Helper()
	inv, err := ReadInventory(dir)
	if err != nil {
		t.Fatal(err)
	}
	m, err := OpenModel(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if !reflect.DeepEqual(m.Tensors(), inv.Tensors) || m.Dir() != dir {
		t.Errorf("OpenModel and ReadInventory disagree")
	}
	if len(m.Tensors()) != len(specs) {
		t.Fatalf("%d tensors, want %d", len(m.Tensors()), len(specs))
	}
	var total int64
	for i, s := range specs {
		tn, err := m.Tensor(s.Name)
		if err != nil {
			t.Fatal(err)
		}
		n, _ := shapeBytes(s.Shape, s.DType)
		total += n
		shape := s.Shape
		if shape == nil {
			shape = []int64{}
		}
		if tn.Info.DType != s.DType || !slices.Equal(tn.Info.Shape, shape) || !bytes.Equal(tn.Data, patternBytes(i, n)) {
			t.Errorf("tensor %q: got %+v, %d bytes", s.Name, tn.Info, len(tn.Data))
		}
	}
	if inv.TotalBytes != total {
		t.Errorf("TotalBytes = %d, want %d", inv.TotalBytes, total)
	}
}

func TestWriteRoundTrip(t *testing.T) {
	every := []TensorSpec{}
	for i, d := range allDTypes() {
		every = append(every, TensorSpec{Name: fmt.Sprintf("model.layers.%d.w", i), DType: d, Shape: []int64{int64(i%3 + 1), 5}})
	}
	mixed := []TensorSpec{
		{Name: "embed", DType: format.BF16, Shape: []int64{10, 4}},         // 80
		{Name: "empty", DType: format.F32, Shape: []int64{0, 4}},           // 0
		{Name: "scalar", DType: format.F32, Shape: nil},                    // 4
		{Name: "big", DType: format.F8E4M3, Shape: []int64{300}},           // 300
		{Name: "scale", DType: format.F8E8M0, Shape: []int64{10}},          // 10
		{Name: "head", DType: format.BF16, Shape: []int64{20, 2}},          // 80
		{Name: "empty2", DType: format.I64, Shape: []int64{3, 0, 1}},       // 0
		{Name: "norm", DType: format.F32, Shape: []int64{25}},              // 100
		{Name: "last \"odd\" <name>", DType: format.U8, Shape: []int64{1}}, // 1
	}
	cases := []struct {
		name     string
		specs    []TensorSpec
		maxShard int64
		want     [][]string // tensor names per shard
	}{
		{"single shard", mixed, 0, [][]string{{"embed", "empty", "scalar", "big", "scale", "head", "empty2", "norm", "last \"odd\" <name>"}}},
		{"several shards", mixed, 100, [][]string{
			{"embed", "empty", "scalar"}, {"big"}, {"scale", "head", "empty2"}, {"norm"}, {"last \"odd\" <name>"}}},
		{"one tensor per shard", mixed[:4:4], 1, [][]string{{"embed", "empty"}, {"scalar"}, {"big"}}},
		{"exact fit", mixed[:3:3], 84, [][]string{{"embed", "empty", "scalar"}}},
		{"every dtype", every, 64, nil},
		{"no tensors", nil, 0, [][]string{nil}},
		{"only empty tensors", []TensorSpec{{Name: "a", DType: format.F32, Shape: []int64{0}}, {Name: "b", DType: format.BF16, Shape: []int64{2, 0}}}, 1, [][]string{{"a", "b"}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			var calls [][2]int64
			res, err := WriteTensors(dir, c.specs, patternFill(c.specs), WriteOptions{
				MaxShardBytes: c.maxShard,
				Metadata:      map[string]string{"format": "pt"},
				Progress:      func(w, total int64) { calls = append(calls, [2]int64{w, total}) },
			})
			if err != nil {
				t.Fatal(err)
			}
			var got [][]string
			var want []string
			for k, s := range res.Shards {
				got = append(got, s.Tensors)
				name := SingleFileName
				if len(res.Shards) > 1 {
					name = fmt.Sprintf("model-%05d-of-%05d.safetensors", k+1, len(res.Shards))
				}
				if s.File != name {
					t.Errorf("shard %d named %q, want %q", k, s.File, name)
				}
				want = append(want, name)
				st, err := os.Stat(filepath.Join(dir, s.File))
				if err != nil || st.Size() != s.FileBytes || st.Mode().Perm() != 0o644 {
					t.Errorf("shard %s: stat %v, %v; want size %d", s.File, st, err, s.FileBytes)
				}
				h, err := ReadHeader(filepath.Join(dir, s.File))
				if err != nil {
					t.Fatal(err)
				}
				if h.DataStart%8 != 0 || h.Metadata["format"] != "pt" || h.DataSize != s.DataBytes {
					t.Errorf("shard %s: DataStart %d, metadata %v, DataSize %d", s.File, h.DataStart, h.Metadata, h.DataSize)
				}
			}
			if c.want != nil && !reflect.DeepEqual(got, c.want) {
				t.Errorf("shards = %q, want %q", got, c.want)
			}
			if len(res.Shards) > 1 {
				want = append(want, IndexFileName)
				if res.Index != IndexFileName {
					t.Errorf("Index = %q", res.Index)
				}
			} else if res.Index != "" {
				t.Errorf("single shard with Index = %q", res.Index)
			}
			slices.Sort(want)
			if names := dirNames(t, dir); !slices.Equal(names, want) {
				t.Errorf("directory holds %q, want %q", names, want)
			}
			checkModel(t, dir, c.specs)
			if len(calls) == 0 || calls[len(calls)-1] != [2]int64{res.TotalBytes, res.TotalBytes} {
				t.Errorf("progress calls %v do not end at the total %d", calls, res.TotalBytes)
			}
			for i := 1; i < len(calls); i++ {
				if calls[i][0] < calls[i-1][0] {
					t.Errorf("progress went backwards: %v", calls)
				}
			}
		})
	}
}

func TestWriteIndexFormat(t *testing.T) {
	dir := t.TempDir()
	specs := []TensorSpec{
		{Name: "z", DType: format.F32, Shape: []int64{2}},
		{Name: "a", DType: format.BF16, Shape: []int64{4}},
		{Name: "m", DType: format.U8, Shape: []int64{3}},
	}
	if _, err := WriteTensors(dir, specs, patternFill(specs), WriteOptions{MaxShardBytes: 8}); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, IndexFileName))
	if err != nil {
		t.Fatal(err)
	}
	want := `{
  "metadata": {
    "total_size": 19
  },
  "weight_map": {
    "a": "model-00002-of-00003.safetensors",
    "m": "model-00003-of-00003.safetensors",
    "z": "model-00001-of-00003.safetensors"
  }
}
`
	if string(b) != want {
		t.Errorf("index:\n%s\nwant:\n%s", b, want)
	}
}

// TestWriteGolden pins the exact bytes of a small file: the length prefix, a
// header with __metadata__ first and tensors in the order given, space
// padding to 8-byte alignment, then the data.
func TestWriteGolden(t *testing.T) {
	dir := t.TempDir()
	specs := []TensorSpec{{Name: "b", DType: format.F16, Shape: []int64{2}}, {Name: "a", DType: format.U8, Shape: []int64{1}}}
	data := [][]byte{{1, 2, 3, 4}, {5}}
	_, err := WriteTensors(dir, specs, func(i int, w io.Writer) error { _, err := w.Write(data[i]); return err },
		WriteOptions{Metadata: map[string]string{"format": "pt"}})
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(dir, SingleFileName))
	if err != nil {
		t.Fatal(err)
	}
	hdr := `{"__metadata__":{"format":"pt"},"b":{"dtype":"F16","shape":[2],"data_offsets":[0,4]},"a":{"dtype":"U8","shape":[1],"data_offsets":[4,5]}}`
	hdr += strings.Repeat(" ", (8-len(hdr)%8)%8)
	want := binary.LittleEndian.AppendUint64(nil, uint64(len(hdr)))
	want = append(append(want, hdr...), 1, 2, 3, 4, 5)
	if !bytes.Equal(got, want) {
		t.Errorf("file:\n%q\nwant:\n%q", got, want)
	}
}

func TestWriteSpecErrors(t *testing.T) {
	ok := TensorSpec{Name: "ok", DType: format.F32, Shape: []int64{1}}
	cases := []struct {
		name  string
		specs []TensorSpec
		opts  WriteOptions
		subs  []string
	}{
		{"empty name", []TensorSpec{ok, {DType: format.F32}}, WriteOptions{}, []string{"tensor 1", "empty name"}},
		{"duplicate", []TensorSpec{ok, ok}, WriteOptions{}, []string{`"ok"`, "duplicate"}},
		{"invalid dtype", []TensorSpec{{Name: "x", Shape: []int64{1}}}, WriteOptions{}, []string{`"x"`, "invalid dtype"}},
		{"unknown dtype", []TensorSpec{{Name: "x", DType: 200}}, WriteOptions{}, []string{`"x"`, "invalid dtype"}},
		{"negative dim", []TensorSpec{{Name: "x", DType: format.F32, Shape: []int64{2, -3}}}, WriteOptions{}, []string{`"x"`, "negative"}},
		{"overflow", []TensorSpec{{Name: "x", DType: format.F32, Shape: []int64{1 << 40, 1 << 40}}}, WriteOptions{}, []string{`"x"`, "overflows"}},
		{"reserved name", []TensorSpec{{Name: "__metadata__", DType: format.F32}}, WriteOptions{}, []string{"reserved"}},
		{"bad UTF-8 name", []TensorSpec{{Name: "a\xff", DType: format.F32}}, WriteOptions{}, []string{"UTF-8"}},
		{"bad UTF-8 metadata", []TensorSpec{ok}, WriteOptions{Metadata: map[string]string{"k": "\xff"}}, []string{"UTF-8"}},
		{"negative max shard", []TensorSpec{ok}, WriteOptions{MaxShardBytes: -1}, []string{"MaxShardBytes"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			_, err := WriteTensors(dir, c.specs, patternFill(c.specs), c.opts)
			if err == nil {
				t.Fatal("no error")
			}
			for _, s := range c.subs {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not mention %q", err, s)
				}
			}
			if names := dirNames(t, dir); len(names) != 0 {
				t.Errorf("directory holds %q", names)
			}
		})
	}
	if _, err := WriteTensors(t.TempDir(), []TensorSpec{ok}, nil, WriteOptions{}); err == nil {
		t.Error("nil fill accepted")
	}
}

// failAfter fails every write once n bytes have passed, as a full disk does.
type failAfter struct {
	w   io.Writer
	n   int64
	err error
}

func (f *failAfter) Write(p []byte) (int, error) {
	if int64(len(p)) > f.n {
		k := int(f.n)
		f.n = 0
		n, _ := f.w.Write(p[:k])
		return n, f.err
	}
	f.n -= int64(len(p))
	return f.w.Write(p)
}

func TestWriteFailures(t *testing.T) {
	specs := []TensorSpec{
		{Name: "a", DType: format.U8, Shape: []int64{100}},
		{Name: "b", DType: format.U8, Shape: []int64{100}},
		{Name: "c", DType: format.U8, Shape: []int64{5 << 20}}, // past the write buffer
		{Name: "d", DType: format.U8, Shape: []int64{100}},
	}
	enospc := &os.PathError{Op: "write", Path: "x", Err: syscall.ENOSPC}
	good := patternFill(specs)
	cases := []struct {
		name     string
		maxShard int64
		fill     func(int, io.Writer) error
		wrap     func(shard string, w io.Writer) io.Writer
		is       error
		subs     []string
	}{
		{name: "fill error", maxShard: 150, fill: func(i int, w io.Writer) error {
			if i == 2 {
				return errors.New("quantizer exploded")
			}
			return good(i, w)
		}, subs: []string{"model-00003-of-00004.safetensors", `tensor "c"`, "quantizer exploded"}},
		{name: "too few bytes", maxShard: 150, fill: func(i int, w io.Writer) error {
			if i == 1 {
				_, err := w.Write(make([]byte, 99))
				return err
			}
			return good(i, w)
		}, subs: []string{"model-00002-of-00004.safetensors", `tensor "b"`, "wrote 99 bytes, want 100"}},
		{name: "too many bytes", maxShard: 150, fill: func(i int, w io.Writer) error {
			if i == 3 {
				w.Write(make([]byte, 100))
				_, err := w.Write(make([]byte, 1))
				return err
			}
			return good(i, w)
		}, subs: []string{"model-00004-of-00004.safetensors", `tensor "d"`, "more than the tensor's 100 bytes"}},
		{name: "too many bytes ignored error", maxShard: 0, fill: func(i int, w io.Writer) error {
			w.Write(make([]byte, 200)) // error ignored by the fill
			return nil
		}, subs: []string{SingleFileName, `tensor "a"`, "more than"}},
		{name: "disk full mid tensor", maxShard: 150, fill: good, wrap: func(shard string, w io.Writer) io.Writer {
			if strings.HasPrefix(shard, "model-00003") {
				return &failAfter{w: w, n: 1 << 20, err: enospc}
			}
			return w
		}, is: syscall.ENOSPC, subs: []string{"model-00003-of-00004.safetensors", `tensor "c"`, "no space left"}},
		{name: "disk full at flush", maxShard: 150, fill: good, wrap: func(shard string, w io.Writer) io.Writer {
			if strings.HasPrefix(shard, "model-00004") {
				return &failAfter{w: w, n: 50, err: enospc}
			}
			return w
		}, is: syscall.ENOSPC, subs: []string{"model-00004-of-00004.safetensors", "no space left"}},
		{name: "disk full single file", maxShard: 0, fill: good, wrap: func(shard string, w io.Writer) io.Writer {
			return &failAfter{w: w, n: 10, err: enospc}
		}, is: syscall.ENOSPC, subs: []string{SingleFileName, "no space left"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			_, err := WriteTensors(dir, specs, c.fill, WriteOptions{MaxShardBytes: c.maxShard, wrap: c.wrap})
			if err == nil {
				t.Fatal("no error")
			}
			if c.is != nil && !errors.Is(err, c.is) {
				t.Errorf("error %v is not %v", err, c.is)
			}
			for _, s := range append(c.subs, dir) {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not mention %q", err, s)
				}
			}
			// Nothing is left: no shard, no index, no temporary file.
			if names := dirNames(t, dir); len(names) != 0 {
				t.Errorf("directory holds %q after a failed write", names)
			}
			if _, err := OpenModel(dir); err == nil {
				t.Error("OpenModel accepted the directory of a failed write")
			}
		})
	}
}

func TestWriteDirectoryRemoved(t *testing.T) {
	parent := t.TempDir()
	dir := filepath.Join(parent, "out")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	specs := []TensorSpec{{Name: "a", DType: format.U8, Shape: []int64{10}}, {Name: "b", DType: format.U8, Shape: []int64{10}}}
	_, err := WriteTensors(dir, specs, func(i int, w io.Writer) error {
		if i == 1 {
			if err := os.RemoveAll(dir); err != nil {
				return err
			}
		}
		_, err := w.Write(make([]byte, 10))
		return err
	}, WriteOptions{MaxShardBytes: 10})
	if err == nil || !strings.Contains(err.Error(), dir) {
		t.Errorf("err = %v", err)
	}
	if names := dirNames(t, parent); len(names) != 0 {
		t.Errorf("parent holds %q", names)
	}
	if _, err := WriteTensors(dir, specs, patternFill(specs), WriteOptions{}); err == nil || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("writing into a missing directory: err = %v", err)
	}
}

func TestWriteExistingCheckpoint(t *testing.T) {
	dir := t.TempDir()
	specs := []TensorSpec{
		{Name: "a", DType: format.U8, Shape: []int64{10}},
		{Name: "b", DType: format.U8, Shape: []int64{10}},
		{Name: "c", DType: format.U8, Shape: []int64{10}},
	}
	if _, err := WriteTensors(dir, specs, patternFill(specs), WriteOptions{MaxShardBytes: 10}); err != nil {
		t.Fatal(err)
	}
	writeBytes(t, dir, "config.json", []byte("{}"))
	_, err := WriteTensors(dir, specs[:1], patternFill(specs), WriteOptions{})
	if err == nil || !strings.Contains(err.Error(), "already holds a checkpoint") {
		t.Fatalf("err = %v", err)
	}
	checkModel(t, dir, specs) // untouched
	if _, err := WriteTensors(dir, specs[:2], patternFill(specs), WriteOptions{Overwrite: true}); err != nil {
		t.Fatal(err)
	}
	if names := dirNames(t, dir); !slices.Equal(names, []string{"config.json", SingleFileName}) {
		t.Errorf("directory holds %q", names)
	}
	checkModel(t, dir, specs[:2])
}

// TestWriteStreams checks that a tensor much larger than the write buffer is
// streamed: the bytes allocated while writing it stay far below its size.
func TestWriteStreams(t *testing.T) {
	const size = 32 << 20
	dir := t.TempDir()
	specs := []TensorSpec{{Name: "huge", DType: format.BF16, Shape: []int64{size / 2}}}
	chunk := make([]byte, 1<<20)
	for i := range chunk {
		chunk[i] = byte(i * 13)
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	_, err := WriteTensors(dir, specs, func(_ int, w io.Writer) error {
		for range size / len(chunk) {
			if _, err := w.Write(chunk); err != nil {
				return err
			}
		}
		return nil
	}, WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	runtime.ReadMemStats(&after)
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 12<<20 {
		t.Errorf("writing a %d MiB tensor allocated %d MiB", size>>20, alloc>>20)
	}
	f, err := OpenFile(filepath.Join(dir, SingleFileName))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tn, err := f.Tensor("huge")
	if err != nil {
		t.Fatal(err)
	}
	if len(tn.Data) != size || !bytes.Equal(tn.Data[size-len(chunk):], chunk) {
		t.Error("data differs")
	}
}

func TestWriteFileAtomic(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "config.json")
	for _, content := range []string{`{"a":1}`, `{"b":2}`} {
		if err := WriteFileAtomic(path, []byte(content), 0o640); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(path)
		if err != nil || string(got) != content {
			t.Errorf("read %q, %v; want %q", got, err, content)
		}
		if st, _ := os.Stat(path); st.Mode().Perm() != 0o640 {
			t.Errorf("mode %v", st.Mode())
		}
	}
	if names := dirNames(t, dir); !slices.Equal(names, []string{"config.json"}) {
		t.Errorf("directory holds %q", names)
	}
	missing := filepath.Join(dir, "nope", "config.json")
	if err := WriteFileAtomic(missing, nil, 0o644); err == nil || !strings.Contains(err.Error(), missing) {
		t.Errorf("err = %v", err)
	}
	// Renaming over a directory fails; the temporary file must go.
	if err := os.Mkdir(filepath.Join(dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeBytes(t, filepath.Join(dir, "sub"), "x", nil)
	if err := WriteFileAtomic(filepath.Join(dir, "sub"), []byte("x"), 0o644); err == nil {
		t.Error("replacing a non-empty directory succeeded")
	}
	if names := dirNames(t, dir); !slices.Equal(names, []string{"config.json", "sub"}) {
		t.Errorf("directory holds %q", names)
	}
}

func TestShardFileName(t *testing.T) {
	if got := ShardFileName(0, 3); got != "model-00001-of-00003.safetensors" {
		t.Error(got)
	}
	for _, n := range []string{"model.safetensors", "model.safetensors.index.json", "model-00001-of-00003.safetensors", "model-100000-of-100000.safetensors"} {
		if !isCheckpointFile(n) {
			t.Errorf("%q not recognized", n)
		}
	}
	for _, n := range []string{"config.json", "adapter_model.safetensors", "model-1-of-3.safetensors", ".model-00001-of-00003.safetensors.tmp-1"} {
		if isCheckpointFile(n) {
			t.Errorf("%q recognized", n)
		}
	}
}

func TestEncodeHeaderRoundTrip(t *testing.T) {
	infos := []TensorInfo{
		{Name: "x<&>", DType: format.F8E5M2, Shape: []int64{3}, Begin: 0, End: 3},
		{Name: "é", DType: format.I16, Shape: []int64{}, Begin: 3, End: 5},
	}
	b, err := encodeHeader(infos, map[string]string{"k": "v\n"})
	if err != nil {
		t.Fatal(err)
	}
	if len(b)%8 != 0 || !json.Valid(b) || bytes.Contains(b, []byte(`\u003c`)) {
		t.Errorf("header %q", b)
	}
	h, err := ParseHeader(b, 5)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(h.Tensors, infos) || h.Metadata["k"] != "v\n" {
		t.Errorf("round trip: %+v %v", h.Tensors, h.Metadata)
	}
}
