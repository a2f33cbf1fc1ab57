package calibrate

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/lowbit-ai/lowbit/calibrate/stats"
	"github.com/lowbit-ai/lowbit/checkpoint"
	"github.com/lowbit-ai/lowbit/runtime"
)

// DefaultHessianBudget is the float64 Hessian memory one pass may hold when
// Options.HessianBudget is zero.
const DefaultHessianBudget = 4 << 30

// Options configures Run. The zero value collects no Hessians, keeps its
// work next to the output and saves progress after every sample.
type Options struct {
	// Hessian collects each linear module's Σ x xᵀ for GPTQ.
	Hessian bool
	// HessianBudget bounds the bytes of float64 Hessian accumulators held
	// at once; the layers are split into passes over the data that each fit
	// (at least one layer per pass). Zero means DefaultHessianBudget.
	HessianBudget int64
	// WorkDir keeps the state an interrupted run resumes from; "" means
	// the output path with ".partial" appended. It is removed when the
	// statistics file is written.
	WorkDir string
	// CheckpointEvery is how often the running pass's accumulators are
	// saved (always also on cancellation); zero saves after every sample.
	CheckpointEvery time.Duration
	// Dataset and CreatedBy go into the file's metadata.
	Dataset, CreatedBy string
	// Progress, when set, is called after each sample with the tokens run
	// so far and the total over all passes.
	Progress func(done, total int64)

	// stopAfter, in tests, makes Run fail like a killed process (no save)
	// once it has run this many samples in this call.
	stopAfter int
}

// Result describes a finished run.
type Result struct {
	Meta stats.Meta
	// Passes is the number of passes over the samples; LayersPerPass the
	// decoder layers each one calibrated.
	Passes, LayersPerPass int
	// ResumedPass and ResumedSample say where this call started: 0 and 0
	// for a fresh run.
	ResumedPass, ResumedSample int
}

// ErrInterrupted is wrapped by Run's error when its context ends; the work
// so far is saved and the same call resumes it.
var ErrInterrupted = errors.New("calibration interrupted")

// Run runs every sample through m (a BF16 checkpoint, loaded with any
// kernels) and writes the calibration statistics of its linear modules and
// attention layers to out, in the calibrate/stats format. Each sample is a
// sequence of token ids, run as one prefill from position 0.
//
// The layers are calibrated in passes (one unless Hessians need more memory
// than opts.HessianBudget); progress is saved in opts.WorkDir, and a Run
// with the same model, samples and options picks up where an interrupted
// one stopped, with the same result bit for bit. out must not exist.
func Run(ctx context.Context, m *runtime.Model, samples [][]int, out string, opts Options) (*Result, error) {
	if _, err := os.Stat(out); err == nil {
		return nil, fmt.Errorf("calibrate: %s already exists: choose another output or delete it", out)
	}
	r, err := newRunner(m, samples, out, opts)
	if err != nil {
		return nil, err
	}
	if err := r.run(ctx); err != nil {
		return nil, err
	}
	return &r.res, nil
}

type runner struct {
	m       *runtime.Model
	samples [][]int
	out     string
	opts    Options
	sh      shape
	meta    stats.Meta
	prefix  []int64 // prefix[k]: tokens of the first k samples
	dir     string
	res     Result
	ran     int // samples run in this call, for stopAfter
}

func newRunner(m *runtime.Model, samples [][]int, out string, opts Options) (*runner, error) {
	if len(samples) == 0 {
		return nil, errors.New("calibrate: no samples")
	}
	cfgJSON, err := os.ReadFile(filepath.Join(m.Dir(), checkpoint.ConfigFileName))
	if err != nil {
		return nil, fmt.Errorf("calibrate: %w", err)
	}
	cfg := m.Config()
	if m.Quantization() != nil {
		return nil, fmt.Errorf("calibrate: %s is already quantized (%s): calibrate its BF16 original, whose activations the statistics must describe", m.Dir(), m.Quantization().Scheme)
	}
	t := &cfg.Text
	r := &runner{m: m, samples: samples, out: out, opts: opts,
		sh: shape{layers: t.NumHiddenLayers, hidden: t.HiddenSize, inter: t.IntermediateSize,
			heads: t.NumAttentionHeads, kvHeads: t.NumKeyValueHeads, headDim: t.HeadDim},
		prefix: make([]int64, len(samples)+1)}
	seqLen := 0
	for i, s := range samples {
		switch {
		case len(s) == 0:
			return nil, fmt.Errorf("calibrate: sample %d has no tokens", i)
		case len(s) > m.MaxPositions():
			return nil, fmt.Errorf("calibrate: sample %d has %d tokens, more than the model's %d positions: lower --seq-len", i, len(s), m.MaxPositions())
		}
		for j, id := range s {
			if id < 0 || id >= m.VocabSize() {
				return nil, fmt.Errorf("calibrate: sample %d token %d is id %d, outside the vocabulary [0, %d): was it made with this model's tokenizer?", i, j, id, m.VocabSize())
			}
		}
		r.prefix[i+1] = r.prefix[i] + int64(len(s))
		seqLen = max(seqLen, len(s))
	}
	r.meta = stats.Meta{ModelType: cfg.ModelType, ConfigSHA256: stats.ConfigSHA256(cfgJSON),
		Samples: int64(len(samples)), Tokens: r.prefix[len(samples)], SeqLen: int64(seqLen),
		Dataset: opts.Dataset, CreatedBy: opts.CreatedBy}
	if r.meta.ModelType == "" {
		r.meta.ModelType = cfg.Arch.String()
	}
	r.dir = opts.WorkDir
	if r.dir == "" {
		r.dir = out + ".partial"
	}
	return r, nil
}

// samplesHash identifies the token ids of every sample.
func samplesHash(samples [][]int) string {
	h := sha256.New()
	var b [8]byte
	for _, s := range samples {
		binary.LittleEndian.PutUint64(b[:], uint64(len(s)))
		h.Write(b[:])
		for _, id := range s {
			binary.LittleEndian.PutUint32(b[:4], uint32(id))
			h.Write(b[:4])
		}
	}
	return hex.EncodeToString(h.Sum(nil))
}

func (r *runner) run(ctx context.Context) error {
	lpp := r.sh.layers
	if r.opts.Hessian {
		budget := r.opts.HessianBudget
		if budget <= 0 {
			budget = DefaultHessianBudget
		}
		lpp = int(min(int64(r.sh.layers), max(1, budget/r.sh.hessianBytes())))
	}
	want := manifest{Version: manifestVersion, ConfigSHA256: r.meta.ConfigSHA256, SamplesSHA256: samplesHash(r.samples),
		Samples: len(r.samples), Tokens: r.meta.Tokens, SeqLen: int(r.meta.SeqLen), Dataset: r.meta.Dataset,
		Hessian: r.opts.Hessian, Layers: r.sh.layers, LayersPerPass: max(lpp, 1)}
	lpp, _, err := openWorkDir(r.dir, want)
	if err != nil {
		return err
	}
	passes := (r.sh.layers + lpp - 1) / lpp
	r.res = Result{Meta: r.meta, Passes: passes, LayersPerPass: lpp, ResumedPass: -1}
	for p := range passes {
		if _, err := os.Stat(passFile(r.dir, p)); err == nil {
			continue
		}
		lo, hi := p*lpp, min((p+1)*lpp, r.sh.layers)
		if err := r.pass(ctx, p, passes, lo, hi); err != nil {
			return err
		}
	}
	if r.res.ResumedPass < 0 { // every pass was already done
		r.res.ResumedPass, r.res.ResumedSample = passes, 0
	}
	if err := r.merge(passes, lpp); err != nil {
		return err
	}
	return os.RemoveAll(r.dir)
}

// pass runs every sample for the layers [lo, hi) and writes their
// statistics to the pass file.
func (r *runner) pass(ctx context.Context, p, passes, lo, hi int) error {
	layers := make([]*layerStats, hi-lo)
	var tmp *[]float32
	if r.opts.Hessian {
		tmp = new([]float32)
	}
	for i := range layers {
		layers[i] = newLayerStats(lo+i, r.sh, tmp)
	}
	start, tokens := 0, int64(0)
	partial := partialFile(r.dir, p)
	if _, err := os.Stat(partial); err == nil {
		if start, tokens, err = loadPartial(partial, layers, len(r.samples), func(k int) int64 { return r.prefix[k] }); err != nil {
			return err
		}
	}
	if r.res.ResumedPass < 0 {
		r.res.ResumedPass, r.res.ResumedSample = p, start
	}
	total := int64(passes) * r.meta.Tokens
	done := int64(p)*r.meta.Tokens + tokens
	if r.opts.Progress != nil {
		r.opts.Progress(done, total)
	}
	seq := r.m.NewSequence(int(r.meta.SeqLen))
	var obsErr error
	var sample int
	observe := func(layer int, point runtime.ObservePoint, x []float32, T int) {
		if layer < lo || layer >= hi || obsErr != nil {
			return
		}
		if err := layers[layer-lo].observe(point, x, T); err != nil {
			obsErr = fmt.Errorf("calibrate: sample %d, layer %d %s: %w: the model computes non-finite activations on this sample; check the checkpoint's weights or leave the sample out", sample, layer, point, err)
		}
	}
	lastSave := time.Now()
	for sample = start; sample < len(r.samples); sample++ {
		if err := ctx.Err(); err != nil {
			if sample > start {
				if err := savePartial(partial, layers, sample, tokens); err != nil {
					return err
				}
			}
			return fmt.Errorf("calibrate: %w in pass %d of %d after %d of %d samples (%v); the work so far is in %s: run the same command again to resume",
				ErrInterrupted, p+1, passes, sample, len(r.samples), err, r.dir)
		}
		if r.opts.stopAfter > 0 && r.ran == r.opts.stopAfter {
			return errors.New("calibrate: stopped by test")
		}
		seq.Truncate(0)
		s := r.samples[sample]
		if _, err := r.m.ForwardWith(seq, s, runtime.ForwardOptions{LastOnly: true, Observe: observe}); err != nil {
			return fmt.Errorf("calibrate: sample %d: %w", sample, err)
		}
		if obsErr != nil {
			return obsErr
		}
		r.ran++
		tokens += int64(len(s))
		done += int64(len(s))
		if r.opts.Progress != nil {
			r.opts.Progress(done, total)
		}
		if sample+1 < len(r.samples) && time.Since(lastSave) >= r.opts.CheckpointEvery {
			if err := savePartial(partial, layers, sample+1, tokens); err != nil {
				return err
			}
			lastSave = time.Now()
		}
	}
	var lins []stats.Linear
	var attns []stats.Attention
	for _, l := range layers {
		ls, a := l.results()
		lins = append(lins, ls...)
		attns = append(attns, a)
	}
	if err := stats.Write(passFile(r.dir, p), r.meta, lins, attns, stats.WriteOptions{}); err != nil {
		return err
	}
	if err := os.Remove(partial); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("calibrate: %w", err)
	}
	return nil
}

// merge writes the statistics of every pass into the output: the one pass
// file itself, or the modules of all of them in model order, Hessians
// streamed row by row from the mapped pass files.
func (r *runner) merge(passes, lpp int) error {
	if passes == 1 {
		if err := os.Rename(passFile(r.dir, 0), r.out); err != nil {
			return fmt.Errorf("calibrate: %w", err)
		}
		return nil
	}
	var lins []stats.Linear
	var attns []stats.Attention
	for p := range passes {
		s, err := stats.Open(passFile(r.dir, p))
		if err != nil {
			return fmt.Errorf("calibrate: pass file of pass %d: %w (delete it to redo the pass)", p, err)
		}
		defer s.Close()
		for i := p * lpp; i < min((p+1)*lpp, r.sh.layers); i++ {
			for j := range siteModules {
				for _, mod := range siteModules[j] {
					l, err := linearFrom(s, prefix(i)+mod)
					if err != nil {
						return err
					}
					lins = append(lins, l)
				}
			}
			a := stats.Attention{Module: prefix(i) + "self_attn"}
			if a.KAbsMax, a.VAbsMax, err = s.KVAbsMax(a.Module); err != nil {
				return err
			}
			if a.KHeadAbsMax, err = s.KHeadAbsMax(a.Module); err != nil {
				return err
			}
			attns = append(attns, a)
		}
	}
	return stats.Write(r.out, r.meta, lins, attns, stats.WriteOptions{})
}

// linearFrom reads a module's statistics back from a pass file.
func linearFrom(s *stats.Stats, module string) (stats.Linear, error) {
	l := stats.Linear{Module: module}
	var err error
	if l.InputAbsMax, err = s.InputAbsMax(module); err != nil {
		return l, err
	}
	if l.ChannelAbsMax, err = s.ChannelAbsMax(module); err != nil {
		return l, err
	}
	if l.MeanAbs, err = s.MeanAbs(module); err != nil {
		return l, err
	}
	if s.HasHessian(module) {
		h, err := s.Hessian(module)
		if err != nil {
			return l, err
		}
		l.HessianTokens = h.Tokens()
		l.Hessian = func(i int, row []float32) error {
			h.Row(i, row)
			return nil
		}
	}
	return l, nil
}
