package hub

import (
	"bytes"
	"fmt"
	"math"
	"strings"

	"github.com/lowbit-ai/lowbit/checkpoint"
)

// CardOptions are what a model card says beyond what the checkpoint's own
// files say.
type CardOptions struct {
	Repo RepoID
	// BaseModel is the repository quantized ("Qwen/Qwen3-8B"), if known.
	BaseModel string
	// Method says how the checkpoint was made (the commands, the
	// calibration data); "" is written as not recorded.
	Method string
	// KL is KL(BF16 ‖ this) in nats per token where measured (nil: not
	// measured), and KLData how it was measured (prompts, tokens, server).
	KL     *float64
	KLData string
	// Version is lowbit's version.
	Version string
}

// wak is the W·A bits of each scheme, as LowBArena names solutions.
var wak = map[string]string{
	checkpoint.SchemeFP8Dynamic: "W8A8", checkpoint.SchemeFP8: "W8A8", checkpoint.SchemeFP8Block: "W8A8",
	checkpoint.SchemeFP8PerTensorDynamic: "W8A8", checkpoint.SchemeNVFP4: "W4A4", checkpoint.SchemeNVFP4A16: "W4A16",
}

// ModelCard writes a README.md for the checkpoint in dir: the scheme, the
// KV-cache dtype and the layers left unquantized (read from its config
// files and tensor headers), how it was made, and KL where measured.
func ModelCard(dir string, o CardOptions) ([]byte, error) {
	s, err := checkpoint.Inspect(dir, false)
	if err != nil {
		return nil, fmt.Errorf("hub: model card: %w", err)
	}
	if s.Config == nil {
		return nil, fmt.Errorf("hub: model card: %s has no config.json; write a README.md there yourself", dir)
	}
	if o.KL != nil && (math.IsNaN(*o.KL) || math.IsInf(*o.KL, 0) || *o.KL < 0) {
		return nil, fmt.Errorf("hub: model card: KL %v: want a finite number of nats per token >= 0", *o.KL)
	}
	scheme, kv, method := "BF16 (not quantized)", "auto", "none"
	bits := "W16A16"
	var ignore []string
	if q := s.Quant; q != nil {
		scheme, kv, method, ignore = q.Scheme, q.KVCacheDType, q.Method, q.Ignore
		if q.Format != "" {
			method += " (" + q.Format + ")"
		}
		if b, ok := wak[q.Scheme]; ok {
			bits = b
		} else {
			bits = "mixed"
		}
	}
	kvBits, kvText := "KV16", "the model's dtype (BF16)"
	if kv == checkpoint.KVCacheFP8 {
		kvBits, kvText = "KV8", "FP8 E4M3 with per-tensor k/v scales (serve with --kv-cache-dtype fp8)"
	}

	var b bytes.Buffer
	b.WriteString("---\n")
	if o.BaseModel != "" {
		fmt.Fprintf(&b, "base_model: %s\nbase_model_relation: quantized\n", yamlString(o.BaseModel))
	}
	b.WriteString("tags:\n- lowbit\n")
	if s.Quant != nil {
		fmt.Fprintf(&b, "- %s\n- %s\n", yamlString(strings.ToLower(scheme)), yamlString(s.Quant.Method))
	}
	b.WriteString("---\n\n")
	fmt.Fprintf(&b, "# %s\n\n", o.Repo.Name)
	if o.BaseModel != "" {
		fmt.Fprintf(&b, "A %s quantization of [%s](https://huggingface.co/%s), written by lowbit.\n\n", scheme, o.BaseModel, o.BaseModel)
	} else {
		fmt.Fprintf(&b, "A %s checkpoint written by lowbit.\n\n", scheme)
	}
	b.WriteString("| | |\n| --- | --- |\n")
	fmt.Fprintf(&b, "| Architecture | %s (%s), %d layers, hidden %d, vocabulary %d |\n",
		s.Config.Arch, s.Config.ModelType, s.Config.Layers, s.Config.Hidden, s.Config.Vocab)
	fmt.Fprintf(&b, "| Scheme | %s, %s%s |\n", scheme, bits, kvBits)
	fmt.Fprintf(&b, "| Format | %s |\n", method)
	fmt.Fprintf(&b, "| KV cache | %s |\n", kvText)
	if len(ignore) > 0 {
		fmt.Fprintf(&b, "| Left in 16 bits | %s |\n", cell(strings.Join(ignore, ", ")))
	}
	fmt.Fprintf(&b, "| Size | %.2f GB of tensors in %d files |\n", float64(s.Bytes)/1e9, len(s.Files))
	if o.KL != nil {
		kl := fmt.Sprintf("%.4f nats per token", *o.KL)
		if o.KLData != "" {
			kl += " (" + cell(o.KLData) + ")"
		}
		fmt.Fprintf(&b, "| KL(BF16 ‖ this) | %s |\n", kl)
	} else {
		b.WriteString("| KL(BF16 ‖ this) | not measured |\n")
	}
	b.WriteString("\n## How it was made\n\n")
	if o.Method != "" {
		b.WriteString(strings.TrimSpace(o.Method) + "\n")
	} else {
		b.WriteString("Not recorded.\n")
	}
	fmt.Fprintf(&b, "\nPushed with `lowbit push` (lowbit %s).\n", o.Version)
	b.WriteString("\n## Serving\n\nvLLM loads it as it is:\n\n```bash\n")
	fmt.Fprintf(&b, "vllm serve %s --revision COMMIT", o.Repo)
	if kv == checkpoint.KVCacheFP8 {
		b.WriteString(" --kv-cache-dtype fp8")
	}
	b.WriteString("\n```\n\nwith COMMIT the commit to pin (the one `lowbit push` printed).\n")
	return b.Bytes(), nil
}

// yamlString quotes s for YAML when it holds anything but plain characters.
func yamlString(s string) string {
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./", r)) {
			return fmt.Sprintf("%q", s)
		}
	}
	return s
}

// cell keeps s inside one Markdown table cell.
func cell(s string) string {
	return strings.NewReplacer("|", `\|`, "\n", " ").Replace(s)
}
