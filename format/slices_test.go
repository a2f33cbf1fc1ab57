package format

import (
	"bytes"
	"math"
	"testing"
)

func TestSliceEncodings(t *testing.T) {
	src := []float32{1, -2, 0.5}
	tests := []struct {
		name   string
		encode func([]byte, []float32)
		size   int
		want   []byte
	}{
		// Little-endian, as safetensors stores them.
		{"EncodeBF16", EncodeBF16, 2, []byte{0x80, 0x3F, 0x00, 0xC0, 0x00, 0x3F}},
		{"EncodeF16", EncodeF16, 2, []byte{0x00, 0x3C, 0x00, 0xC0, 0x00, 0x38}},
		{"EncodeF32", EncodeF32, 4, []byte{0, 0, 0x80, 0x3F, 0, 0, 0, 0xC0, 0, 0, 0, 0x3F}},
		{"EncodeE4M3", EncodeE4M3, 1, []byte{0x38, 0xC0, 0x30}},
		{"EncodeE5M2", EncodeE5M2, 1, []byte{0x3C, 0xC0, 0x38}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := make([]byte, tc.size*len(src))
			tc.encode(got, src)
			if !bytes.Equal(got, tc.want) {
				t.Errorf("%s(%v) = % x, want % x", tc.name, src, got, tc.want)
			}
			mustPanic(t, tc.name+"(short dst)", func() { tc.encode(got[:len(got)-1], src) })
		})
	}
}

func TestSliceDecodings(t *testing.T) {
	want := []float32{1, -2, 0.5}
	tests := []struct {
		d    DType
		data []byte
	}{
		{BF16, []byte{0x80, 0x3F, 0x00, 0xC0, 0x00, 0x3F}},
		{F16, []byte{0x00, 0x3C, 0x00, 0xC0, 0x00, 0x38}},
		{F32, []byte{0, 0, 0x80, 0x3F, 0, 0, 0, 0xC0, 0, 0, 0, 0x3F}},
		{F8E4M3, []byte{0x38, 0xC0, 0x30}},
		{F8E5M2, []byte{0x3C, 0xC0, 0x38}},
	}
	for _, tc := range tests {
		t.Run(tc.d.String(), func(t *testing.T) {
			got := make([]float32, len(want))
			DecodeFloat32s(tc.d, got, tc.data)
			for i := range want {
				if got[i] != want[i] {
					t.Errorf("DecodeFloat32s(%v, % x)[%d] = %v, want %v", tc.d, tc.data, i, got[i], want[i])
				}
			}
			mustPanic(t, "DecodeFloat32s(short dst)", func() { DecodeFloat32s(tc.d, got[:2], tc.data) })
		})
	}
	got := make([]float32, 3)
	DecodeFloat32s(F8E8M0, got, []byte{127, 128, 0xFF})
	if got[0] != 1 || got[1] != 2 || got[2] == got[2] {
		t.Errorf("DecodeFloat32s(F8E8M0, 7f 80 ff) = %v, want [1 2 NaN]", got)
	}
	mustPanic(t, "DecodeFloat32s(I32)", func() { DecodeFloat32s(I32, got, make([]byte, 12)) })
	mustPanic(t, "DecodeFloat32s(F64)", func() { DecodeFloat32s(F64, got, make([]byte, 24)) })
}

func TestSliceBits(t *testing.T) {
	src := []float32{1, float32(math.Inf(-1)), 0x1p-24}
	b := make([]uint16, 3)
	EncodeBF16Bits(b, src)
	if b[0] != 0x3F80 || b[1] != 0xFF80 || b[2] != 0x3380 {
		t.Errorf("EncodeBF16Bits(%v) = %#04x", src, b)
	}
	back := make([]float32, 3)
	DecodeBF16Bits(back, b)
	for i := range src {
		if back[i] != src[i] {
			t.Errorf("DecodeBF16Bits(%#04x)[%d] = %v, want %v", b, i, back[i], src[i])
		}
	}
	EncodeF16Bits(b, src)
	if b[0] != 0x3C00 || b[1] != 0xFC00 || b[2] != 0x0001 {
		t.Errorf("EncodeF16Bits(%v) = %#04x", src, b)
	}
	DecodeF16Bits(back, b)
	for i := range src {
		if back[i] != src[i] {
			t.Errorf("DecodeF16Bits(%#04x)[%d] = %v, want %v", b, i, back[i], src[i])
		}
	}
	mustPanic(t, "EncodeBF16Bits(short dst)", func() { EncodeBF16Bits(b[:1], src) })
	mustPanic(t, "DecodeF16Bits(short dst)", func() { DecodeF16Bits(back[:1], b) })
}
