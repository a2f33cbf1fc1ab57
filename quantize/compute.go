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
	hinv := make([]*hessianInv, len(u.Members))
	if opts.Method == GPTQ {
		mods := make([]string, len(u.Members))
		for i, m := range u.Members {
			mods[i] = m.Module
		}
		if hinv, err = hessiansOf(opts.Stats, mods); err != nil {
			return nil, in, fmt.Errorf("quantize: %s: %w", u.Group, err)
		}
		for i, h := range hinv {
			if h.fallback && (i == 0 || hinv[i-1] != h) && r.warn != nil {
				r.warn(fmt.Sprintf("%s: the damped Hessian of %s is not positive definite; rounded to nearest instead of GPTQ (calibrate on more samples)", u.Group, u.Members[i].Module))
			}
		}
	}
	for i, m := range u.Members {
		o, err := quantizeMember(opts, mats[i], m.InputAbsMax, globalScale, hinv[i])
		if err != nil {
			return nil, in, fmt.Errorf("quantize: %s: %w", m.Module, err)
		}
		outs = append(outs, o...)
	}
	return outs, in, nil
}

// quantizeMember returns one module's output tensors in the order of its
// scheme's output table (outputs.go). hinv is the module's prepared Hessian
// for GPTQ.
func quantizeMember(opts Options, m Matrix, inputAbsMax, globalScale float32, hinv *hessianInv) ([][]byte, error) {
	ct := opts.Format != ModelOpt
	switch opts.Scheme {
	case FP8Dynamic, FP8, FP8Block:
		var w FP8Weight
		fp8 := func(clip []float32) error {
			switch {
			case opts.Scheme == FP8Dynamic && ct:
				return ctFP8Channel(&w, m, clip)
			case opts.Scheme == FP8Dynamic:
				return moFP8Channel(&w, m, clip)
			case opts.Scheme == FP8 && ct:
				return ctFP8Tensor(&w, m, clip)
			case opts.Scheme == FP8:
				return moFP8Tensor(&w, m, clip)
			}
			return ctFP8Block(&w, m, clip)
		}
		// RTN first: it checks the matrix and gives GPTQ its scales.
		if err := fp8(nil); err != nil {
			return nil, err
		}
		switch opts.Method {
		case MSE:
			if err := fp8(mseFP8Clip(opts.Format, opts.Scheme, m)); err != nil {
				return nil, err
			}
		case GPTQ:
			codes, err := gptq(m, hinv, fp8ScaleAt(opts.Format, opts.Scheme, &w, m), fp8Grid)
			if err != nil {
				return nil, err
			}
			w.Weight = codes
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
		fp4 := func(clip []float32) error {
			if ct {
				return ctNVFP4(&w, m, globalScale, clip)
			}
			return moNVFP4(&w, m, globalScale, clip)
		}
		if err := fp4(nil); err != nil {
			return nil, err
		}
		p := ctNVFP4Params(globalScale)
		if !ct {
			p = moNVFP4Params(globalScale)
		}
		switch opts.Method {
		case MSE:
			clip, err := mseNVFP4Clip(m, p)
			if err != nil {
				return nil, err
			}
			if err := fp4(clip); err != nil {
				return nil, err
			}
		case GPTQ:
			codes, err := gptq(m, hinv, nvfp4ScaleAt(p, w.Scale, m), fp4Grid)
			if err != nil {
				return nil, err
			}
			packE2M1(w.Packed, codes)
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
