package stats

import (
	"errors"
	"fmt"
	"strings"

	"github.com/lowbit-ai/lowbit/format"
)

// A tensor's name is a module name, a dot, and one of these suffixes.
const (
	sufInputAbsMax   = "input_absmax"
	sufChannelAbsMax = "input_channel_absmax"
	sufMeanAbs       = "input_mean_abs"
	sufHessian       = "hessian"
	sufHessianTokens = "hessian_tokens"
	sufKAbsMax       = "k_absmax"
	sufVAbsMax       = "v_absmax"
	sufKHeadAbsMax   = "k_head_absmax"
)

// kind says what a suffix belongs to.
type kind uint8

const (
	linearStat kind = iota + 1
	attentionStat
)

// suffixes maps every known suffix to its module kind and dtype.
var suffixes = map[string]struct {
	kind  kind
	dtype format.DType
}{
	sufInputAbsMax:   {linearStat, format.F32},
	sufChannelAbsMax: {linearStat, format.F32},
	sufMeanAbs:       {linearStat, format.F32},
	sufHessian:       {linearStat, format.F32},
	sufHessianTokens: {linearStat, format.I64},
	sufKAbsMax:       {attentionStat, format.F32},
	sufVAbsMax:       {attentionStat, format.F32},
	sufKHeadAbsMax:   {attentionStat, format.F32},
}

// parseName splits a tensor name into its module and a known suffix.
func parseName(name string) (module, suffix string, err error) {
	i := strings.LastIndexByte(name, '.')
	if i < 0 {
		return "", "", invalidf("tensor %q: not MODULE.STATISTIC", truncate(name))
	}
	module, suffix = name[:i], name[i+1:]
	if _, ok := suffixes[suffix]; !ok {
		return "", "", invalidf("tensor %q: unknown statistic %q", truncate(name), truncate(suffix))
	}
	if err := checkModule(module); err != nil {
		return "", "", invalidf("tensor %q: %v", truncate(name), err)
	}
	return module, suffix, nil
}

// checkModule accepts a PyTorch module path: dot-separated non-empty
// segments of ASCII letters, digits and underscores
// ("model.layers.0.mlp.experts.3.gate_proj").
func checkModule(module string) error {
	if module == "" {
		return errors.New("empty module name")
	}
	for seg := range strings.SplitSeq(module, ".") {
		if seg == "" {
			return fmt.Errorf("module name %q has an empty segment", truncate(module))
		}
		for i := 0; i < len(seg); i++ {
			c := seg[i]
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_') {
				return fmt.Errorf("module name %q has a character other than ASCII letters, digits, '_' and '.'", truncate(module))
			}
		}
	}
	return nil
}

// truncate shortens s for an error message.
func truncate(s string) string {
	if len(s) > 80 {
		return s[:80] + "..."
	}
	return s
}
