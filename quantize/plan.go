package quantize

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/lowbit-ai/lowbit/calibrate/stats"
	"github.com/lowbit-ai/lowbit/checkpoint"
	"github.com/lowbit-ai/lowbit/format"
)

// Options says what to make of a checkpoint.
type Options struct {
	Scheme Scheme
	Format Format
	// KVCacheFP8 asks for an FP8 KV cache with per-layer k/v scales from
	// Stats; KVScaleOne accepts scale 1.0 where no statistics exist.
	KVCacheFP8 bool
	KVScaleOne bool
	// Ignore adds modules to keep in BF16: exact module names, or "re:"
	// followed by a regular expression matched from the start of the module
	// name, as compressed-tensors matches its ignore list ("re:.*mlp.gate$").
	Ignore []string
	// QuantizeLinearAttn overrides the Qwen3.5 default of keeping the Gated
	// DeltaNet projections in BF16 with NVFP4.
	QuantizeLinearAttn bool
	// Stats holds calibration statistics; static schemes, the FP8 KV
	// cache and GPTQ need them. It may be nil.
	Stats *stats.Stats
	// Method is how weights are rounded: RTN (the zero value), MSE or GPTQ
	// (which needs Hessians in Stats).
	Method Method
}

// matrix is a BF16 [Rows, Cols] matrix inside a source tensor, at byte
// Offset from the tensor's start.
type matrix struct {
	Tensor     string
	Offset     int64
	Rows, Cols int
}

func (m matrix) bytes() int64 { return 2 * int64(m.Rows) * int64(m.Cols) }

// member is one linear module of a unit.
type member struct {
	Module string
	Src    matrix
	// InputAbsMax is the calibrated input range, for static schemes.
	InputAbsMax float32
	// First is the index in Plan.Outputs of the module's first output; its
	// outputs follow in the order of the scheme's output table.
	First int
}

type unitKind uint8

const (
	copyTensor unitKind = iota // a source tensor, unchanged
	copySlice                  // a part of a source tensor (a split fused expert), unchanged
	quantGroup                 // the modules of one fused layer, quantized together
	constant                   // a small tensor computed at plan time (KV-cache scales)
)

// unit is the work behind consecutive outputs: everything one step reads
// and writes. Units are independent, so they run in parallel.
type unit struct {
	Kind    unitKind
	Group   string   // fused layer name, for quantGroup
	Members []member // quantGroup
	Src     matrix   // copySlice; for copyTensor, Src.Tensor only
	Const   []byte   // constant
	First   int      // index of the unit's first output
	Count   int      // number of outputs
	InBytes int64    // source bytes read
	Work    int64    // working memory beyond the source and outputs (GPTQ)
}

// Action says what happens to one output tensor, for printing the plan.
type Action struct {
	Output  checkpoint.TensorSpec
	Source  string // source tensor ("" for computed scales)
	How     string // "copy", "split", "fp8-dynamic", "kv-scale", ...
	InBytes int64  // bytes of the source read for this output (0 for scales)
}

// Plan is the complete decision of a quantization, before any tensor data
// is read: every output tensor with its name, dtype and shape, where its
// bytes come from, and the config files to write. It is pure data.
type Plan struct {
	Opts        Options
	Config      *checkpoint.Config
	Outputs     []checkpoint.TensorSpec
	Actions     []Action
	units       []unit
	Quantized   []string // modules quantized, in output order
	Ignore      []string // linear modules left in BF16, for the config
	Notes       []string // decisions worth telling the user
	ConfigJSON  []byte   // the new config.json
	ExtraFiles  map[string][]byte
	BytesIn     int64
	BytesOut    int64
	LargestUnit int64
}

// ErrAlreadyQuantized is returned for a source checkpoint that is not BF16.
var ErrAlreadyQuantized = errors.New("quantize: the source checkpoint is already quantized")

// NewPlan decides how to quantize the checkpoint whose headers inv holds and
// whose config.json is cfgJSON.
func NewPlan(inv *checkpoint.Inventory, cfgJSON []byte, opts Options) (*Plan, error) {
	cfg, err := checkpoint.ParseConfig(cfgJSON)
	if err != nil {
		return nil, err
	}
	if cfg.Quantization != nil {
		return nil, fmt.Errorf("%w (%s %s): quantize its BF16 original instead", ErrAlreadyQuantized, cfg.Quantization.Method, cfg.Quantization.Scheme)
	}
	pol, ok := policies[cfg.Arch]
	if !ok {
		return nil, fmt.Errorf("quantize: no policy for architecture %s", cfg.Arch)
	}
	if opts.Stats != nil {
		if err := opts.Stats.CheckModel(cfgJSON); err != nil {
			return nil, err
		}
	}
	ignore, err := compileIgnoreEntries(opts.Ignore)
	if err != nil {
		return nil, err
	}
	p := &Plan{Opts: opts, Config: cfg}
	b := planBuilder{p: p, inv: inv, pol: pol, userIgnore: ignore}
	if err := b.collect(); err != nil {
		return nil, err
	}
	if err := b.decide(); err != nil {
		return nil, err
	}
	if err := b.emit(); err != nil {
		return nil, err
	}
	if err := p.writeConfigs(cfgJSON, b.linearModules()); err != nil {
		return nil, err
	}
	return p, nil
}

// candidate is a linear module that may be quantized.
type candidate struct {
	module string
	src    matrix
	pos    int // position of its source tensor in the inventory, for ordering
	kept   string
}

type planBuilder struct {
	p          *Plan
	inv        *checkpoint.Inventory
	pol        archPolicy
	userIgnore []ignoreEntry

	cands   []*candidate
	passes  []checkpoint.TensorEntry // tensors copied unchanged
	splits  map[string][]*candidate  // fused expert tensor -> its per-expert modules
	linears []string                 // every 2-D linear-like module of the model, for the ignore list
}

// collect sorts the source tensors into candidates and pass-throughs.
func (b *planBuilder) collect() error {
	b.splits = map[string][]*candidate{}
	for pos, e := range b.inv.Tensors {
		if m := fusedExpertTensor.FindStringSubmatch(e.Name); b.pol.fusedExperts && m != nil && len(e.Shape) == 3 {
			if err := b.splitExperts(pos, e, m[1], m[2]); err != nil {
				return err
			}
			continue
		}
		module, isWeight := strings.CutSuffix(e.Name, ".weight")
		if isWeight && len(e.Shape) == 2 && !strings.HasSuffix(module, "embed_tokens") {
			b.linears = append(b.linears, module)
		}
		if isWeight && len(e.Shape) == 2 && linearModule.MatchString(module) && !neverQuantized.MatchString(module) {
			if err := checkBF16(e); err != nil {
				return err
			}
			b.cands = append(b.cands, &candidate{module: module, pos: pos,
				src: matrix{Tensor: e.Name, Rows: int(e.Shape[0]), Cols: int(e.Shape[1])}})
			continue
		}
		if isQuantizedDType(e.DType) {
			return fmt.Errorf("%w: tensor %s is %s", ErrAlreadyQuantized, e.Name, e.DType)
		}
		b.passes = append(b.passes, e)
	}
	return nil
}

// splitExperts turns experts.gate_up_proj [E, 2F, D] into per-expert
// gate_proj and up_proj [F, D] (gate first, as transformers splits it), and
// experts.down_proj [E, D, F] into per-expert down_proj [D, F].
func (b *planBuilder) splitExperts(pos int, e checkpoint.TensorEntry, prefix, kind string) error {
	if err := checkBF16(e); err != nil {
		return err
	}
	E, R, C := int(e.Shape[0]), int(e.Shape[1]), int(e.Shape[2])
	expertBytes := 2 * int64(R) * int64(C)
	for x := range E {
		base := int64(x) * expertBytes
		var parts []*candidate
		if kind == "gate_up_proj" {
			if R%2 != 0 {
				return fmt.Errorf("quantize: %s: gate_up_proj has an odd row count %d", e.Name, R)
			}
			for i, name := range []string{"gate_proj", "up_proj"} {
				parts = append(parts, &candidate{module: fmt.Sprintf("%s.%d.%s", prefix, x, name), pos: pos,
					src: matrix{Tensor: e.Name, Offset: base + int64(i)*expertBytes/2, Rows: R / 2, Cols: C}})
			}
		} else {
			parts = append(parts, &candidate{module: fmt.Sprintf("%s.%d.down_proj", prefix, x), pos: pos,
				src: matrix{Tensor: e.Name, Offset: base, Rows: R, Cols: C}})
		}
		for _, c := range parts {
			b.linears = append(b.linears, c.module)
		}
		b.cands = append(b.cands, parts...)
		b.splits[e.Name] = append(b.splits[e.Name], parts...)
	}
	return nil
}

func checkBF16(e checkpoint.TensorEntry) error {
	if e.DType == format.BF16 {
		return nil
	}
	if isQuantizedDType(e.DType) {
		return fmt.Errorf("%w: tensor %s is %s", ErrAlreadyQuantized, e.Name, e.DType)
	}
	return fmt.Errorf("quantize: tensor %s is %s: quantize reads BF16 weights (convert the checkpoint to BF16 first)", e.Name, e.DType)
}

func isQuantizedDType(d format.DType) bool {
	switch d {
	case format.F8E4M3, format.F8E5M2, format.F8E8M0, format.U8, format.I8:
		return true
	}
	return false
}

// decide sets each candidate's ignore status, unified over fused layers.
func (b *planBuilder) decide() error {
	opts := b.p.Opts
	for _, c := range b.cands {
		switch {
		case slices.ContainsFunc(b.userIgnore, func(e ignoreEntry) bool { return e.match(c.module) }):
			c.kept = "--ignore"
		case opts.Scheme.FP4() && !opts.QuantizeLinearAttn && b.pol.keptWithFP4 != nil && b.pol.keptWithFP4.MatchString(c.module):
			c.kept = "kept in BF16 with NVFP4 by default (--quantize-linear-attn overrides)"
		}
	}
	// Unify over fused layers, then over MoE layers: loaders build all
	// routed experts of a layer as one fused MoE module with one scheme.
	b.unify(fusedGroup)
	b.unify(func(m string) string {
		if loc := moeExperts.FindStringSubmatchIndex(m); loc != nil {
			return m[:loc[3]]
		}
		return m
	})
	slices.Sort(b.p.Notes)
	return nil
}

// moeExperts matches a routed expert's module; its first group is the MoE
// layer's experts module.
var moeExperts = regexp.MustCompile(`^(.*\.mlp\.experts)\.[0-9]+\.`)

// unify keeps in BF16 every candidate whose group (by key) has a kept member.
func (b *planBuilder) unify(key func(string) string) {
	byGroup := map[string][]*candidate{}
	for _, c := range b.cands {
		g := key(c.module)
		byGroup[g] = append(byGroup[g], c)
	}
	for g, cs := range byGroup {
		var why string
		for _, c := range cs {
			if c.kept != "" {
				why = c.kept
			}
		}
		if why == "" {
			continue
		}
		for _, c := range cs {
			if c.kept == "" {
				c.kept = "fused with an ignored module in " + g
				b.p.Notes = append(b.p.Notes, fmt.Sprintf("%s kept in BF16: it is fused with ignored modules in %s, and loaders need one scheme per fused layer", c.module, g))
			}
		}
	}
}
