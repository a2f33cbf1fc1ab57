package checkpoint

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lowbit-ai/lowbit/format"
)

// shardedSpecs are written by writeSharded as three shards: [a b] [c] [d].
var shardedSpecs = []TensorSpec{
	{Name: "a", DType: format.BF16, Shape: []int64{4}},
	{Name: "b", DType: format.F32, Shape: []int64{2}},
	{Name: "c", DType: format.F8E4M3, Shape: []int64{12}},
	{Name: "d", DType: format.F32, Shape: []int64{3}},
}

func writeSharded(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	res, err := WriteTensors(dir, shardedSpecs, patternFill(shardedSpecs), WriteOptions{MaxShardBytes: 16})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Shards) != 3 {
		t.Fatalf("%d shards", len(res.Shards))
	}
	return dir
}

const (
	shard1 = "model-00001-of-00003.safetensors"
	shard2 = "model-00002-of-00003.safetensors"
	shard3 = "model-00003-of-00003.safetensors"
)

func TestOpenModelValid(t *testing.T) {
	dir := writeSharded(t)
	checkModel(t, dir, shardedSpecs)
	inv, err := ReadInventory(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !inv.Sharded || len(inv.Shards) != 3 || inv.Shards[0].Name != shard1 {
		t.Errorf("inventory %+v", inv)
	}
	want := map[format.DType]int64{format.BF16: 8, format.F32: 20, format.F8E4M3: 12}
	if len(inv.BytesByDType) != len(want) || inv.TotalBytes != 40 {
		t.Errorf("BytesByDType = %v, TotalBytes = %d", inv.BytesByDType, inv.TotalBytes)
	}
	for d, n := range want {
		if inv.BytesByDType[d] != n {
			t.Errorf("BytesByDType[%v] = %d, want %d", d, inv.BytesByDType[d], n)
		}
	}
	order := ""
	for _, e := range inv.Tensors {
		order += e.Name + "@" + e.Shard[:11] + " "
	}
	if order != "a@model-00001 b@model-00001 c@model-00002 d@model-00003 " {
		t.Errorf("order %q", order)
	}
	if e, ok := inv.Lookup("c"); !ok || e.Shard != shard2 || e.Bytes() != 12 {
		t.Errorf("Lookup(c) = %+v, %v", e, ok)
	}
	st, _ := os.Stat(filepath.Join(dir, shard3))
	if inv.Shards[2].Size() != st.Size() {
		t.Errorf("Size = %d, file is %d", inv.Shards[2].Size(), st.Size())
	}

	m, err := OpenModel(dir)
	if err != nil {
		t.Fatal(err)
	}
	if m.Inventory().TotalBytes != 40 {
		t.Error("Inventory")
	}
	_, err = m.Tensor("zz")
	if !errors.Is(err, ErrMissingTensor) || !strings.Contains(err.Error(), dir) || !strings.Contains(err.Error(), `"zz"`) {
		t.Errorf("missing tensor: err = %v", err)
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if err := m.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if _, err := m.Tensor("a"); !errors.Is(err, ErrClosed) {
		t.Errorf("Tensor after Close: err = %v", err)
	}
}

// TestOpenModelIndexExtras accepts what transformers versions add to an
// index: more metadata keys, other top-level keys, a trailing newline.
func TestOpenModelIndexExtras(t *testing.T) {
	dir := writeSharded(t)
	writeBytes(t, dir, IndexFileName, []byte(`{"metadata":{"total_parameters":20,"total_size":40},"format":"x",
"weight_map":{"a":"`+shard1+`","b":"`+shard1+`","c":"`+shard2+`","d":"`+shard3+`"}}`+"\n\n"))
	checkModel(t, dir, shardedSpecs)
}

func TestOpenModelErrors(t *testing.T) {
	weightMap := func(entries ...string) string {
		return `{"metadata":{"total_size":40},"weight_map":{` + strings.Join(entries, ",") + `}}`
	}
	e := func(tensor, shard string) string { return `"` + tensor + `":"` + shard + `"` }
	full := []string{e("a", shard1), e("b", shard1), e("c", shard2), e("d", shard3)}
	cases := []struct {
		name   string
		mutate func(t *testing.T, dir string)
		subs   []string
		is     error
	}{
		{"missing shard file", func(t *testing.T, dir string) { os.Remove(filepath.Join(dir, shard2)) },
			[]string{IndexFileName, shard2, `"c"`, "missing"}, fs.ErrNotExist},
		{"index tensor not in shard", func(t *testing.T, dir string) {
			writeBytes(t, dir, IndexFileName, []byte(weightMap(append(full, e("ghost", shard3))...)))
		}, []string{IndexFileName, `"ghost"`, shard3, "does not hold it"}, ErrCorrupt},
		{"shard tensor not in index", func(t *testing.T, dir string) {
			writeBytes(t, dir, IndexFileName, []byte(weightMap(full[0], full[2], full[3])))
		}, []string{IndexFileName, `"b"`, shard1, "not in the index"}, ErrCorrupt},
		{"index places tensor in wrong shard", func(t *testing.T, dir string) {
			writeBytes(t, dir, IndexFileName, []byte(weightMap(full[0], full[1], e("c", shard3), full[3])))
		}, []string{IndexFileName, `"c"`, shard3, "does not hold it"}, ErrCorrupt},
		{"shard not in index at all", func(t *testing.T, dir string) {
			writeBytes(t, dir, IndexFileName, []byte(weightMap(full[0], full[1], full[2])))
		}, nil, nil}, // an unlisted shard file is ignored, like any other file
		{"tensor in two shards", func(t *testing.T, dir string) {
			rawFile(t, dir, shard3, `{"d":{"dtype":"F32","shape":[3],"data_offsets":[0,12]},"a":{"dtype":"U8","shape":[1],"data_offsets":[12,13]}}`, make([]byte, 13))
		}, []string{`"a"`, shard1, shard3, "two shards"}, ErrCorrupt},
		{"shard path separator", func(t *testing.T, dir string) {
			writeBytes(t, dir, IndexFileName, []byte(weightMap(full[0], full[1], full[2], e("d", "sub/"+shard3))))
		}, []string{IndexFileName, `"d"`, "not a plain"}, ErrCorrupt},
		{"shard dot dot", func(t *testing.T, dir string) {
			writeBytes(t, dir, IndexFileName, []byte(weightMap(full[0], full[1], full[2], e("d", "../"+shard3))))
		}, []string{`"d"`, "not a plain"}, ErrCorrupt},
		{"shard backslash", func(t *testing.T, dir string) {
			writeBytes(t, dir, IndexFileName, []byte(weightMap(full[0], full[1], full[2], e("d", `..\\`+shard3))))
		}, []string{`"d"`, "not a plain"}, ErrCorrupt},
		{"shard not safetensors", func(t *testing.T, dir string) {
			writeBytes(t, dir, IndexFileName, []byte(weightMap(full[0], full[1], full[2], e("d", "config.json"))))
		}, []string{`"d"`, "not a plain"}, ErrCorrupt},
		{"shard empty name", func(t *testing.T, dir string) {
			writeBytes(t, dir, IndexFileName, []byte(weightMap(full[0], full[1], full[2], e("d", ""))))
		}, []string{`"d"`, "not a plain"}, ErrCorrupt},
		{"malformed index", func(t *testing.T, dir string) {
			writeBytes(t, dir, IndexFileName, []byte(`{"weight_map":{"a":`))
		}, []string{IndexFileName, "malformed JSON"}, ErrCorrupt},
		{"index trailing garbage", func(t *testing.T, dir string) {
			writeBytes(t, dir, IndexFileName, []byte(weightMap(full...)+"x"))
		}, []string{IndexFileName, "after the object"}, ErrCorrupt},
		{"index duplicate tensor", func(t *testing.T, dir string) {
			writeBytes(t, dir, IndexFileName, []byte(weightMap(append(full, e("a", shard2))...)))
		}, []string{IndexFileName, `"a"`, "twice"}, ErrCorrupt},
		{"index duplicate weight_map", func(t *testing.T, dir string) {
			writeBytes(t, dir, IndexFileName, []byte(`{"weight_map":{},"weight_map":{}}`))
		}, []string{IndexFileName, "duplicate key"}, ErrCorrupt},
		{"index without weight_map", func(t *testing.T, dir string) {
			writeBytes(t, dir, IndexFileName, []byte(`{"metadata":{}}`))
		}, []string{IndexFileName, "no weight_map"}, ErrCorrupt},
		{"index shard not a string", func(t *testing.T, dir string) {
			writeBytes(t, dir, IndexFileName, []byte(`{"weight_map":{"a":1}}`))
		}, []string{IndexFileName, `"a"`, "must be a string"}, ErrCorrupt},
		{"index metadata not an object", func(t *testing.T, dir string) {
			writeBytes(t, dir, IndexFileName, []byte(`{"metadata":3,"weight_map":{}}`))
		}, []string{IndexFileName, "metadata"}, ErrCorrupt},
		{"index is an array", func(t *testing.T, dir string) {
			writeBytes(t, dir, IndexFileName, []byte(`[]`))
		}, []string{IndexFileName}, ErrCorrupt},
		{"corrupt shard", func(t *testing.T, dir string) {
			rawFile(t, dir, shard2, `{"c":{"dtype":"F8_E4M3","shape":[12],"data_offsets":[0,12]}}`, make([]byte, 11))
		}, []string{filepath.Join("", shard2), `"c"`, "past the end"}, ErrCorrupt},
		{"sharded without index", func(t *testing.T, dir string) { os.Remove(filepath.Join(dir, IndexFileName)) },
			[]string{"3 .safetensors files", shard1, "no " + IndexFileName}, ErrCorrupt},
		{"single and index", func(t *testing.T, dir string) {
			rawFile(t, dir, SingleFileName, `{}`, nil)
		}, []string{"ambiguous"}, ErrCorrupt},
		{"empty directory", func(t *testing.T, dir string) {
			for _, n := range dirNames(t, dir) {
				os.Remove(filepath.Join(dir, n))
			}
		}, []string{"no model.safetensors"}, fs.ErrNotExist},
		{"other safetensors name", func(t *testing.T, dir string) {
			for _, n := range dirNames(t, dir) {
				os.Remove(filepath.Join(dir, n))
			}
			rawFile(t, dir, "consolidated.safetensors", `{}`, nil)
		}, []string{"consolidated.safetensors", "must be named model.safetensors"}, ErrCorrupt},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := writeSharded(t)
			c.mutate(t, dir)
			_, err := ReadInventory(dir)
			m, err2 := OpenModel(dir)
			if err2 == nil {
				m.Close()
			}
			if c.is == nil {
				if err != nil || err2 != nil {
					t.Fatalf("errors %v, %v", err, err2)
				}
				return
			}
			if err == nil || err2 == nil {
				t.Fatalf("ReadInventory err = %v, OpenModel err = %v", err, err2)
			}
			if err.Error() != err2.Error() {
				t.Errorf("ReadInventory and OpenModel errors differ:\n%v\n%v", err, err2)
			}
			if !errors.Is(err, c.is) {
				t.Errorf("error %v is not %v", err, c.is)
			}
			for _, s := range append(c.subs, dir) {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not mention %q", err, s)
				}
			}
		})
	}
}

func TestOpenModelSingleFile(t *testing.T) {
	dir := t.TempDir()
	specs := shardedSpecs[:2]
	if _, err := WriteTensors(dir, specs, patternFill(specs), WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	// A stray extra .safetensors file beside model.safetensors is ignored.
	rawFile(t, dir, "adapter_model.safetensors", `{}`, nil)
	checkModel(t, dir, specs)
	inv, err := ReadInventory(dir)
	if err != nil {
		t.Fatal(err)
	}
	if inv.Sharded || len(inv.Shards) != 1 || inv.Tensors[0].Shard != SingleFileName {
		t.Errorf("inventory %+v", inv)
	}
}

// FuzzParseIndex checks that the index parser never panics, that rejections
// wrap ErrCorrupt, and that accepted weight maps name only plain shard files.
func FuzzParseIndex(f *testing.F) {
	for _, s := range []string{
		`{"metadata":{"total_size":40},"weight_map":{"a":"model-00001-of-00002.safetensors","b":"model-00002-of-00002.safetensors"}}`,
		`{"weight_map":{}}` + "\n",
		`{"weight_map":{"a":"../x.safetensors"}}`,
		`{"weight_map":{"a":"x.safetensors","a":"x.safetensors"}}`,
		`{"metadata":[],"weight_map":{}}`,
		`{"weight_map":{"a":1}}`,
		`{"weight_map":{}}x`,
		`[]`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		wm, err := parseIndex(b)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error %v does not wrap ErrCorrupt", err)
			}
			return
		}
		if wm == nil {
			t.Fatal("nil weight map without an error")
		}
		for tensor, shard := range wm {
			if !validShardName(shard) || strings.ContainsAny(shard, `/\`) || shard == ".." {
				t.Fatalf("tensor %q: accepted shard name %q", tensor, shard)
			}
		}
	})
}
