package format

import "fmt"

// DType is an element type of a stored tensor. The zero value is invalid, so a
// DType that was never set cannot pass for a real one.
type DType uint8

const (
	Invalid DType = iota
	Bool
	U8
	I8
	U16
	I16
	U32
	I32
	U64
	I64
	F16
	BF16
	F32
	F64
	F8E4M3 // FP8 E4M3FN: no infinities, NaN only at 0x7F and 0xFF, max 448
	F8E5M2 // FP8 E5M2: IEEE-style, with infinities
	F8E8M0 // E8M0: an unsigned power-of-two scale, 2^(code-127), 0xFF is NaN
)

type dtypeInfo struct {
	name string // the dtype's name in a safetensors header
	size int    // bytes per element
}

var dtypes = [...]dtypeInfo{
	Invalid: {"INVALID", 0},
	Bool:    {"BOOL", 1},
	U8:      {"U8", 1},
	I8:      {"I8", 1},
	U16:     {"U16", 2},
	I16:     {"I16", 2},
	U32:     {"U32", 4},
	I32:     {"I32", 4},
	U64:     {"U64", 8},
	I64:     {"I64", 8},
	F16:     {"F16", 2},
	BF16:    {"BF16", 2},
	F32:     {"F32", 4},
	F64:     {"F64", 8},
	F8E4M3:  {"F8_E4M3", 1},
	F8E5M2:  {"F8_E5M2", 1},
	F8E8M0:  {"F8_E8M0", 1},
}

// String returns the safetensors name of d ("BF16", "F8_E4M3", ...).
func (d DType) String() string {
	if int(d) < len(dtypes) {
		return dtypes[d].name
	}
	return fmt.Sprintf("DType(%d)", uint8(d))
}

// Size returns the bytes one element of d occupies; 0 for Invalid.
func (d DType) Size() int {
	if int(d) < len(dtypes) {
		return dtypes[d].size
	}
	return 0
}

// Valid reports whether d is a known element type.
func (d DType) Valid() bool { return d > Invalid && int(d) < len(dtypes) }

// ParseDType parses a safetensors dtype name. Names are case-sensitive, as in
// the safetensors specification; an unknown name is an error, never a guess.
func ParseDType(name string) (DType, error) {
	for d := Bool; int(d) < len(dtypes); d++ {
		if dtypes[d].name == name {
			return d, nil
		}
	}
	return Invalid, fmt.Errorf("format: unknown dtype %q", name)
}

// MarshalText writes d's safetensors name, so DTypes read naturally in JSON.
func (d DType) MarshalText() ([]byte, error) {
	if !d.Valid() {
		return nil, fmt.Errorf("format: cannot marshal %v", d)
	}
	return []byte(d.String()), nil
}

// UnmarshalText parses a safetensors dtype name.
func (d *DType) UnmarshalText(b []byte) error {
	v, err := ParseDType(string(b))
	if err != nil {
		return err
	}
	*d = v
	return nil
}
