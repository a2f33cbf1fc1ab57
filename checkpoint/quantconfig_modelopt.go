package checkpoint

import (
	"slices"
	"strings"
)

// modelOptAlgos maps the ModelOpt quant_algo values lowbit reads to schemes.
// FP8_PER_CHANNEL_PER_TOKEN is the compressed-tensors FP8_DYNAMIC recipe
// (per-channel weight scales, dynamic per-token activations; formats.md §2).
var modelOptAlgos = map[string]string{
	"FP8":                       SchemeFP8,
	"NVFP4":                     SchemeNVFP4,
	"FP8_PER_CHANNEL_PER_TOKEN": SchemeFP8Dynamic,
	"MIXED_PRECISION":           SchemeMixed,
}

func modelOptScheme(path, algo string) (string, error) {
	s, ok := modelOptAlgos[algo]
	if !ok {
		known := make([]string, 0, len(modelOptAlgos))
		for k := range modelOptAlgos {
			known = append(known, k)
		}
		slices.Sort(known)
		return "", unsupportedQuantf("%s: ModelOpt quant_algo %q (supported: %s)", path, algo, strings.Join(known, ", "))
	}
	return s, nil
}

// modelOptKV maps kv_cache_quant_algo (null or absent: no KV quantization).
func modelOptKV(o cfgObject) (string, error) {
	algo, err := o.string("kv_cache_quant_algo", "")
	if err != nil {
		return "", err
	}
	switch algo {
	case "":
		return KVCacheAuto, nil
	case "FP8":
		return KVCacheFP8, nil
	}
	return "", unsupportedQuantf("%s %q (supported: FP8 or null)", o.key("kv_cache_quant_algo"), algo)
}

// parseModelOptHFQuantConfig reads hf_quant_config.json:
// {"producer": {"name", "version"}, "quantization": {"quant_algo",
// "kv_cache_quant_algo", "group_size", "exclude_modules", "quantized_layers"}}.
// Like vLLM's ModelOptNvFp4Config, an NVFP4 file must carry group_size,
// kv_cache_quant_algo (null allowed) and exclude_modules.
func parseModelOptHFQuantConfig(data []byte) (*Quantization, error) {
	top, err := parseCfgObject("", data)
	if err != nil {
		return nil, err
	}
	quant, ok, err := top.object("quantization")
	if err != nil {
		return nil, err
	}
	if !ok {
		quant = top // the flat form vLLM also accepts
	}
	q := &Quantization{Method: QuantModelOpt, Raw: slices.Clone(data)}
	algo, err := quant.string("quant_algo", "")
	if err != nil {
		return nil, err
	}
	if q.Scheme, err = modelOptScheme(quant.key("quant_algo"), algo); err != nil {
		return nil, err
	}
	if q.KVCacheDType, err = modelOptKV(quant); err != nil {
		return nil, err
	}
	if q.Ignore, _, err = quant.strings("exclude_modules"); err != nil {
		return nil, err
	}
	if q.GroupSize, err = quant.int("group_size", 0); err != nil {
		return nil, err
	}
	if algo == "NVFP4" {
		for _, key := range []string{"group_size", "kv_cache_quant_algo", "exclude_modules"} {
			if _, present := quant.m[key]; !present {
				return nil, cfgErrorf("%s: NVFP4 needs %s", cfgOr(quant.path, "hf_quant_config"), key)
			}
		}
	}
	if err := checkFP4GroupSize(quant, q); err != nil {
		return nil, err
	}
	if q.Producer, err = modelOptProducer(top); err != nil {
		return nil, err
	}
	if q.QuantizedLayers, err = modelOptLayers(quant, q.Scheme); err != nil {
		return nil, err
	}
	return q, nil
}

// parseModelOptConfigJSON reads the quantization_config ModelOpt writes into
// config.json: {"quant_method": "modelopt", "quant_algo", "config_groups",
// "ignore", "kv_cache_scheme", "producer", "quantized_layers"}.
func parseModelOptConfigJSON(obj cfgObject) (*Quantization, error) {
	q := &Quantization{}
	algo, err := obj.string("quant_algo", "")
	if err != nil {
		return nil, err
	}
	if q.Scheme, err = modelOptScheme(obj.key("quant_algo"), algo); err != nil {
		return nil, err
	}
	q.KVCacheDType = KVCacheAuto
	if v, ok := obj.raw("kv_cache_scheme"); ok {
		if q.KVCacheDType, err = kvCacheFromScheme(obj.key("kv_cache_scheme"), v); err != nil {
			return nil, err
		}
	} else if q.KVCacheDType, err = modelOptKV(obj); err != nil {
		return nil, err
	}
	for _, key := range []string{"ignore", "exclude_modules"} {
		names, _, err := obj.strings(key)
		if err != nil {
			return nil, err
		}
		q.Ignore = append(q.Ignore, names...)
	}
	if q.GroupSize, err = obj.int("group_size", 0); err != nil {
		return nil, err
	}
	if groups, ok, err := obj.object("config_groups"); err != nil {
		return nil, err
	} else if ok {
		err := groups.objects(func(name string, g cfgObject) error {
			group, err := parseModelOptGroup(name, g)
			if err != nil {
				return err
			}
			if q.Scheme != SchemeMixed && group.Scheme != q.Scheme {
				return cfgErrorf("%s is %s but quant_algo is %s", g.path, group.Scheme, algo)
			}
			if group.Scheme == SchemeNVFP4 && q.GroupSize == 0 {
				q.GroupSize = group.Weights.GroupSize
			}
			q.Groups = append(q.Groups, group)
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	if err := checkFP4GroupSize(obj, q); err != nil {
		return nil, err
	}
	if q.Producer, err = modelOptProducer(obj); err != nil {
		return nil, err
	}
	if q.QuantizedLayers, err = modelOptLayers(obj, q.Scheme); err != nil {
		return nil, err
	}
	return q, nil
}

// parseModelOptGroup reads a ModelOpt config_groups entry. Its arguments
// carry no strategy ({"num_bits": 4, "type": "float", "group_size": 16}), so
// the scheme follows from the weight format alone.
func parseModelOptGroup(name string, g cfgObject) (QuantGroup, error) {
	group := QuantGroup{Name: name}
	var err error
	if group.Targets, _, err = g.strings("targets"); err != nil {
		return group, err
	}
	if group.Weights, err = parseQuantArgs(g, "weights"); err != nil {
		return group, err
	}
	if group.Inputs, err = parseQuantArgs(g, "input_activations"); err != nil {
		return group, err
	}
	w := group.Weights
	switch {
	case w != nil && w.Type == "float" && w.NumBits == 8:
		group.Scheme = SchemeFP8
	case w != nil && w.Type == "float" && w.NumBits == 4 && w.GroupSize == 16:
		group.Scheme = SchemeNVFP4
	default:
		return group, unsupportedQuantf("%s: ModelOpt weights %s", g.path, w)
	}
	return group, nil
}

// checkFP4GroupSize requires the NVFP4 group size to be 16 when given.
func checkFP4GroupSize(o cfgObject, q *Quantization) error {
	if q.GroupSize != 0 && q.GroupSize != 16 && (q.Scheme == SchemeNVFP4 || q.Scheme == SchemeMixed) {
		return unsupportedQuantf("%s = %d (NVFP4 uses groups of 16)", o.key("group_size"), q.GroupSize)
	}
	if q.Scheme == SchemeNVFP4 && q.GroupSize == 0 {
		q.GroupSize = 16
	}
	return nil
}

func modelOptProducer(o cfgObject) (string, error) {
	p, ok, err := o.object("producer")
	if err != nil || !ok {
		return "", err
	}
	name, err := p.string("name", "")
	if err != nil {
		return "", err
	}
	version, err := p.string("version", "")
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(name + " " + version), nil
}

// modelOptLayers reads quantized_layers {"module": {"quant_algo": ...}} of a
// MIXED_PRECISION checkpoint into module -> scheme.
func modelOptLayers(o cfgObject, scheme string) (map[string]string, error) {
	layers, ok, err := o.object("quantized_layers")
	if err != nil || !ok {
		if err == nil && scheme == SchemeMixed {
			return nil, cfgErrorf("%s: MIXED_PRECISION without quantized_layers", cfgOr(o.path, "hf_quant_config"))
		}
		return nil, err
	}
	out := make(map[string]string, len(layers.m))
	for name := range layers.m {
		l, ok, err := layers.object(name)
		if err != nil {
			return nil, err
		}
		if !ok {
			return nil, cfgErrorf("%s is null", layers.key(name))
		}
		algo, err := l.string("quant_algo", "")
		if err != nil {
			return nil, err
		}
		s, err := modelOptScheme(l.key("quant_algo"), algo)
		if err != nil {
			return nil, err
		}
		if s == SchemeMixed {
			return nil, cfgErrorf("%s: a module cannot be MIXED_PRECISION", l.key("quant_algo"))
		}
		if gs, err := l.int("group_size", 0); err != nil {
			return nil, err
		} else if s == SchemeNVFP4 && gs != 0 && gs != 16 {
			return nil, unsupportedQuantf("%s = %d (NVFP4 uses groups of 16)", l.key("group_size"), gs)
		}
		out[name] = s
	}
	return out, nil
}
