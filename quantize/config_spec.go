package quantize

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// QuantConfigSpec is what a quantized checkpoint's config files say: the
// input of CompressedTensorsConfig and ModelOptConfig.
type QuantConfigSpec struct {
	// Scheme is the scheme of every quantized module, one of
	// checkpoint.SchemeFP8Dynamic, SchemeFP8, SchemeFP8Block, SchemeNVFP4
	// and SchemeNVFP4A16.
	Scheme string
	// Ignore lists the modules left unquantized: full module names
	// ("model.layers.0.mlp.gate") and "re:" patterns. A pattern matches as
	// compressed-tensors and vLLM match it, with Python's re.match: from the
	// start of the module name, not necessarily to its end ("re:.*mlp.gate$").
	// The pattern is a Go regular expression, so Python-only syntax such as
	// lookarounds is an error.
	Ignore []string
	// Modules lists every linear module of the model in model order, with
	// lm_head, MoE routers (mlp.gate) and shared-expert gates, which the
	// loaders treat as linear layers too. When set, Ignore is expanded to the
	// explicit names it matches (see ExpandIgnore) and checked against the
	// fused layers vLLM and SGLang build; ModelOpt configs need it for any
	// "re:" pattern.
	Modules []string
	// KVCacheFP8 declares an FP8 KV cache with per-tensor k/v scales. When
	// false the configs say nothing of the KV cache, because any KV scheme
	// makes vLLM use an FP8 KV cache whatever --kv-cache-dtype says
	// (formats.md §3).
	KVCacheFP8 bool
	// Producer names the tool, "lowbit dev". ModelOpt configs record it as
	// the producer's version (see ModelOptConfig); compressed-tensors
	// configs have no producer field.
	Producer string
}

// lmHead is the output head, which lowbit never quantizes. Both writers
// list it, as llm-compressor does: vLLM's ModelOpt loader quantizes the
// output head (ParallelLMHead) unless exclude_modules names it.
const lmHead = "lm_head"

// ignoreEntry is one compiled Ignore entry.
type ignoreEntry struct {
	raw   string
	exact string         // a module name, or
	re    *regexp.Regexp // a "re:" pattern, anchored at the start
}

func (e ignoreEntry) match(module string) bool {
	if e.re != nil {
		return e.re.MatchString(module)
	}
	return module == e.exact
}

// compileIgnoreEntries parses Ignore entries. An exact entry must look like
// a module name, so that no loader reads it as a wildcard or regex.
func compileIgnoreEntries(ignore []string) ([]ignoreEntry, error) {
	out := make([]ignoreEntry, 0, len(ignore))
	for _, raw := range ignore {
		if pat, ok := strings.CutPrefix(raw, "re:"); ok {
			re, err := regexp.Compile(`^(?:` + pat + `)`)
			if err != nil {
				return nil, fmt.Errorf("quantize: ignore %q: not a regular expression lowbit can check: %v", raw, err)
			}
			out = append(out, ignoreEntry{raw: raw, re: re})
			continue
		}
		if !isModuleName(raw) {
			return nil, fmt.Errorf("quantize: ignore %q is neither a module name (dot-separated letters, digits and _) nor a \"re:\" pattern", raw)
		}
		out = append(out, ignoreEntry{raw: raw, exact: raw})
	}
	return out, nil
}

// isModuleName accepts dot-separated non-empty segments of ASCII letters,
// digits and underscores.
func isModuleName(s string) bool {
	if s == "" {
		return false
	}
	for seg := range strings.SplitSeq(s, ".") {
		if seg == "" {
			return false
		}
		for i := 0; i < len(seg); i++ {
			c := seg[i]
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_') {
				return false
			}
		}
	}
	return true
}

// ExpandIgnore returns the explicit ignore list that ignore (module names
// and "re:" patterns, matched as QuantConfigSpec.Ignore says) selects among
// modules, the model's linear modules: the matched modules in the order of
// modules, then the exact names that are not in modules (lm_head of a
// model whose Modules leave it out, say), in the order given. A pattern
// that matches nothing selects nothing, as in llm-compressor recipes that
// list "re:.*visual.*" for every model.
//
// When every routed expert of a decoder layer is selected, the fused MoE
// layer the loaders build from them ("model.layers.N.mlp.experts") follows
// its last expert in the list, so that loaders matching that name see it.
//
// It returns an error when the result splits a fused layer (q/k/v_proj,
// gate/up_proj, Qwen3.5's in_proj_qkv/in_proj_z and in_proj_b/in_proj_a,
// or the routed experts of one decoder layer, which vLLM and SGLang load as
// one fused MoE layer): vLLM rejects a partly quantized fused layer ("vLLM
// requires all to use the same scheme").
func ExpandIgnore(ignore, modules []string) ([]string, error) {
	entries, err := compileIgnoreEntries(ignore)
	if err != nil {
		return nil, err
	}
	return expandIgnore(entries, modules)
}

func expandIgnore(entries []ignoreEntry, modules []string) ([]string, error) {
	known := make(map[string]bool, len(modules))
	var matched []string
	ignored := map[string]bool{}
	for _, m := range modules {
		if known[m] {
			return nil, fmt.Errorf("quantize: module %s is listed twice", m)
		}
		known[m] = true
		for _, e := range entries {
			if e.match(m) {
				matched = append(matched, m)
				ignored[m] = true
				break
			}
		}
	}
	moeLayers, err := checkIgnoreGroups(modules, ignored)
	if err != nil {
		return nil, err
	}
	// Name each unquantized MoE layer after its last expert, for loaders
	// that look its name up (vLLM's ModelOpt loader matches the fused MoE
	// layer's own name against exclude_modules).
	var out []string
	for i, m := range matched {
		out = append(out, m)
		if sub := routedExpert.FindStringSubmatch(m); sub != nil && moeLayers[sub[1]] {
			if next := i + 1; next == len(matched) || !strings.HasPrefix(matched[next], sub[1]+".") {
				if !slices.Contains(out, sub[1]) {
					out = append(out, sub[1])
				}
			}
		}
	}
	for _, e := range entries {
		if e.re == nil && !known[e.exact] && !slices.Contains(out, e.exact) {
			out = append(out, e.exact)
		}
	}
	return out, nil
}

// routedExpert matches a routed expert's projection and captures the MoE
// layer that vLLM and SGLang build from all of a layer's experts.
var routedExpert = regexp.MustCompile(`^(.*\.mlp\.experts)\.[0-9]+\.`)

// checkIgnoreGroups checks that the ignored modules leave no fused layer
// partly quantized, and returns the MoE layers whose routed experts are all
// ignored. vLLM and SGLang build one fused MoE layer from all experts of a
// decoder layer, so its experts are quantized or unquantized together.
func checkIgnoreGroups(modules []string, ignored map[string]bool) (map[string]bool, error) {
	type group struct {
		first   string
		ignored bool
	}
	groups := map[string]group{}
	check := func(fused, m string) error {
		g, seen := groups[fused]
		if !seen {
			groups[fused] = group{first: m, ignored: ignored[m]}
			return nil
		}
		if g.ignored == ignored[m] {
			return nil
		}
		kept, quant := g.first, m
		if !g.ignored {
			kept, quant = m, g.first
		}
		return fmt.Errorf("quantize: ignore: %s is left unquantized but %s is quantized: vLLM and SGLang fuse them into %s, which must be quantized or unquantized as a whole", kept, quant, fused)
	}
	moeLayers := map[string]bool{}
	for _, m := range modules {
		if fused := fusedGroup(m); fused != m {
			if err := check(fused, m); err != nil {
				return nil, err
			}
		}
		if sub := routedExpert.FindStringSubmatch(m); sub != nil {
			if err := check(sub[1], m); err != nil {
				return nil, err
			}
			moeLayers[sub[1]] = ignored[m]
		}
	}
	for layer, all := range moeLayers {
		if !all {
			delete(moeLayers, layer)
		}
	}
	return moeLayers, nil
}

// resolveIgnore returns the ignore list a config writes: ExpandIgnore's
// explicit list when spec.Modules is set, else the entries as given (which
// must then be module names unless regexOK), and lm_head in any case.
func resolveIgnore(spec QuantConfigSpec, regexOK bool, format string) ([]string, error) {
	entries, err := compileIgnoreEntries(spec.Ignore)
	if err != nil {
		return nil, err
	}
	var out []string
	if len(spec.Modules) > 0 {
		if out, err = expandIgnore(entries, spec.Modules); err != nil {
			return nil, err
		}
	} else {
		for _, e := range entries {
			if e.re != nil && !regexOK {
				return nil, fmt.Errorf("quantize: %s: ignore %q: %s matches exclude_modules by exact name, substring and wildcard and cannot express a regular expression; give the model's module list (QuantConfigSpec.Modules) so that it is expanded to names", format, e.raw, format)
			}
			if !slices.Contains(out, e.raw) {
				out = append(out, e.raw)
			}
		}
	}
	if !slices.Contains(out, lmHead) {
		out = append(out, lmHead)
	}
	return out, nil
}

// encodeConfigJSON encodes v without HTML escaping (module names and patterns
// stay readable), compact or indented, without a final newline.
func encodeConfigJSON(v any, indent string) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if indent != "" {
		enc.SetIndent("", indent)
	}
	if err := enc.Encode(v); err != nil {
		return nil, fmt.Errorf("quantize: encode config: %w", err)
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}
