package format

import (
	"encoding/json"
	"errors"
	"io/fs"
	"math"
	"os"
	"testing"
)

// goldenPath is the committed output of scripts/golden_formats.py: float32
// inputs and the bit patterns torch's CPU casts gave for them.
const goldenPath = "../testdata/golden/formats.json"

type goldenFile struct {
	Command      string   `json:"command"`
	TorchVersion string   `json:"torch_version"`
	Inputs       []uint32 `json:"inputs"`
	Formats      map[string]struct {
		Source  string   `json:"source"`
		Outputs []uint32 `json:"outputs"`
	} `json:"formats"`
	CT *goldenCT `json:"ct"`
}

// goldenCT holds compressed-tensors' NVFP4 and FP8 weight formulas as torch
// evaluated them on BF16 weights (scripts/golden_formats.py ct_formulas).
type goldenCT struct {
	Source      string `json:"source"`
	GlobalScale struct {
		Amax    []uint16 `json:"amax"`
		Outputs []uint32 `json:"outputs"`
	} `json:"global_scale"`
	Rows   int `json:"rows"`
	Cols   int `json:"cols"`
	Trials []struct {
		W                []uint16 `json:"w"`
		NVFP4GlobalScale uint32   `json:"nvfp4_global_scale"`
		NVFP4Scales      []uint8  `json:"nvfp4_scales"`
		NVFP4Codes       []uint8  `json:"nvfp4_codes"`
		FP8Scales        []uint16 `json:"fp8_scales"`
		FP8              []uint8  `json:"fp8"`
	} `json:"trials"`
}

// goldenFormat ties a format name in the golden file to the encoder that must
// reproduce torch bit for bit, and to the predicate that says which of its
// codes are NaN (nil for E2M1, which has none).
type goldenFormat struct {
	encode   func(float32) uint32
	isNaN    func(uint32) bool
	required bool // every torch 2.11 has it; e8m0fnu may be absent elsewhere
}

var goldenFormats = map[string]goldenFormat{
	"bf16": {
		encode:   func(f float32) uint32 { return uint32(BF16FromFloat32(f)) },
		isNaN:    func(c uint32) bool { return c&0x7FFF > 0x7F80 },
		required: true,
	},
	"f16": {
		encode:   func(f float32) uint32 { return uint32(F16FromFloat32(f)) },
		isNaN:    func(c uint32) bool { return c&0x7FFF > 0x7C00 },
		required: true,
	},
	"e4m3fn": {
		encode:   func(f float32) uint32 { return uint32(E4M3FromFloat32Torch(f)) },
		isNaN:    func(c uint32) bool { return E4M3IsNaN(uint8(c)) },
		required: true,
	},
	"e5m2": {
		encode:   func(f float32) uint32 { return uint32(E5M2FromFloat32(f)) },
		isNaN:    func(c uint32) bool { return E5M2IsNaN(uint8(c)) },
		required: true,
	},
	"e2m1": {
		encode:   func(f float32) uint32 { return uint32(E2M1FromFloat32(f)) },
		required: true,
	},
	"e8m0fnu": {
		encode: func(f float32) uint32 { return uint32(E8M0FromFloat32(f)) },
		isNaN:  func(c uint32) bool { return c == E8M0NaN },
	},
}

// goldenAgrees reports whether our code matches torch's for input bits in.
// For a NaN input, torch's kernels differ in the NaN code they emit (sign and
// payload), so any NaN code of the format matches any other; everything else
// must agree bit for bit.
func goldenAgrees(gf goldenFormat, in, ours, torch uint32) bool {
	if gf.isNaN != nil && in&^signBit32 > f32inf {
		return gf.isNaN(ours) && gf.isNaN(torch)
	}
	return ours == torch
}

// readGolden reads the golden file, skipping the test while it has not been
// generated yet.
func readGolden(t *testing.T) *goldenFile {
	t.Helper()
	data, err := os.ReadFile(goldenPath)
	if errors.Is(err, fs.ErrNotExist) {
		t.Skip("testdata/golden/formats.json not generated yet: run " +
			"`python3 scripts/golden_formats.py --out testdata/golden/formats.json` " +
			"where torch is installed (CPU is enough) and commit the file")
	}
	if err != nil {
		t.Fatal(err)
	}
	var g goldenFile
	if err := json.Unmarshal(data, &g); err != nil {
		t.Fatalf("parse %s: %v", goldenPath, err)
	}
	return &g
}

func TestGoldenTorch(t *testing.T) {
	g := readGolden(t)
	if len(g.Inputs) == 0 {
		t.Fatalf("%s has no inputs", goldenPath)
	}
	t.Logf("golden file from torch %s, %d inputs", g.TorchVersion, len(g.Inputs))

	for name, gf := range goldenFormats {
		t.Run(name, func(t *testing.T) {
			entry, ok := g.Formats[name]
			if !ok {
				if gf.required {
					t.Fatalf("%s has no %q outputs", goldenPath, name)
				}
				t.Skipf("%s has no %q outputs (that torch lacks the dtype)", goldenPath, name)
			}
			if len(entry.Outputs) != len(g.Inputs) {
				t.Fatalf("%d %s outputs for %d inputs", len(entry.Outputs), name, len(g.Inputs))
			}
			bad := 0
			for i, in := range g.Inputs {
				ours, torch := gf.encode(math.Float32frombits(in)), entry.Outputs[i]
				if goldenAgrees(gf, in, ours, torch) {
					continue
				}
				if bad++; bad <= 20 {
					t.Errorf("%s(%#08x = %v) = %#x, want %#x (%s)",
						name, in, math.Float32frombits(in), ours, torch, entry.Source)
				}
			}
			if bad > 20 {
				t.Errorf("%s: %d mismatches in all, first 20 shown", name, bad)
			}
		})
	}
	for name := range g.Formats {
		if _, ok := goldenFormats[name]; !ok {
			t.Errorf("%s has outputs for %q, which this test does not check", goldenPath, name)
		}
	}
}

// TestGoldenCT requires the block helpers, with compute BF16, to reproduce
// compressed-tensors' NVFP4 and FP8 weight quantization bit for bit, every
// scale computed here from the weights alone.
func TestGoldenCT(t *testing.T) {
	g := readGolden(t)
	ct := g.CT
	if ct == nil {
		t.Fatalf("%s has no \"ct\" section; regenerate it", goldenPath)
	}
	for i, a := range ct.GlobalScale.Amax {
		amax := BF16ToFloat32(a)
		got, want := NVFP4GlobalScale(amax, BF16), ct.GlobalScale.Outputs[i]
		if math.Float32bits(got) != want {
			t.Fatalf("NVFP4GlobalScale(%v, BF16) = %v, want %v (%s)", amax, got, math.Float32frombits(want), ct.Source)
		}
	}
	cols := ct.Cols
	if cols%NVFP4BlockSize != 0 || len(ct.Trials) == 0 {
		t.Fatalf("ct section: cols %d, %d trials", cols, len(ct.Trials))
	}
	for n, tr := range ct.Trials {
		w := make([]float32, len(tr.W))
		DecodeBF16Bits(w, tr.W)
		gs := NVFP4GlobalScale(AbsMax(w), BF16)
		if math.Float32bits(gs) != tr.NVFP4GlobalScale {
			t.Fatalf("trial %d: NVFP4GlobalScale = %v, want %v", n, gs, math.Float32frombits(tr.NVFP4GlobalScale))
		}
		packed := make([]byte, cols/2)
		scales := make([]uint8, cols/NVFP4BlockSize)
		codes := make([]uint8, cols)
		fp8 := make([]uint8, cols)
		for r := range ct.Rows {
			row := w[r*cols : (r+1)*cols]
			QuantizeNVFP4Row(packed, scales, row, gs, BF16)
			UnpackE2M1(codes, packed)
			for b, sc := range scales {
				if want := tr.NVFP4Scales[r*len(scales)+b]; sc != want {
					t.Errorf("trial %d row %d block %d: NVFP4 scale %#02x, want %#02x", n, r, b, sc, want)
				}
			}
			for i, c := range codes {
				// CT's -0 is stored as +0 in the golden file: compare values.
				if want := tr.NVFP4Codes[r*cols+i]; E2M1ToFloat32(c) != E2M1ToFloat32(want) {
					t.Errorf("trial %d row %d: NVFP4 code of %v = %d, want %d", n, r, row[i], c, want)
				}
			}
			s := FP8Scale(AbsMax(row), BF16)
			if want := tr.FP8Scales[r]; BF16FromFloat32(s) != want {
				t.Errorf("trial %d row %d: FP8Scale = %v, want %v", n, r, s, BF16ToFloat32(want))
			}
			QuantizeE4M3(fp8, row, s, BF16)
			for i, c := range fp8 {
				if want := tr.FP8[r*cols+i]; c != want {
					t.Errorf("trial %d row %d: FP8 code of %v = %#02x, want %#02x", n, r, row[i], c, want)
				}
			}
		}
		if t.Failed() {
			return // one trial's mismatches are enough to read
		}
	}
}

// TestGoldenAgrees pins the NaN rule of the comparison itself.
func TestGoldenAgrees(t *testing.T) {
	bf16 := goldenFormats["bf16"]
	e2m1 := goldenFormats["e2m1"]
	tests := []struct {
		name            string
		gf              goldenFormat
		in, ours, torch uint32
		want            bool
	}{
		{"NaN input, different NaN codes", bf16, 0xFFC00000, 0x7FC0, 0xFFFF, true},
		{"NaN input, torch not NaN", bf16, 0x7FC00000, 0x7FC0, 0x7F80, false},
		{"finite input, same code", bf16, 0x3F800000, 0x3F80, 0x3F80, true},
		{"finite input, codes differ", bf16, 0x3F800000, 0x3F80, 0x3F81, false},
		{"format without NaN compares exactly", e2m1, 0xFFC00000, 8, 0, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := goldenAgrees(tc.gf, tc.in, tc.ours, tc.torch); got != tc.want {
				t.Errorf("goldenAgrees(%#08x, %#x, %#x) = %v, want %v", tc.in, tc.ours, tc.torch, got, tc.want)
			}
		})
	}
}
