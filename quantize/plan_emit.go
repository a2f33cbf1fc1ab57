package quantize

import (
	"fmt"
	"regexp"
	"slices"

	"github.com/lowbit-ai/lowbit/checkpoint"
	"github.com/lowbit-ai/lowbit/format"
)

// emit lays out the units and output tensors in source order: each source
// tensor's outputs appear where it was, a fused layer's where its first
// member was, and the KV-cache scales last.
func (b *planBuilder) emit() error {
	p := b.p
	outs, err := outputsOf(p.Opts.Scheme, p.Opts.Format)
	if err != nil {
		return err
	}
	groups := map[string][]*candidate{}
	for _, c := range b.cands {
		if c.kept == "" {
			g := fusedGroup(c.module)
			groups[g] = append(groups[g], c)
		}
	}
	byPos := map[int][]*candidate{}
	for _, c := range b.cands {
		byPos[c.pos] = append(byPos[c.pos], c)
	}
	emitted := map[string]bool{}
	passAt := map[string]bool{}
	for _, e := range b.passes {
		passAt[e.Name] = true
	}
	for pos, e := range b.inv.Tensors {
		if passAt[e.Name] {
			p.addCopy(e)
			continue
		}
		for _, c := range byPos[pos] {
			if c.kept != "" {
				p.addKept(c, b.splits[e.Name] != nil)
				continue
			}
			g := fusedGroup(c.module)
			if emitted[g] {
				continue
			}
			emitted[g] = true
			if err := p.addGroup(g, groups[g], outs); err != nil {
				return err
			}
		}
	}
	if p.Opts.KVCacheFP8 {
		if err := b.addKVScales(); err != nil {
			return err
		}
	}
	for _, u := range p.units {
		p.LargestUnit = max(p.LargestUnit, u.InBytes)
	}
	return nil
}

func (p *Plan) addOutput(spec checkpoint.TensorSpec, src, how string, in int64) int {
	p.Outputs = append(p.Outputs, spec)
	p.Actions = append(p.Actions, Action{Output: spec, Source: src, How: how, InBytes: in})
	p.BytesIn += in
	p.BytesOut += spec.Bytes()
	return len(p.Outputs) - 1
}

func (p *Plan) addCopy(e checkpoint.TensorEntry) {
	i := p.addOutput(checkpoint.TensorSpec{Name: e.Name, DType: e.DType, Shape: e.Shape}, e.Name, "copy", e.Bytes())
	p.units = append(p.units, unit{Kind: copyTensor, Src: matrix{Tensor: e.Name}, First: i, Count: 1, InBytes: e.Bytes()})
}

// addKept copies an unquantized linear module; a module split out of a
// fused expert tensor is copied as its own tensor.
func (p *Plan) addKept(c *candidate, split bool) {
	spec := checkpoint.TensorSpec{Name: c.module + ".weight", DType: format.BF16, Shape: dims(c.src.Rows, c.src.Cols)}
	if !split {
		i := p.addOutput(spec, c.src.Tensor, "copy", c.src.bytes())
		p.units = append(p.units, unit{Kind: copyTensor, Src: c.src, First: i, Count: 1, InBytes: c.src.bytes()})
		return
	}
	i := p.addOutput(spec, c.src.Tensor, "split", c.src.bytes())
	p.units = append(p.units, unit{Kind: copySlice, Src: c.src, First: i, Count: 1, InBytes: c.src.bytes()})
}

// addGroup adds the quantization of one fused layer.
func (p *Plan) addGroup(g string, cs []*candidate, outs []output) error {
	u := unit{Kind: quantGroup, Group: g, First: len(p.Outputs)}
	for i, c := range cs {
		// vLLM concatenates a fused layer's blocks along the output
		// dimension, so every member but the last needs whole 128-row blocks.
		if p.Opts.Scheme == FP8Block && i < len(cs)-1 && c.src.Rows%128 != 0 {
			return fmt.Errorf("quantize: %s: %d output rows are not a multiple of 128, which fp8-block needs for a member of the fused layer %s; keep the layer in BF16 with --ignore %s",
				c.module, c.src.Rows, g, c.module)
		}
		if err := checkShape(p.Opts.Scheme, c.module, c.src.Rows, c.src.Cols); err != nil {
			return err
		}
		m := member{Module: c.module, Src: c.src, First: len(p.Outputs)}
		if p.Opts.Method == GPTQ {
			if err := p.checkHessian(c.module, c.src.Cols); err != nil {
				return err
			}
			u.Work += gptqWorkBytes(c.src.Rows, c.src.Cols)
		}
		if p.Opts.Scheme.StaticInputs() {
			amax, err := p.inputAbsMax(c.module)
			if err != nil {
				return err
			}
			m.InputAbsMax = amax
		}
		for k, o := range outs {
			in := int64(0)
			if k == 0 {
				in = c.src.bytes()
			}
			p.addOutput(checkpoint.TensorSpec{Name: c.module + "." + o.suffix, DType: o.dtype, Shape: o.shape(c.src.Rows, c.src.Cols)},
				c.src.Tensor, p.how(), in)
		}
		u.Members = append(u.Members, m)
		u.InBytes += c.src.bytes()
		p.Quantized = append(p.Quantized, c.module)
	}
	u.Count = len(p.Outputs) - u.First
	p.units = append(p.units, u)
	return nil
}

func (p *Plan) inputAbsMax(module string) (float32, error) {
	if p.Opts.Stats == nil {
		return 0, fmt.Errorf("quantize: the %s scheme stores static activation scales, which need calibration statistics: run lowbit calibrate and pass --calib STATS (or choose %s, whose activation scales are dynamic)",
			p.Opts.Scheme, map[bool]string{true: "nvfp4a16", false: "fp8-dynamic"}[p.Opts.Scheme.FP4()])
	}
	return p.Opts.Stats.InputAbsMax(module)
}

var attnModule = regexp.MustCompile(`^(.*\.self_attn)\.k_proj\.weight$`)

// addKVScales adds k_scale and v_scale for every attention layer.
func (b *planBuilder) addKVScales() error {
	p := b.p
	var attns []string
	for _, e := range b.inv.Tensors {
		if m := attnModule.FindStringSubmatch(e.Name); m != nil && !neverQuantized.MatchString(m[1]) {
			attns = append(attns, m[1])
		}
	}
	slices.SortFunc(attns, checkpoint.CompareNames)
	if len(attns) == 0 {
		return fmt.Errorf("quantize: --kv-cache-dtype fp8: the checkpoint has no attention layers (no self_attn.k_proj)")
	}
	for _, attn := range attns {
		k, v := float32(e4m3Max), float32(e4m3Max) // scale 1.0
		switch {
		case p.Opts.Stats != nil:
			var err error
			if k, v, err = p.Opts.Stats.KVAbsMax(attn); err != nil {
				return err
			}
		case !p.Opts.KVScaleOne:
			return fmt.Errorf("quantize: --kv-cache-dtype fp8 needs k/v scales from calibration statistics: run lowbit calibrate and pass --calib STATS, or pass --kv-scale-one to accept scale 1.0 (K and V values above 448 would then saturate)")
		}
		for i, o := range kvOutputs(p.Opts.Format, attn) {
			val, err := kvScaleBytes(p.Opts.Format, []float32{k, v}[i])
			if err != nil {
				return fmt.Errorf("quantize: %s: %w", o.name, err)
			}
			j := p.addOutput(checkpoint.TensorSpec{Name: o.name, DType: o.dtype, Shape: o.shape}, "", "kv-scale", 0)
			p.units = append(p.units, unit{Kind: constant, Const: val, First: j, Count: 1})
		}
	}
	return nil
}

// how names a quantized output's action in the printed plan: the scheme,
// with the method unless it is RTN ("nvfp4+gptq").
func (p *Plan) how() string {
	if p.Opts.Method == RTN {
		return p.Opts.Scheme.String()
	}
	return p.Opts.Scheme.String() + "+" + p.Opts.Method.String()
}

// checkHessian reports whether GPTQ has a Hessian for module, whose input
// has cols channels.
func (p *Plan) checkHessian(module string, cols int) error {
	s := p.Opts.Stats
	if s == nil {
		return fmt.Errorf("quantize: --method gptq needs input Hessians: run lowbit calibrate --hessian and pass --calib STATS")
	}
	if !s.HasHessian(module) {
		return fmt.Errorf("quantize: --method gptq: %s has no Hessian for %s: rerun lowbit calibrate with --hessian", s.Path(), module)
	}
	ch, err := s.ChannelAbsMax(module)
	if err != nil {
		return err
	}
	if len(ch) != cols {
		return fmt.Errorf("quantize: %s: the statistics in %s describe %d input channels, but the weight has %d: they are for another model; rerun lowbit calibrate on this one",
			module, s.Path(), len(ch), cols)
	}
	return nil
}
