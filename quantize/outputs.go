package quantize

import (
	"fmt"

	"github.com/lowbit-ai/lowbit/format"
)

// output is one tensor a quantized module stores: its name suffix after
// "<module>.", dtype and shape. The tables below are the layouts the loaders
// expect (vLLM's compressed_tensors and modelopt schemes; see
// ../shared/specs/formats.md §0-§2), and the order in which the compute step
// returns their bytes.
type output struct {
	suffix string
	dtype  format.DType
	shape  func(rows, cols int) []int64
}

func dims(d ...int) []int64 {
	s := make([]int64, len(d))
	for i, v := range d {
		s[i] = int64(v)
	}
	return s
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }

var (
	fullShape    = func(r, c int) []int64 { return dims(r, c) }
	oneShape     = func(r, c int) []int64 { return dims(1) }
	scalarShape  = func(r, c int) []int64 { return []int64{} }
	packedShape  = func(r, c int) []int64 { return dims(r, c/2) }
	groupShape   = func(r, c int) []int64 { return dims(r, c/format.NVFP4BlockSize) }
	channelShape = func(r, c int) []int64 { return dims(r, 1) }
	blockShape   = func(r, c int) []int64 {
		return dims(ceilDiv(r, format.FP8BlockSize), ceilDiv(c, format.FP8BlockSize))
	}
)

var outputTables = map[Format]map[Scheme][]output{
	CompressedTensors: {
		FP8Dynamic: {{"weight", format.F8E4M3, fullShape}, {"weight_scale", format.BF16, channelShape}},
		FP8:        {{"weight", format.F8E4M3, fullShape}, {"weight_scale", format.BF16, oneShape}, {"input_scale", format.BF16, oneShape}},
		FP8Block:   {{"weight", format.F8E4M3, fullShape}, {"weight_scale", format.BF16, blockShape}},
		NVFP4: {{"weight_packed", format.U8, packedShape}, {"weight_scale", format.F8E4M3, groupShape},
			{"weight_global_scale", format.F32, oneShape}, {"input_global_scale", format.F32, oneShape}},
		NVFP4A16: {{"weight_packed", format.U8, packedShape}, {"weight_scale", format.F8E4M3, groupShape},
			{"weight_global_scale", format.F32, oneShape}},
	},
	ModelOpt: {
		FP8Dynamic: {{"weight", format.F8E4M3, fullShape}, {"weight_scale", format.F32, func(r, c int) []int64 { return dims(r) }}},
		FP8:        {{"weight", format.F8E4M3, fullShape}, {"weight_scale", format.F32, scalarShape}, {"input_scale", format.F32, scalarShape}},
		NVFP4: {{"weight", format.U8, packedShape}, {"weight_scale", format.F8E4M3, groupShape},
			{"weight_scale_2", format.F32, scalarShape}, {"input_scale", format.F32, scalarShape}},
	},
}

// outputsOf returns the tensors a quantized module stores.
func outputsOf(s Scheme, f Format) ([]output, error) {
	outs, ok := outputTables[f][s]
	if !ok {
		return nil, fmt.Errorf("quantize: the %s format has no %s scheme (ModelOpt writes fp8, fp8-dynamic and nvfp4)", f, s)
	}
	return outs, nil
}

// checkShape reports whether a [rows, cols] weight can take the scheme.
func checkShape(s Scheme, module string, rows, cols int) error {
	var err error
	switch {
	case s.FP4():
		err = CheckNVFP4Shape(rows, cols)
	case s == FP8Block:
		err = CheckFP8BlockShape(rows, cols)
	}
	if err != nil {
		return fmt.Errorf("%w; keep %s in BF16 with --ignore %s", err, module, module)
	}
	return nil
}

// kvOutputs are the KV-cache scale tensors of one attention module: CT
// stores BF16 [1] scales on the attention module; ModelOpt stores F32
// scalars on k_proj and v_proj.
func kvOutputs(f Format, attn string) []struct {
	name  string
	dtype format.DType
	shape []int64
} {
	type o = struct {
		name  string
		dtype format.DType
		shape []int64
	}
	if f == ModelOpt {
		return []o{{attn + ".k_proj.k_scale", format.F32, []int64{}}, {attn + ".v_proj.v_scale", format.F32, []int64{}}}
	}
	return []o{{attn + ".k_scale", format.BF16, dims(1)}, {attn + ".v_scale", format.BF16, dims(1)}}
}
