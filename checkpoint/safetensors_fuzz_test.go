package checkpoint

import (
	"errors"
	"maps"
	"reflect"
	"testing"
)

// FuzzParseHeader checks that ParseHeader never panics, that every rejection
// wraps ErrCorrupt, and that every accepted header satisfies the documented
// invariants and survives a round trip through the writer's encoder.
func FuzzParseHeader(f *testing.F) {
	seeds := []struct {
		hdr  string
		size int64
	}{
		{`{}`, 0},
		{`{}   `, 0},
		{`{"__metadata__":{"format":"pt"}}`, 0},
		{`{"__metadata__":null}`, 0},
		{twoTensors, 12},
		{twoTensors + "    ", 12},
		{`{"s":{"dtype":"F8_E4M3","shape":[],"data_offsets":[0,1]},"z":{"dtype":"F32","shape":[0,3],"data_offsets":[1,1]}}`, 1},
		{`{"a":{"dtype":"F8_E8M0","shape":[2,2],"data_offsets":[0,4]},"b":{"dtype":"BOOL","shape":[1],"data_offsets":[4,5]}}`, 5},
		// Invalid ones.
		{`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}}`, 12},
		{`{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}}`, 12},
		{`{"a":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,0]}}`, 0},
		{`{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}`, 8},
		{`{"a":{"dtype":"X","shape":[1],"data_offsets":[0,4]}}`, 4},
		{`{"__metadata__":{"n":1}}`, 0},
		{`{"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}}`, 4},
		{`{"a":`, 0},
		{`{}x`, 0},
		{`[]`, 0},
		{`{}`, -1},
	}
	for _, s := range seeds {
		f.Add([]byte(s.hdr), s.size)
	}
	f.Fuzz(func(t *testing.T, b []byte, dataSize int64) {
		h, err := ParseHeader(b, dataSize)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error %v does not wrap ErrCorrupt", err)
			}
			if h != nil {
				t.Fatal("non-nil header with an error")
			}
			return
		}
		checkHeaderInvariants(t, h, int64(len(b)), dataSize)

		// Re-encoding the accepted header gives an equivalent one.
		enc, err := encodeHeader(h.Tensors, h.Metadata)
		if err != nil {
			t.Fatalf("encodeHeader: %v", err)
		}
		h2, err := ParseHeader(enc, dataSize)
		if err != nil {
			t.Fatalf("re-encoded header %q rejected: %v", enc, err)
		}
		if !reflect.DeepEqual(h2.Tensors, h.Tensors) {
			t.Fatalf("round trip changed tensors:\n%+v\n%+v", h.Tensors, h2.Tensors)
		}
		if !maps.Equal(h2.Metadata, h.Metadata) {
			t.Fatalf("round trip changed metadata: %v, %v", h.Metadata, h2.Metadata)
		}
	})
}

// checkHeaderInvariants asserts what ParseHeader promises of an accepted
// header of hdrLen bytes over a dataSize-byte data section.
func checkHeaderInvariants(t *testing.T, h *Header, hdrLen, dataSize int64) {
	t.Helper()
	if h.DataStart != 8+hdrLen || h.DataSize != dataSize {
		t.Fatalf("DataStart, DataSize = %d, %d; want %d, %d", h.DataStart, h.DataSize, 8+hdrLen, dataSize)
	}
	var pos int64
	names := map[string]bool{}
	for i, ti := range h.Tensors {
		if ti.Name == "" || names[ti.Name] {
			t.Fatalf("tensor %d: empty or duplicate name %q", i, ti.Name)
		}
		names[ti.Name] = true
		if !ti.DType.Valid() {
			t.Fatalf("tensor %q: invalid dtype", ti.Name)
		}
		if ti.Shape == nil {
			t.Fatalf("tensor %q: nil shape", ti.Name)
		}
		n, ok := shapeBytes(ti.Shape, ti.DType)
		if !ok || n != ti.Bytes() || ti.NumElements()*int64(ti.DType.Size()) != n {
			t.Fatalf("tensor %q: shape %v of %v vs %d bytes", ti.Name, ti.Shape, ti.DType, ti.Bytes())
		}
		if ti.Begin != pos || ti.End < ti.Begin {
			t.Fatalf("tensor %q: [%d, %d] not contiguous at %d", ti.Name, ti.Begin, ti.End, pos)
		}
		if i > 0 && ti.Begin == h.Tensors[i-1].Begin && ti.End == h.Tensors[i-1].End && ti.Name < h.Tensors[i-1].Name {
			t.Fatalf("tensor %q: ties not sorted by name", ti.Name)
		}
		pos = ti.End
		if got, ok := h.Lookup(ti.Name); !ok || !reflect.DeepEqual(got, ti) {
			t.Fatalf("Lookup(%q) = %+v, %v", ti.Name, got, ok)
		}
	}
	if pos != dataSize {
		t.Fatalf("tensors end at %d, data section is %d bytes", pos, dataSize)
	}
}
