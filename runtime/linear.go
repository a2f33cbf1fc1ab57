package runtime

import (
	"fmt"
	"slices"

	"github.com/lowbit-ai/lowbit/checkpoint"
	"github.com/lowbit-ai/lowbit/format"
	"github.com/lowbit-ai/lowbit/kernels"
)

// scheme is a checkpoint's quantization, reduced to what binding needs.
type scheme struct {
	name      string // a checkpoint.Scheme* constant; "" for a BF16 checkpoint
	modelOpt  bool   // ModelOpt names and scale conventions
	nativeFP8 bool   // vLLM's "fp8" method: block scales are named weight_scale_inv
}

// schemeOf checks that the runtime runs q's scheme.
func schemeOf(q *checkpoint.Quantization) (scheme, error) {
	if q == nil {
		return scheme{}, nil
	}
	switch q.Scheme {
	case checkpoint.SchemeFP8Dynamic, checkpoint.SchemeFP8, checkpoint.SchemeNVFP4, checkpoint.SchemeNVFP4A16:
	case checkpoint.SchemeFP8Block:
		if q.WeightBlockSize != nil && !slices.Equal(q.WeightBlockSize, []int{128, 128}) {
			return scheme{}, fmt.Errorf("runtime: %w: FP8 weight blocks of %v (the kernels take 128x128)", ErrUnsupported, q.WeightBlockSize)
		}
	default:
		return scheme{}, fmt.Errorf("runtime: %w: %s quantization scheme %s (supported: %s, %s, %s, %s, %s)", ErrUnsupported, q.Method, q.Scheme,
			checkpoint.SchemeFP8Dynamic, checkpoint.SchemeFP8, checkpoint.SchemeFP8Block, checkpoint.SchemeNVFP4, checkpoint.SchemeNVFP4A16)
	}
	return scheme{name: q.Scheme, modelOpt: q.Method == checkpoint.QuantModelOpt, nativeFP8: q.Method == checkpoint.QuantFP8}, nil
}

// linear is a bound linear layer, with the per-tensor values it was built
// from as stored, for the fused-layer reduction (reduceFused).
type linear struct {
	w                   kernels.Weight
	globalRaw, inputRaw float32
}

// linear binds the linear layer module ("model.layers.0.self_attn.q_proj")
// of shape [out, in]. Its format follows the stored tensors, which must
// agree with the checkpoint's scheme: a BF16 X.weight is an unquantized
// layer (one the quantization config ignores); X.weight_packed (or a U8
// X.weight in ModelOpt) is NVFP4; an F8_E4M3 X.weight is FP8.
func (b *binder) linear(s scheme, module string, out, in int) linear {
	n := len(b.errs)
	l := b.linearOf(s, module, out, in)
	if len(b.errs) > n {
		return linear{} // the errors name the layer's tensors
	}
	return l
}

func (b *binder) linearOf(s scheme, module string, out, in int) linear {
	w := module + ".weight"
	full := shape(out, in)
	if _, ok := b.info(module + ".weight_packed"); ok {
		return b.nvfp4(s, module, out, in)
	}
	e, ok := b.info(w)
	if !ok {
		if s.name == "" {
			b.errorf("tensor %s: missing (want BF16 %v)", w, full)
		} else {
			b.errorf("tensor %s: missing (want BF16 %v, or the tensors of %s)", w, full, s.name)
		}
		return linear{}
	}
	switch e.DType {
	case format.BF16:
		t, ok := b.get(w, want{[]format.DType{format.BF16}, [][]int64{full}})
		if !ok {
			return linear{}
		}
		return linear{w: kernels.Weight{Format: kernels.WeightBF16, Out: out, In: in, Data: t.Data, Act: kernels.ActNone}}
	case format.U8:
		return b.nvfp4(s, module, out, in)
	case format.F8E4M3:
		return b.fp8(s, module, out, in)
	}
	b.get(w, want{[]format.DType{format.BF16, format.F8E4M3, format.U8}, [][]int64{full}})
	return linear{}
}

func orBF16(s string) string {
	if s == "" {
		return "BF16"
	}
	return s
}

// mismatch records a layer stored in a format its checkpoint's scheme does
// not have.
func (b *binder) mismatch(s scheme, module, stored string) {
	b.errorf("layer %s: stored as %s, but the checkpoint's quantization is %s", module, stored, orBF16(s.name))
}

// fp8 binds an FP8 layer: X.weight F8_E4M3 [out, in] and its scales.
func (b *binder) fp8(s scheme, module string, out, in int) linear {
	l := linear{w: kernels.Weight{Out: out, In: in}}
	switch s.name {
	case checkpoint.SchemeFP8Dynamic:
		// CT: BF16 [out, 1]; ModelOpt: F32 [out].
		l.w.Format, l.w.Act = kernels.WeightFP8Channel, kernels.ActFP8Token
		l.w.Scales = b.floats(module+".weight_scale", [][]int64{shape(out, 1), shape(out)})
	case checkpoint.SchemeFP8:
		l.w.Format, l.w.Act = kernels.WeightFP8Tensor, kernels.ActFP8Tensor
		l.w.Scales = []float32{b.scalar(module + ".weight_scale")}
		l.inputRaw = b.scalar(module + ".input_scale")
		l.w.InputScale = l.inputRaw
	case checkpoint.SchemeFP8Block:
		name := module + ".weight_scale"
		if s.nativeFP8 {
			name += "_inv"
		}
		l.w.Format, l.w.Act = kernels.WeightFP8Block, kernels.ActFP8Group128
		l.w.Scales = b.floats(name, [][]int64{shape((out+127)/128, (in+127)/128)})
	default:
		b.mismatch(s, module, "FP8 (an F8_E4M3 weight)")
		return linear{}
	}
	t, ok := b.get(module+".weight", want{[]format.DType{format.F8E4M3}, [][]int64{shape(out, in)}})
	if !ok {
		return linear{}
	}
	l.w.Data = t.Data
	return l
}

// nvfp4 binds an NVFP4 layer. compressed-tensors: X.weight_packed U8
// [out, in/2], X.weight_scale F8_E4M3 [out, in/16], X.weight_global_scale
// F32 [1] (a quantization multiplier: dequantization divides by it), and for
// W4A4 X.input_global_scale F32 [1] (the activation multiplier G).
// ModelOpt: X.weight U8, X.weight_scale, X.weight_scale_2 F32 [] (a
// dequantization multiplier) and X.input_scale F32 [] = amax/(6·448), so
// G = 1/input_scale.
func (b *binder) nvfp4(s scheme, module string, out, in int) linear {
	if s.name != checkpoint.SchemeNVFP4 && s.name != checkpoint.SchemeNVFP4A16 {
		b.mismatch(s, module, "NVFP4 (packed U8 weights)")
		return linear{}
	}
	if in%16 != 0 {
		b.errorf("layer %s: NVFP4 needs in_features a multiple of 16, not %d", module, in)
		return linear{}
	}
	packed, global, input := ".weight_packed", ".weight_global_scale", ".input_global_scale"
	if s.modelOpt {
		packed, global, input = ".weight", ".weight_scale_2", ".input_scale"
	}
	l := linear{w: kernels.Weight{Format: kernels.WeightNVFP4, Out: out, In: in, Act: kernels.ActNone}}
	t, ok := b.get(module+packed, want{[]format.DType{format.U8}, [][]int64{shape(out, in/2)}})
	l.w.Scales = b.floats(module+".weight_scale", [][]int64{shape(out, in/16)}, format.F8E4M3)
	l.globalRaw = b.scalar(module+global, format.F32)
	if s.name == checkpoint.SchemeNVFP4 {
		l.w.Act = kernels.ActNVFP4
		l.inputRaw = b.scalar(module+input, format.F32)
	}
	if !ok {
		return linear{}
	}
	l.w.Data = t.Data
	l.setScales(s, l.globalRaw, l.inputRaw)
	return l
}

// setScales sets GlobalScale and InputScale from stored per-tensor values.
func (l *linear) setScales(s scheme, global, input float32) {
	switch {
	case l.w.Format == kernels.WeightNVFP4 && s.modelOpt:
		l.w.GlobalScale = global
		if l.w.Act == kernels.ActNVFP4 {
			l.w.InputScale = 1 / input
		}
	case l.w.Format == kernels.WeightNVFP4:
		l.w.GlobalScale = 1 / global
		if l.w.Act == kernels.ActNVFP4 {
			l.w.InputScale = input
		}
	case l.w.Act == kernels.ActFP8Tensor:
		l.w.InputScale = input
	}
}

// reduceFused makes the members of one fused layer (q/k/v, gate/up) share
// their per-tensor values the way vLLM's loaders reduce them when they
// concatenate the members into one matrix: the maximum of the stored
// NVFP4 weight global scales (weight_global_scale or weight_scale_2), of
// the stored activation scales (input_scale, input_global_scale). Every
// member must have the same format (vLLM rejects a partly quantized fused
// layer). lowbit's quantizer writes equal values, so this changes nothing
// for its checkpoints.
//
// One deviation: vLLM requantizes static per-tensor FP8 weights of a fused
// layer to the largest member scale; the runtime keeps each member's own
// scale, which is the exact value the checkpoint stores.
func (b *binder) reduceFused(s scheme, group string, ls ...*linear) {
	for _, l := range ls[1:] {
		if l.w.Format != ls[0].w.Format || l.w.Act != ls[0].w.Act {
			b.errorf("fused layer %s: members stored as %v/%v and %v/%v; vLLM needs one format for all", group,
				ls[0].w.Format, ls[0].w.Act, l.w.Format, l.w.Act)
			return
		}
	}
	var global, input float32
	for _, l := range ls {
		global, input = max(global, l.globalRaw), max(input, l.inputRaw)
	}
	for _, l := range ls {
		l.setScales(s, global, input)
	}
}

// check records an error for a bound weight the kernels would reject.
func (b *binder) check(module string, l linear) {
	if l.w.Data == nil {
		return // an error is already recorded
	}
	if err := l.w.Check(); err != nil {
		b.errorf("layer %s: %v", module, err)
	}
}
