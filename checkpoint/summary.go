package checkpoint

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/lowbit-ai/lowbit/format"
)

// Summary is what `lowbit inspect` reports of a checkpoint. It is built from
// headers and JSON files alone: no tensor data is read.
type Summary struct {
	Path string `json:"path"`
	// Directory is false when Path is a single .safetensors file; then
	// Config and Quantization are nil.
	Directory    bool               `json:"directory"`
	Config       *ConfigSummary     `json:"config,omitempty"`
	Quantization *Quantization      `json:"-"`
	Quant        *QuantSummary      `json:"quantization,omitempty"`
	Files        []FileSummary      `json:"files"`
	Tensors      int                `json:"tensors"`
	Elements     int64              `json:"elements"` // stored elements; a packed FP4 byte counts as one
	Bytes        int64              `json:"bytes"`    // tensor data bytes
	ByDType      []DTypeTotal       `json:"by_dtype"`
	ScaleTensors map[string]int     `json:"scale_tensors,omitempty"` // quantization tensors by name suffix
	Metadata     map[string]string  `json:"metadata,omitempty"`      // __metadata__ of the first file
	TensorList   []TensorEntrySumry `json:"tensor_list,omitempty"`
	Warnings     []string           `json:"warnings,omitempty"`
}

// ConfigSummary is the architecture part of a Summary.
type ConfigSummary struct {
	Arch              string   `json:"arch"`
	ModelType         string   `json:"model_type"`
	Architectures     []string `json:"architectures,omitempty"`
	Layers            int      `json:"layers"`
	FullAttnLayers    int      `json:"full_attention_layers"`
	LinearAttnLayers  int      `json:"linear_attention_layers,omitempty"`
	Hidden            int      `json:"hidden_size"`
	Intermediate      int      `json:"intermediate_size,omitempty"`
	Heads             int      `json:"num_attention_heads"`
	KVHeads           int      `json:"num_key_value_heads"`
	HeadDim           int      `json:"head_dim"`
	Vocab             int      `json:"vocab_size"`
	Experts           int      `json:"num_experts,omitempty"`
	ExpertsPerToken   int      `json:"num_experts_per_tok,omitempty"`
	MoEIntermediate   int      `json:"moe_intermediate_size,omitempty"`
	SharedExpertInter int      `json:"shared_expert_intermediate_size,omitempty"`
	RopeTheta         float64  `json:"rope_theta"`
	RotaryDim         int      `json:"rotary_dim"`
	MaxPositions      int      `json:"max_position_embeddings"`
	TiedEmbeddings    bool     `json:"tie_word_embeddings"`
	KVBytesPerToken   int64    `json:"kv_cache_bytes_per_token_bf16"`
}

// QuantSummary is the quantization part of a Summary.
type QuantSummary struct {
	Method       string   `json:"method"`
	Scheme       string   `json:"scheme"`
	Format       string   `json:"format,omitempty"`
	KVCacheDType string   `json:"kv_cache_dtype"`
	Ignore       []string `json:"ignore,omitempty"`
}

// FileSummary is one safetensors file.
type FileSummary struct {
	Name    string `json:"name"`
	Bytes   int64  `json:"bytes"`
	Tensors int    `json:"tensors"`
}

// DTypeTotal sums the tensors of one dtype.
type DTypeTotal struct {
	DType    format.DType `json:"dtype"`
	Tensors  int          `json:"tensors"`
	Elements int64        `json:"elements"`
	Bytes    int64        `json:"bytes"`
}

// TensorEntrySumry is one tensor of Summary.TensorList.
type TensorEntrySumry struct {
	Name  string       `json:"name"`
	DType format.DType `json:"dtype"`
	Shape []int64      `json:"shape"`
	Bytes int64        `json:"bytes"`
	File  string       `json:"file"`
}

// scaleSuffixes are the tensor-name suffixes that quantized checkpoints add
// (compressed-tensors and ModelOpt); counting them shows what a checkpoint
// holds even when its config says nothing.
var scaleSuffixes = []string{
	".weight_packed", ".weight_scale", ".weight_scale_2", ".weight_global_scale",
	".input_scale", ".input_global_scale", ".k_scale", ".v_scale", ".weight_zero_point",
}

// Inspect summarizes the checkpoint at path: a Hugging Face model directory
// or one .safetensors file. withTensors adds the per-tensor list.
func Inspect(path string, withTensors bool) (*Summary, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	s := &Summary{Path: path, Directory: st.IsDir()}
	var entries []TensorEntry
	if st.IsDir() {
		inv, err := ReadInventory(path)
		if err != nil {
			return nil, err
		}
		entries = inv.Tensors
		for _, sh := range inv.Shards {
			s.Files = append(s.Files, FileSummary{Name: sh.Name, Bytes: sh.Size(), Tensors: len(sh.Header.Tensors)})
			if s.Metadata == nil {
				s.Metadata = sh.Header.Metadata
			}
		}
		if err := s.readConfig(path); err != nil {
			return nil, err
		}
	} else {
		h, err := ReadHeader(path)
		if err != nil {
			return nil, err
		}
		name := filepath.Base(path)
		for _, t := range h.Tensors {
			entries = append(entries, TensorEntry{TensorInfo: t, Shard: name})
		}
		s.Files = []FileSummary{{Name: name, Bytes: h.DataStart + h.DataSize, Tensors: len(h.Tensors)}}
		s.Metadata = h.Metadata
	}
	s.addTensors(entries, withTensors)
	return s, nil
}

func (s *Summary) readConfig(dir string) error {
	cfg, err := ReadConfig(dir)
	if errors.Is(err, fs.ErrNotExist) {
		s.Warnings = append(s.Warnings, "no config.json: architecture unknown")
		return nil
	}
	if err != nil {
		return err
	}
	t := &cfg.Text
	c := &ConfigSummary{
		Arch: cfg.Arch.String(), ModelType: cfg.ModelType, Architectures: cfg.Architectures,
		Layers: t.NumHiddenLayers, Hidden: t.HiddenSize, Intermediate: t.IntermediateSize,
		Heads: t.NumAttentionHeads, KVHeads: t.NumKeyValueHeads, HeadDim: t.HeadDim, Vocab: t.VocabSize,
		Experts: t.NumExperts, ExpertsPerToken: t.NumExpertsPerTok, MoEIntermediate: t.MoEIntermediateSize,
		SharedExpertInter: t.SharedExpertIntermediateSize, RopeTheta: t.RoPE.Theta, RotaryDim: t.RotaryDim(),
		MaxPositions: t.MaxPositionEmbeddings, TiedEmbeddings: t.TieWordEmbeddings,
	}
	for i := range t.NumHiddenLayers {
		if t.LayerType(i) == LinearAttention {
			c.LinearAttnLayers++
		} else {
			c.FullAttnLayers++
		}
	}
	// K and V, each kv_heads x head_dim BF16 values, per attention layer.
	c.KVBytesPerToken = int64(c.FullAttnLayers) * 2 * int64(t.NumKeyValueHeads) * int64(t.HeadDim) * 2
	s.Config = c
	q, err := ReadQuantConfig(dir)
	if err != nil {
		return err
	}
	s.Quantization = q
	if q != nil {
		s.Quant = &QuantSummary{Method: string(q.Method), Scheme: q.Scheme, Format: q.Format, KVCacheDType: q.KVCacheDType, Ignore: q.Ignore}
	}
	return nil
}

func (s *Summary) addTensors(entries []TensorEntry, withTensors bool) {
	byDType := map[format.DType]*DTypeTotal{}
	for _, e := range entries {
		n, b := e.NumElements(), e.Bytes()
		s.Tensors++
		s.Elements += n
		s.Bytes += b
		d := byDType[e.DType]
		if d == nil {
			d = &DTypeTotal{DType: e.DType}
			byDType[e.DType] = d
		}
		d.Tensors++
		d.Elements += n
		d.Bytes += b
		for _, suf := range scaleSuffixes {
			if strings.HasSuffix(e.Name, suf) {
				if s.ScaleTensors == nil {
					s.ScaleTensors = map[string]int{}
				}
				s.ScaleTensors[strings.TrimPrefix(suf, ".")]++
			}
		}
		if withTensors {
			s.TensorList = append(s.TensorList, TensorEntrySumry{Name: e.Name, DType: e.DType, Shape: e.Shape, Bytes: b, File: e.Shard})
		}
	}
	for _, d := range byDType {
		s.ByDType = append(s.ByDType, *d)
	}
	slices.SortFunc(s.ByDType, func(a, b DTypeTotal) int { return int(b.Bytes - a.Bytes) })
	if s.Directory && s.Quant == nil && len(s.ScaleTensors) > 0 {
		s.Warnings = append(s.Warnings, "tensors with quantization-scale names but no quantization config: loaders will treat this checkpoint as unquantized")
	}
}
