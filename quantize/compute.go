package quantize

import (
	"fmt"
)

// e4m3Max is the absmax that maps to a KV scale of exactly 1.0 (k_scale =
// amax/448): what --kv-scale-one stands in for missing statistics.
const e4m3Max = 448

// kvScaleBytes returns a KV-cache scale tensor's bytes for an absmax.
func kvScaleBytes(f Format, amax float32) ([]byte, error) {
	if f == ModelOpt {
		return ModelOptKVScale(amax)
	}
	return CTKVScale(amax)
}

// compute quantizes the members of one fused layer, reading their weights
// from the mapping. It returns the outputs in plan order, and the source
// views it read, for the writer to release once they are written.
func (r *runner) compute(u *unit) (outs [][]byte, in [][]byte, err error) {
	opts := r.plan.Opts
	mats := make([]Matrix, len(u.Members))
	amax := make([]float32, len(u.Members))
	for i, m := range u.Members {
		v, err := r.view(m.Src, true)
		if err != nil {
			return nil, nil, err
		}
		in = append(in, v)
		mats[i] = Matrix{Rows: m.Src.Rows, Cols: m.Src.Cols, BF16: v}
		if opts.Scheme.FP4() {
			amax[i] = mats[i].AbsMax()
		}
	}
	var globalScale float32
	if opts.Scheme.FP4() {
		if opts.Format == ModelOpt {
			globalScale, err = ModelOptNVFP4WeightScale2(amax...)
		} else {
			globalScale, err = CTNVFP4GlobalScale(amax...)
		}
		if err != nil {
			return nil, in, fmt.Errorf("quantize: %s: %w", u.Group, err)
		}
	}
	for i, m := range u.Members {
		o, err := quantizeMember(opts, mats[i], m.InputAbsMax, globalScale)
		if err != nil {
			return nil, in, fmt.Errorf("quantize: %s: %w", m.Module, err)
		}
		outs = append(outs, o...)
	}
	return outs, in, nil
}

// quantizeMember returns one module's output tensors in the order of its
// scheme's output table (outputs.go).
func quantizeMember(opts Options, m Matrix, inputAbsMax, globalScale float32) ([][]byte, error) {
	ct := opts.Format != ModelOpt
	switch opts.Scheme {
	case FP8Dynamic, FP8, FP8Block:
		var w FP8Weight
		var err error
		switch {
		case opts.Scheme == FP8Dynamic && ct:
			err = CTFP8Channel(&w, m)
		case opts.Scheme == FP8Dynamic:
			err = ModelOptFP8Channel(&w, m)
		case opts.Scheme == FP8 && ct:
			err = CTFP8Tensor(&w, m)
		case opts.Scheme == FP8:
			err = ModelOptFP8Tensor(&w, m)
		default:
			err = CTFP8Block(&w, m)
		}
		if err != nil {
			return nil, err
		}
		if opts.Scheme != FP8 {
			return [][]byte{w.Weight, w.Scale}, nil
		}
		in, err := actScale(opts, inputAbsMax)
		if err != nil {
			return nil, err
		}
		return [][]byte{w.Weight, w.Scale, in}, nil
	case NVFP4, NVFP4A16:
		var w NVFP4Weight
		var err error
		if ct {
			err = CTNVFP4(&w, m, globalScale)
		} else {
			err = ModelOptNVFP4(&w, m, globalScale)
		}
		if err != nil {
			return nil, err
		}
		if opts.Scheme == NVFP4A16 {
			return [][]byte{w.Packed, w.Scale, w.GlobalScale}, nil
		}
		in, err := actScale(opts, inputAbsMax)
		if err != nil {
			return nil, err
		}
		return [][]byte{w.Packed, w.Scale, w.GlobalScale, in}, nil
	}
	return nil, fmt.Errorf("quantize: unknown scheme %d", opts.Scheme)
}

// actScale returns the stored activation scale for a calibrated absmax.
func actScale(opts Options, amax float32) ([]byte, error) {
	switch {
	case opts.Scheme == FP8 && opts.Format == ModelOpt:
		return ModelOptFP8InputScale(amax)
	case opts.Scheme == FP8:
		return CTFP8InputScale(amax)
	case opts.Format == ModelOpt:
		return ModelOptNVFP4InputScale(amax)
	}
	return CTNVFP4InputGlobalScale(amax)
}
