package checkpoint

import "fmt"

// maxLayers bounds num_hidden_layers before anything is sized by it.
const maxLayers = 1 << 16

// parseText fills t from obj (the text settings) and top (the whole file,
// consulted for the fields a multimodal config keeps at its top level).
func parseText(t *Text, a Arch, obj, top cfgObject, nested bool) error {
	d := defaultsFor(a)
	var err error
	ints := []struct {
		dst *int
		key string
		def int
	}{
		{&t.VocabSize, "vocab_size", d.vocab},
		{&t.HiddenSize, "hidden_size", d.hidden},
		{&t.IntermediateSize, "intermediate_size", d.intermediate},
		{&t.NumHiddenLayers, "num_hidden_layers", d.layers},
		{&t.NumAttentionHeads, "num_attention_heads", d.heads},
		{&t.MaxPositionEmbeddings, "max_position_embeddings", d.maxPos},
	}
	for _, f := range ints {
		if *f.dst, err = obj.int(f.key, f.def); err != nil {
			return err
		}
	}
	if t.NumHiddenLayers < 1 || t.NumHiddenLayers > maxLayers {
		return cfgErrorf("%s: %d is not in [1, %d]", obj.key("num_hidden_layers"), t.NumHiddenLayers, maxLayers)
	}
	defType := a.String()
	if spec, _ := a.spec(); spec.textModelType != "" {
		defType = spec.textModelType
	}
	if t.ModelType, err = obj.string("model_type", defType); err != nil {
		return err
	}
	// num_key_value_heads: an explicit null means "as many as the query heads"
	// in Qwen3Config and LlamaConfig; absent takes the class default.
	kvDef := d.kvHeads
	if _, present := obj.m["num_key_value_heads"]; (present && !obj.has("num_key_value_heads")) || kvDef == 0 {
		kvDef = t.NumAttentionHeads
	}
	if t.NumKeyValueHeads, err = obj.int("num_key_value_heads", kvDef); err != nil {
		return err
	}
	hdDef := d.headDim
	if hdDef == 0 && t.NumAttentionHeads > 0 {
		hdDef = t.HiddenSize / t.NumAttentionHeads // LlamaConfig.__post_init__
	}
	if t.HeadDim, err = obj.int("head_dim", hdDef); err != nil {
		return err
	}
	if t.RMSNormEps, err = obj.float("rms_norm_eps", 1e-6); err != nil {
		return err
	}
	if t.HiddenAct, err = obj.string("hidden_act", "silu"); err != nil {
		return err
	}
	if t.AttentionBias, err = obj.bool("attention_bias", false); err != nil {
		return err
	}
	if t.TieWordEmbeddings, err = tieWordEmbeddings(obj, top, nested); err != nil {
		return err
	}
	if t.RoPE, err = parseRoPE(obj, d.partialRotary); err != nil {
		return err
	}
	if err := parseTokenIDs(t, obj, top, nested, d); err != nil {
		return err
	}
	if err := parseMoE(t, a, obj); err != nil {
		return err
	}
	return parseLayers(t, a, obj)
}

// tieWordEmbeddings reads tie_word_embeddings (class default false). A
// multimodal Qwen3.5 config may carry it in text_config, at the top level,
// or both; both must then agree.
func tieWordEmbeddings(obj, top cfgObject, nested bool) (bool, error) {
	tie, err := obj.bool("tie_word_embeddings", false)
	if err != nil || !nested || !top.has("tie_word_embeddings") {
		return tie, err
	}
	topTie, err := top.bool("tie_word_embeddings", false)
	if err != nil {
		return false, err
	}
	if obj.has("tie_word_embeddings") && topTie != tie {
		return false, cfgErrorf("tie_word_embeddings is %v but text_config.tie_word_embeddings is %v", topTie, tie)
	}
	return topTie, nil
}

// parseTokenIDs reads bos/eos/pad ids and the dtype, from the text object
// and, for a nested config, falling back to the top level.
func parseTokenIDs(t *Text, obj, top cfgObject, nested bool, d textDefaults) error {
	lookup := []cfgObject{obj}
	if nested {
		lookup = append(lookup, top)
	}
	var err error
	first := func(key string, def []int) ([]int, error) {
		for _, o := range lookup {
			if o.has(key) {
				return o.intOrInts(key)
			}
		}
		return def, nil
	}
	if t.BOSTokenIDs, err = first("bos_token_id", d.bos); err != nil {
		return err
	}
	if t.EOSTokenIDs, err = first("eos_token_id", d.eos); err != nil {
		return err
	}
	for _, o := range lookup {
		if o.has("pad_token_id") {
			id, err := o.int("pad_token_id", 0)
			if err != nil {
				return err
			}
			t.PadTokenID = &id
			break
		}
	}
	for _, o := range lookup {
		dt, err := o.string("dtype", "")
		if err != nil {
			return err
		}
		tdt, err := o.string("torch_dtype", "")
		if err != nil {
			return err
		}
		if dt != "" && tdt != "" && dt != tdt {
			return cfgErrorf("%s is %q but %s is %q", o.key("dtype"), dt, o.key("torch_dtype"), tdt)
		}
		if t.DType = cmpOr(dt, tdt); t.DType != "" {
			break
		}
	}
	return nil
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// parseMoE reads the expert settings of the MoE architectures.
func parseMoE(t *Text, a Arch, obj cfgObject) error {
	var err error
	switch a {
	case Qwen3MoE: // Qwen3MoeConfig defaults
		if t.NormTopKProb, err = obj.bool("norm_topk_prob", false); err != nil {
			return err
		}
		if t.DecoderSparseStep, err = obj.int("decoder_sparse_step", 1); err != nil {
			return err
		}
		if t.MLPOnlyLayers, _, err = obj.ints("mlp_only_layers"); err != nil {
			return err
		}
		return moeSizes(t, obj, 128, 8, 768, -1)
	case Qwen35MoE: // Qwen3_5MoeTextConfig defaults
		// The config class has no norm_topk_prob, decoder_sparse_step or
		// mlp_only_layers: Qwen3_5MoeTopKRouter always renormalizes the top-k
		// weights and every layer is sparse. A config asking otherwise would
		// be silently ignored by transformers, so it is an error here.
		norm, err := obj.bool("norm_topk_prob", true)
		if err != nil {
			return err
		}
		step, err := obj.int("decoder_sparse_step", 1)
		if err != nil {
			return err
		}
		only, _, err := obj.ints("mlp_only_layers")
		if err != nil {
			return err
		}
		if !norm || step != 1 || len(only) > 0 {
			return cfgErrorf("%s: norm_topk_prob false, decoder_sparse_step != 1 and mlp_only_layers are not supported by qwen3_5_moe (every layer is sparse, top-k weights are always renormalized)", cfgOr(obj.path, "config"))
		}
		t.NormTopKProb, t.DecoderSparseStep = true, 1
		return moeSizes(t, obj, 256, 8, 512, 512)
	}
	return nil
}

// moeSizes reads the expert counts and widths; shared < 0 means the
// architecture has no shared expert.
func moeSizes(t *Text, obj cfgObject, experts, perTok, inter, shared int) error {
	var err error
	if t.NumExperts, err = obj.int("num_experts", experts); err != nil {
		return err
	}
	if t.NumExpertsPerTok, err = obj.int("num_experts_per_tok", perTok); err != nil {
		return err
	}
	if t.MoEIntermediateSize, err = obj.int("moe_intermediate_size", inter); err != nil {
		return err
	}
	if shared >= 0 {
		if t.SharedExpertIntermediateSize, err = obj.int("shared_expert_intermediate_size", shared); err != nil {
			return err
		}
	}
	return nil
}

// parseLayers fills LayerTypes and the hybrid (Gated DeltaNet) settings.
func parseLayers(t *Text, a Arch, obj cfgObject) error {
	names, hasTypes, err := obj.strings("layer_types")
	if err != nil {
		return err
	}
	if hasTypes {
		if len(names) != t.NumHiddenLayers {
			return cfgErrorf("%s has %d entries, want num_hidden_layers = %d", obj.key("layer_types"), len(names), t.NumHiddenLayers)
		}
		t.LayerTypes = make([]LayerType, len(names))
		for i, n := range names {
			if t.LayerTypes[i], err = ParseLayerType(n); err != nil {
				return fmt.Errorf("%s[%d]: %w", obj.key("layer_types"), i, err)
			}
		}
	}
	if !a.Hybrid() {
		return parseWindow(t, a, obj, hasTypes)
	}
	// Qwen3_5TextConfig / Qwen3_5MoeTextConfig defaults.
	hybrid := []struct {
		dst *int
		key string
		def int
	}{
		{&t.FullAttentionInterval, "full_attention_interval", 4},
		{&t.LinearConvKernelDim, "linear_conv_kernel_dim", 4},
		{&t.LinearKeyHeadDim, "linear_key_head_dim", 128},
		{&t.LinearValueHeadDim, "linear_value_head_dim", 128},
		{&t.LinearNumKeyHeads, "linear_num_key_heads", 16},
		{&t.LinearNumValueHeads, "linear_num_value_heads", 32},
		{&t.MTPNumHiddenLayers, "mtp_num_hidden_layers", 0},
	}
	for _, f := range hybrid {
		if *f.dst, err = obj.int(f.key, f.def); err != nil {
			return err
		}
	}
	// The Qwen3.5 attention always has the output gate (q_proj emits query
	// and gate); attn_output_gate is not a field of the config class.
	if t.AttnOutputGate, err = obj.bool("attn_output_gate", true); err != nil {
		return err
	}
	if !hasTypes {
		// Qwen3_5TextConfig.__post_init__: layer i is linear_attention iff
		// (i+1) % full_attention_interval != 0.
		if t.FullAttentionInterval < 1 {
			return cfgErrorf("%s: %d, want >= 1", obj.key("full_attention_interval"), t.FullAttentionInterval)
		}
		t.LayerTypes = make([]LayerType, t.NumHiddenLayers)
		for i := range t.LayerTypes {
			t.LayerTypes[i] = LinearAttention
			if (i+1)%t.FullAttentionInterval == 0 {
				t.LayerTypes[i] = FullAttention
			}
		}
	}
	return nil
}

// parseWindow handles the non-hybrid architectures: every layer is full
// attention, except that Qwen3Config makes layer i sliding-window when
// use_sliding_window is set and i >= max_window_layers.
func parseWindow(t *Text, a Arch, obj cfgObject, hasTypes bool) error {
	var err error
	if a == Qwen3 || a == Qwen3MoE {
		if t.UseSlidingWindow, err = obj.bool("use_sliding_window", false); err != nil {
			return err
		}
		if t.SlidingWindow, err = obj.int("sliding_window", 4096); err != nil {
			return err
		}
		if _, present := obj.m["sliding_window"]; present && !obj.has("sliding_window") {
			t.SlidingWindow = 0 // an explicit null: no window
		}
		if t.MaxWindowLayers, err = obj.int("max_window_layers", 28); err != nil {
			return err
		}
		if !t.UseSlidingWindow {
			t.SlidingWindow = 0 // __post_init__: sliding_window = None unless use_sliding_window
		} else if a == Qwen3MoE {
			return cfgErrorf("use_sliding_window is not supported for qwen3_moe")
		}
	}
	if hasTypes {
		return nil
	}
	t.LayerTypes = make([]LayerType, t.NumHiddenLayers)
	for i := range t.LayerTypes {
		t.LayerTypes[i] = FullAttention
		if t.UseSlidingWindow && t.SlidingWindow > 0 && i >= t.MaxWindowLayers {
			t.LayerTypes[i] = SlidingAttention
		}
	}
	return nil
}
