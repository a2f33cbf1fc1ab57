package format

import (
	"encoding/binary"
	"math"
)

// Slice conversions between float32 and stored tensor data. Byte slices are
// little-endian, as safetensors stores every multi-byte dtype. Each function
// requires dst and src to hold the same number of elements and panics
// otherwise: a length mismatch is a programming error, and silently
// converting a prefix would hide it.

func checkLen(fn string, dstElems, srcElems int) {
	if dstElems != srcElems {
		panic("format: " + fn + ": dst and src hold different numbers of elements")
	}
}

// EncodeBF16 writes BF16FromFloat32(src[i]) to dst[2i:2i+2], little-endian.
func EncodeBF16(dst []byte, src []float32) {
	checkLen("EncodeBF16", len(dst), 2*len(src))
	for i, f := range src {
		binary.LittleEndian.PutUint16(dst[2*i:], BF16FromFloat32(f))
	}
}

// DecodeBF16 writes the value of each little-endian BF16 in src to dst.
func DecodeBF16(dst []float32, src []byte) {
	checkLen("DecodeBF16", 2*len(dst), len(src))
	for i := range dst {
		dst[i] = BF16ToFloat32(binary.LittleEndian.Uint16(src[2*i:]))
	}
}

// EncodeBF16Bits writes BF16FromFloat32(src[i]) to dst[i].
func EncodeBF16Bits(dst []uint16, src []float32) {
	checkLen("EncodeBF16Bits", len(dst), len(src))
	for i, f := range src {
		dst[i] = BF16FromFloat32(f)
	}
}

// DecodeBF16Bits writes BF16ToFloat32(src[i]) to dst[i].
func DecodeBF16Bits(dst []float32, src []uint16) {
	checkLen("DecodeBF16Bits", len(dst), len(src))
	for i, b := range src {
		dst[i] = BF16ToFloat32(b)
	}
}

// EncodeF16 writes F16FromFloat32(src[i]) to dst[2i:2i+2], little-endian.
func EncodeF16(dst []byte, src []float32) {
	checkLen("EncodeF16", len(dst), 2*len(src))
	for i, f := range src {
		binary.LittleEndian.PutUint16(dst[2*i:], F16FromFloat32(f))
	}
}

// DecodeF16 writes the value of each little-endian F16 in src to dst.
func DecodeF16(dst []float32, src []byte) {
	checkLen("DecodeF16", 2*len(dst), len(src))
	for i := range dst {
		dst[i] = F16ToFloat32(binary.LittleEndian.Uint16(src[2*i:]))
	}
}

// EncodeF16Bits writes F16FromFloat32(src[i]) to dst[i].
func EncodeF16Bits(dst []uint16, src []float32) {
	checkLen("EncodeF16Bits", len(dst), len(src))
	for i, f := range src {
		dst[i] = F16FromFloat32(f)
	}
}

// DecodeF16Bits writes F16ToFloat32(src[i]) to dst[i].
func DecodeF16Bits(dst []float32, src []uint16) {
	checkLen("DecodeF16Bits", len(dst), len(src))
	for i, h := range src {
		dst[i] = F16ToFloat32(h)
	}
}

// EncodeF32 writes each float32 of src to dst, little-endian, bits unchanged.
func EncodeF32(dst []byte, src []float32) {
	checkLen("EncodeF32", len(dst), 4*len(src))
	for i, f := range src {
		binary.LittleEndian.PutUint32(dst[4*i:], math.Float32bits(f))
	}
}

// DecodeF32 reads little-endian float32s from src into dst, bits unchanged.
func DecodeF32(dst []float32, src []byte) {
	checkLen("DecodeF32", 4*len(dst), len(src))
	for i := range dst {
		dst[i] = math.Float32frombits(binary.LittleEndian.Uint32(src[4*i:]))
	}
}

// EncodeE4M3 writes E4M3FromFloat32(src[i]) to dst[i]: the saturating cast
// quantizers use. Scale src first; see QuantizeE4M3.
func EncodeE4M3(dst []byte, src []float32) {
	checkLen("EncodeE4M3", len(dst), len(src))
	for i, f := range src {
		dst[i] = E4M3FromFloat32(f)
	}
}

// DecodeE4M3 writes E4M3ToFloat32(src[i]) to dst[i].
func DecodeE4M3(dst []float32, src []byte) {
	checkLen("DecodeE4M3", len(dst), len(src))
	for i, c := range src {
		dst[i] = E4M3ToFloat32(c)
	}
}

// EncodeE5M2 writes E5M2FromFloat32(src[i]) to dst[i].
func EncodeE5M2(dst []byte, src []float32) {
	checkLen("EncodeE5M2", len(dst), len(src))
	for i, f := range src {
		dst[i] = E5M2FromFloat32(f)
	}
}

// DecodeE5M2 writes E5M2ToFloat32(src[i]) to dst[i].
func DecodeE5M2(dst []float32, src []byte) {
	checkLen("DecodeE5M2", len(dst), len(src))
	for i, c := range src {
		dst[i] = E5M2ToFloat32(c)
	}
}

// DecodeFloat32s decodes src, little-endian elements of the floating-point
// dtype d (F32, F16, BF16, F8E4M3, F8E5M2 or F8E8M0), into dst, one float32
// per element. It panics for any other d and unless src holds exactly
// len(dst) elements. F64 is not accepted because float32 cannot hold it
// without rounding.
func DecodeFloat32s(d DType, dst []float32, src []byte) {
	switch d {
	case F32:
		DecodeF32(dst, src)
	case F16:
		DecodeF16(dst, src)
	case BF16:
		DecodeBF16(dst, src)
	case F8E4M3:
		DecodeE4M3(dst, src)
	case F8E5M2:
		DecodeE5M2(dst, src)
	case F8E8M0:
		checkLen("DecodeFloat32s", len(dst), len(src))
		for i, c := range src {
			dst[i] = E8M0ToFloat32(c)
		}
	default:
		panic("format: DecodeFloat32s: " + d.String() + " is not a float dtype it decodes")
	}
}
