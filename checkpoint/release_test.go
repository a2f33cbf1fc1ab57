package checkpoint

import (
	"bytes"
	"path/filepath"
	"testing"

	"github.com/lowbit-ai/lowbit/format"
)

// Released pages must read back unchanged: the hint drops them from the
// process, never from the file.
func TestReleasePagesKeepsData(t *testing.T) {
	dir := t.TempDir()
	specs := []TensorSpec{{Name: "a", DType: format.U8, Shape: []int64{3 << 20}}, {Name: "b", DType: format.U8, Shape: []int64{5}}}
	if _, err := WriteTensors(dir, specs, patternFill(specs), WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	f, err := OpenFile(filepath.Join(dir, SingleFileName))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, name := range []string{"a", "b"} {
		tn, err := f.Tensor(name)
		if err != nil {
			t.Fatal(err)
		}
		before := bytes.Clone(tn.Data)
		ReleasePages(tn.Data)
		ReleasePages(tn.Data[:0])
		if !bytes.Equal(before, tn.Data) {
			t.Errorf("tensor %s changed after ReleasePages", name)
		}
	}
}
