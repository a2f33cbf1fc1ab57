package checkpoint

import (
	"slices"
	"testing"
)

func TestCompareNames(t *testing.T) {
	in := []string{"layers.10.a", "layers.2.b", "layers.2.a", "layers.02.a", "layers.1", "b", "a.9", "a.10"}
	want := []string{"a.9", "a.10", "b", "layers.1", "layers.2.a", "layers.2.b", "layers.02.a", "layers.10.a"}
	slices.SortFunc(in, CompareNames)
	if !slices.Equal(in, want) {
		t.Errorf("sorted %q, want %q", in, want)
	}
}
