package checkpoint

import (
	"encoding/json"
	"slices"
)

// RoPE is the rotary position embedding of the full-attention layers.
//
// transformers 4.x configs write rope_theta (and partial_rotary_factor) at the
// top of the text settings and an optional rope_scaling object; transformers
// 5.x moves everything into rope_parameters {"rope_type", "rope_theta", ...}.
// Both forms are accepted and may be mixed; a value given in two places must
// agree, else the config is rejected (transformers would silently prefer one).
type RoPE struct {
	// Type is the rope_type (rope_scaling's legacy "type"): "default",
	// "linear", "dynamic", "yarn", "longrope" or "llama3". The Qwen2-VL
	// legacy type "mrope" reads as "default".
	Type string
	// Theta is the base; absent, it is RotaryEmbeddingConfigMixin.default_theta,
	// 10000.
	Theta float64
	// PartialRotaryFactor is the fraction of each head that is rotated: 0.25
	// for Qwen3.5 (its config classes setdefault it), 1 for the others.
	PartialRotaryFactor float64

	// Scaling parameters; zero when absent.
	Factor                        float64
	OriginalMaxPositionEmbeddings int
	AttentionFactor               float64
	BetaFast, BetaSlow            float64 // yarn
	MScale, MScaleAllDim          float64 // yarn (DeepSeek style)
	LowFreqFactor, HighFreqFactor float64 // llama3
	LongFactor, ShortFactor       []float64

	// MRoPESection splits the rotary half-dimensions among the temporal,
	// height and width position streams (Qwen3.5: [11, 11, 10]); for text-only
	// input the three streams are equal and MRoPE is plain RoPE.
	MRoPESection     []int
	MRoPEInterleaved bool

	// Raw is rope_parameters as written, or rope_scaling when there is no
	// rope_parameters; nil when neither is present.
	Raw json.RawMessage
}

// ropeTypes lists the accepted rope types and the parameters each requires.
var ropeTypes = map[string][]string{
	"default":  nil,
	"linear":   {"factor"},
	"dynamic":  {"factor"},
	"yarn":     {"factor"},
	"longrope": {"long_factor", "short_factor"},
	"llama3":   {"factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"},
}

// ropeSource is one place a RoPE value may be written.
type ropeSource struct {
	o   cfgObject
	key string
}

// ropeLookup finds key in the sources, checking that every place that gives
// it gives the same value. get decodes one value; eq compares two.
func ropeLookup[T any](srcs []ropeSource, get func(cfgObject, string) (T, error), eq func(a, b T) bool) (val T, found bool, err error) {
	var at string
	for _, s := range srcs {
		if !s.o.has(s.key) {
			continue
		}
		v, err := get(s.o, s.key)
		if err != nil {
			return val, false, err
		}
		if found && !eq(v, val) {
			return val, false, cfgErrorf("%s and %s disagree", at, s.o.key(s.key))
		}
		val, found, at = v, true, s.o.key(s.key)
	}
	return val, found, nil
}

func eqComparable[T comparable](a, b T) bool { return a == b }

// parseRoPE reads the RoPE settings of the text object obj.
func parseRoPE(obj cfgObject, defPartial float64) (RoPE, error) {
	var r RoPE
	params, hasParams, err := obj.object("rope_parameters")
	if err != nil {
		return r, err
	}
	scaling, hasScaling, err := obj.object("rope_scaling")
	if err != nil {
		return r, err
	}
	var objs []cfgObject
	if hasParams {
		for _, lt := range layerTypeNames {
			if params.has(lt) {
				return r, cfgErrorf("%s: per-layer-type RoPE parameters (%q) are not supported", params.path, lt)
			}
		}
		objs = append(objs, params)
		r.Raw, _ = obj.raw("rope_parameters")
	}
	if hasScaling {
		objs = append(objs, scaling)
		if r.Raw == nil {
			r.Raw, _ = obj.raw("rope_scaling")
		}
	}
	r.Raw = slices.Clone(r.Raw)
	in := func(keys ...string) []ropeSource {
		var srcs []ropeSource
		for _, o := range objs {
			for _, k := range keys {
				srcs = append(srcs, ropeSource{o, k})
			}
		}
		return srcs
	}
	str := func(o cfgObject, k string) (string, error) { return o.string(k, "") }
	flt := func(o cfgObject, k string) (float64, error) { return o.float(k, 0) }
	integer := func(o cfgObject, k string) (int, error) { return o.int(k, 0) }

	typ, found, err := ropeLookup(in("rope_type", "type"), str, eqComparable[string])
	if err != nil {
		return r, err
	}
	r.Type = "default"
	if found && typ != "mrope" {
		r.Type = typ
	}
	// rope_theta and partial_rotary_factor may also sit beside the RoPE
	// object, in the text settings themselves.
	theta, found, err := ropeLookup(append(in("rope_theta"), ropeSource{obj, "rope_theta"}), flt, eqComparable[float64])
	if err != nil {
		return r, err
	}
	r.Theta = 10000
	if found {
		r.Theta = theta
	}
	prf, found, err := ropeLookup(append(in("partial_rotary_factor"), ropeSource{obj, "partial_rotary_factor"}), flt, eqComparable[float64])
	if err != nil {
		return r, err
	}
	r.PartialRotaryFactor = defPartial
	if found {
		r.PartialRotaryFactor = prf
	}
	floats := []struct {
		dst *float64
		key string
	}{
		{&r.Factor, "factor"},
		{&r.AttentionFactor, "attention_factor"},
		{&r.BetaFast, "beta_fast"},
		{&r.BetaSlow, "beta_slow"},
		{&r.MScale, "mscale"},
		{&r.MScaleAllDim, "mscale_all_dim"},
		{&r.LowFreqFactor, "low_freq_factor"},
		{&r.HighFreqFactor, "high_freq_factor"},
	}
	for _, f := range floats {
		if *f.dst, _, err = ropeLookup(in(f.key), flt, eqComparable[float64]); err != nil {
			return r, err
		}
	}
	if r.OriginalMaxPositionEmbeddings, _, err = ropeLookup(in("original_max_position_embeddings"), integer, eqComparable[int]); err != nil {
		return r, err
	}
	floatList := func(o cfgObject, k string) ([]float64, error) { v, _, err := o.floats(k); return v, err }
	if r.LongFactor, _, err = ropeLookup(in("long_factor"), floatList, slices.Equal[[]float64]); err != nil {
		return r, err
	}
	if r.ShortFactor, _, err = ropeLookup(in("short_factor"), floatList, slices.Equal[[]float64]); err != nil {
		return r, err
	}
	intList := func(o cfgObject, k string) ([]int, error) { v, _, err := o.ints(k); return v, err }
	if r.MRoPESection, _, err = ropeLookup(in("mrope_section"), intList, slices.Equal[[]int]); err != nil {
		return r, err
	}
	boolean := func(o cfgObject, k string) (bool, error) { return o.bool(k, false) }
	if r.MRoPEInterleaved, _, err = ropeLookup(in("mrope_interleaved"), boolean, eqComparable[bool]); err != nil {
		return r, err
	}
	// Required parameters of the rope type: present in one of the objects.
	required, known := ropeTypes[r.Type]
	if !known {
		return r, cfgErrorf("%s: unknown rope_type %q", cfgOr(obj.path, "config"), r.Type)
	}
	for _, k := range required {
		has := false
		for _, o := range objs {
			has = has || o.has(k)
		}
		if !has {
			return r, cfgErrorf("%s: rope_type %q needs %s", cfgOr(obj.path, "config"), r.Type, k)
		}
	}
	return r, nil
}
