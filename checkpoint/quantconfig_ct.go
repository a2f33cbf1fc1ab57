package checkpoint

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// parseCompressedTensors reads a compressed-tensors quantization_config:
// {"config_groups": {"group_0": {"targets", "weights", "input_activations",
// "format"}}, "format", "ignore", "kv_cache_scheme", ...}. Each group's scheme
// is derived from its arguments (formats.md §1.0 presets); a combination that
// matches no preset lowbit handles is an error, never a guess.
func parseCompressedTensors(obj cfgObject) (*Quantization, error) {
	q := &Quantization{KVCacheDType: KVCacheAuto}
	var err error
	if q.Format, err = obj.string("format", ""); err != nil {
		return nil, err
	}
	if q.Ignore, _, err = obj.strings("ignore"); err != nil {
		return nil, err
	}
	if v, ok := obj.raw("kv_cache_scheme"); ok {
		if q.KVCacheDType, err = kvCacheFromScheme(obj.key("kv_cache_scheme"), v); err != nil {
			return nil, err
		}
	}
	if err := noTransforms(obj); err != nil {
		return nil, err
	}
	groups, ok, err := obj.object("config_groups")
	if err != nil {
		return nil, err
	}
	if !ok || len(groups.m) == 0 {
		return nil, cfgErrorf("%s: compressed-tensors config without config_groups", cfgOr(obj.path, "quantization_config"))
	}
	err = groups.objects(func(name string, g cfgObject) error {
		group, err := parseCTGroup(name, g, q.Format)
		if err != nil {
			return err
		}
		q.Groups = append(q.Groups, group)
		return nil
	})
	if err != nil {
		return nil, err
	}
	summarizeGroups(q)
	return q, nil
}

// noTransforms rejects a transform_config with transforms (rotations such as
// QuIP or SpinQuant), which change what the stored weights mean.
func noTransforms(obj cfgObject) error {
	tc, ok, err := obj.object("transform_config")
	if err != nil || !ok {
		return err
	}
	groups, ok, err := tc.object("config_groups")
	if err != nil {
		return err
	}
	if ok && len(groups.m) > 0 {
		return unsupportedQuantf("%s: transforms (rotations) are not supported", groups.path)
	}
	return nil
}

// summarizeGroups sets the overall Scheme, block and group size from Groups.
func summarizeGroups(q *Quantization) {
	q.Scheme = q.Groups[0].Scheme
	for _, g := range q.Groups {
		if g.Scheme != q.Scheme {
			q.Scheme = SchemeMixed
		}
		if w := g.Weights; w != nil {
			if w.Strategy == "block" && q.WeightBlockSize == nil {
				q.WeightBlockSize = w.BlockStructure
			}
			if w.Strategy == "tensor_group" && q.GroupSize == 0 {
				q.GroupSize = w.GroupSize
			}
		}
	}
}

func parseCTGroup(name string, g cfgObject, topFormat string) (QuantGroup, error) {
	group := QuantGroup{Name: name}
	var err error
	if group.Targets, _, err = g.strings("targets"); err != nil {
		return group, err
	}
	if group.Format, err = g.string("format", topFormat); err != nil {
		return group, err
	}
	if g.has("output_activations") {
		return group, unsupportedQuantf("%s: output activation quantization", g.key("output_activations"))
	}
	if group.Weights, err = parseQuantArgs(g, "weights"); err != nil {
		return group, err
	}
	if group.Inputs, err = parseQuantArgs(g, "input_activations"); err != nil {
		return group, err
	}
	if group.Scheme, err = ctScheme(group.Weights, group.Inputs); err != nil {
		return group, fmt.Errorf("%s: %w", g.path, err)
	}
	return group, nil
}

// parseQuantArgs reads the QuantizationArgs object at key; nil when absent
// or null. Defaults are those of compressed-tensors' QuantizationArgs: type
// "int", symmetric true, dynamic false, and a missing strategy is "group"
// when group_size is set, else "tensor".
func parseQuantArgs(g cfgObject, key string) (*QuantArgs, error) {
	o, ok, err := g.object(key)
	if err != nil || !ok {
		return nil, err
	}
	a := &QuantArgs{}
	if !o.has("num_bits") {
		return nil, cfgErrorf("%s: num_bits is missing", o.path)
	}
	if a.NumBits, err = o.int("num_bits", 0); err != nil {
		return nil, err
	}
	if a.Type, err = o.string("type", "int"); err != nil {
		return nil, err
	}
	if a.GroupSize, err = o.int("group_size", 0); err != nil {
		return nil, err
	}
	def := "tensor"
	if a.GroupSize > 0 {
		def = "group"
	}
	if a.Strategy, err = o.string("strategy", def); err != nil {
		return nil, err
	}
	if a.Symmetric, err = o.bool("symmetric", true); err != nil {
		return nil, err
	}
	a.Dynamic = "false"
	if v, ok := o.raw("dynamic"); ok {
		switch string(v) {
		case "true", "false":
			a.Dynamic = string(v)
		case `"local"`:
			a.Dynamic = "local"
		default:
			return nil, cfgErrorf("%s: want true, false or \"local\", got %s", o.key("dynamic"), v)
		}
	}
	if a.BlockStructure, err = blockStructure(o); err != nil {
		return nil, err
	}
	return a, nil
}

// blockStructure reads block_structure, written as [rows, cols] or, by older
// compressed-tensors, as the string "rowsxcols".
func blockStructure(o cfgObject) ([]int, error) {
	v, ok := o.raw("block_structure")
	if !ok {
		return nil, nil
	}
	var bs []int
	if v[0] == '"' {
		s, err := o.string("block_structure", "")
		if err != nil {
			return nil, err
		}
		for _, part := range strings.Split(s, "x") {
			n, err := strconv.Atoi(part)
			if err != nil {
				return nil, cfgErrorf("%s: %q is not ROWSxCOLS", o.key("block_structure"), s)
			}
			bs = append(bs, n)
		}
	} else {
		var err error
		if bs, _, err = o.ints("block_structure"); err != nil {
			return nil, err
		}
	}
	if len(bs) != 2 || bs[0] <= 0 || bs[1] <= 0 {
		return nil, cfgErrorf("%s = %v, want two positive sizes", o.key("block_structure"), bs)
	}
	return bs, nil
}

func (a *QuantArgs) String() string {
	if a == nil {
		return "none"
	}
	s := fmt.Sprintf("%s%d %s", a.Type, a.NumBits, a.Strategy)
	if a.GroupSize > 0 {
		s += fmt.Sprintf(" group_size=%d", a.GroupSize)
	}
	if a.BlockStructure != nil {
		s += fmt.Sprintf(" block=%v", a.BlockStructure)
	}
	return s + fmt.Sprintf(" symmetric=%v dynamic=%s", a.Symmetric, a.Dynamic)
}

// ctScheme names the preset that weights w and input activations in match.
func ctScheme(w, in *QuantArgs) (string, error) {
	fp8 := func(a *QuantArgs) bool { return a != nil && a.Type == "float" && a.NumBits == 8 && a.Symmetric }
	fp4 := func(a *QuantArgs) bool {
		return a != nil && a.Type == "float" && a.NumBits == 4 && a.Symmetric && a.Strategy == "tensor_group" && a.GroupSize == 16
	}
	switch {
	case fp4(w) && w.Dynamic == "false":
		if in == nil {
			return SchemeNVFP4A16, nil
		}
		if fp4(in) {
			return SchemeNVFP4, nil
		}
	case fp8(w) && w.Dynamic == "false":
		switch w.Strategy {
		case "channel":
			if fp8(in) && in.Dynamic == "true" && in.Strategy == "token" {
				return SchemeFP8Dynamic, nil
			}
		case "tensor":
			if fp8(in) && in.Dynamic == "false" && in.Strategy == "tensor" {
				return SchemeFP8, nil
			}
		case "block":
			if w.BlockStructure != nil && fp8(in) && in.Dynamic == "true" && in.Strategy == "group" {
				return SchemeFP8Block, nil
			}
		}
	}
	return "", unsupportedQuantf("no supported scheme has weights %s and input_activations %s", w, in)
}

// kvCacheFromScheme reads a compressed-tensors kv_cache_scheme (or the
// ModelOpt config.json equivalent): 8-bit float means an FP8 KV cache, which
// vLLM then uses whatever --kv-cache-dtype says (formats.md §3).
func kvCacheFromScheme(path string, v json.RawMessage) (string, error) {
	o, err := parseCfgObject(path, v)
	if err != nil {
		return "", err
	}
	bits, err := o.int("num_bits", 0)
	if err != nil {
		return "", err
	}
	typ, err := o.string("type", "int")
	if err != nil {
		return "", err
	}
	strategy, err := o.string("strategy", "tensor")
	if err != nil {
		return "", err
	}
	sym, err := o.bool("symmetric", true)
	if err != nil {
		return "", err
	}
	if bits != 8 || typ != "float" || !sym || (strategy != "tensor" && strategy != "attn_head") {
		return "", unsupportedQuantf("%s: KV cache %s%d %s symmetric=%v (only symmetric float8 per-tensor or per-head)", path, typ, bits, strategy, sym)
	}
	return KVCacheFP8, nil
}
