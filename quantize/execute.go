package quantize

import (
	"context"
	"fmt"
	"io"
	"maps"
	"path/filepath"
	"runtime"
	"slices"
	"sync"

	"github.com/lowbit-ai/lowbit/checkpoint"
)

// WriteOptions tunes Write.
type WriteOptions struct {
	// MaxShardBytes bounds each output shard; zero means 5 GB.
	MaxShardBytes int64
	// Workers quantize fused layers in parallel; zero means GOMAXPROCS.
	Workers int
	// InFlightBytes bounds the source bytes of units read ahead, being
	// quantized or waiting to be written; zero means 1 GiB. A unit larger
	// than the bound runs alone. Peak memory is about this plus the largest
	// unit's output.
	InFlightBytes int64
	// Progress, if set, is called as output bytes are written.
	Progress func(written, total int64)
	// Warn, if set, is told of modules quantized other than asked (GPTQ
	// falling back to RTN); it may be called from several goroutines.
	Warn func(msg string)
}

// Write executes the plan: it reads the source tensors from model (mapped,
// so nothing is copied until it is used), quantizes fused layers in
// parallel, streams every output tensor into outDir as soon as it is ready,
// and writes config.json, the format's extra files and the tokenizer files.
// outDir must not exist or be empty. The weights are written last and
// atomically (see checkpoint.WriteTensors): an interrupted Write never
// leaves a directory that looks complete.
func Write(ctx context.Context, model *checkpoint.Model, plan *Plan, outDir string, opts WriteOptions) error {
	if err := checkpoint.NewOutputDir(outDir); err != nil {
		return err
	}
	files := map[string][]byte{checkpoint.ConfigFileName: plan.ConfigJSON}
	maps.Copy(files, plan.ExtraFiles)
	for _, name := range slices.Sorted(maps.Keys(files)) {
		if err := checkpoint.WriteFileAtomic(filepath.Join(outDir, name), files[name], 0o644); err != nil {
			return fmt.Errorf("quantize: %w", err)
		}
	}
	if _, err := checkpoint.CopyAuxFiles(model.Dir(), outDir); err != nil {
		return fmt.Errorf("quantize: %w", err)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	r := newRunner(ctx, model, plan, opts)
	go r.schedule()
	_, err := checkpoint.WriteTensors(outDir, plan.Outputs, r.fill, checkpoint.WriteOptions{
		MaxShardBytes: opts.MaxShardBytes,
		Metadata:      map[string]string{"format": "pt"},
		Progress:      opts.Progress,
	})
	cancel()
	r.wait()
	if err != nil {
		return fmt.Errorf("quantize: %w", err)
	}
	return nil
}

// runner computes units ahead of the writer, in order, within a memory
// budget, and hands their outputs to the writer's fill calls.
type runner struct {
	ctx    context.Context
	model  *checkpoint.Model
	plan   *Plan
	budget *budget
	work   chan *job
	jobs   []*job // one per unit
	unitOf []int  // output index -> unit index
	wg     sync.WaitGroup
	warn   func(string)
}

type job struct {
	u    *unit
	done chan struct{}
	outs [][]byte // computed outputs, by output index minus u.First
	in   [][]byte // mapped source views, released once written
	err  error
	cost int64
}

func newRunner(ctx context.Context, model *checkpoint.Model, plan *Plan, opts WriteOptions) *runner {
	workers := opts.Workers
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	limit := opts.InFlightBytes
	if limit <= 0 {
		limit = 1 << 30
	}
	r := &runner{ctx: ctx, model: model, plan: plan, budget: newBudget(limit), work: make(chan *job),
		unitOf: make([]int, len(plan.Outputs)), warn: opts.Warn}
	for i := range plan.units {
		u := &plan.units[i]
		r.jobs = append(r.jobs, &job{u: u, done: make(chan struct{}), cost: u.InBytes + u.Work})
		for k := range u.Count {
			r.unitOf[u.First+k] = i
		}
	}
	for range workers {
		r.wg.Go(func() {
			for j := range r.work {
				j.outs, j.in, j.err = r.compute(j.u)
				close(j.done)
			}
		})
	}
	return r
}

// schedule walks the units in output order. For each it reserves the
// unit's source bytes from the budget and asks the kernel to read them ahead
// (so a cold checkpoint streams from disk while earlier units compute);
// fused layers then go to the workers, while copies wait for the writer,
// which streams them straight from the mapping. The writer releases a
// unit's bytes once its outputs are written.
func (r *runner) schedule() {
	defer close(r.work)
	for _, j := range r.jobs {
		if j.u.Kind == constant {
			continue
		}
		if !r.budget.acquire(r.ctx, j.cost) {
			return
		}
		r.prefetch(j.u)
		if j.u.Kind != quantGroup {
			continue
		}
		select {
		case r.work <- j:
		case <-r.ctx.Done():
			return
		}
	}
}

// prefetch starts reading a unit's source bytes in the background.
func (r *runner) prefetch(u *unit) {
	srcs := []matrix{u.Src}
	if u.Kind == quantGroup {
		srcs = srcs[:0]
		for _, m := range u.Members {
			srcs = append(srcs, m.Src)
		}
	}
	for _, m := range srcs {
		if v, err := r.view(m, u.Kind != copyTensor); err == nil {
			checkpoint.PrefetchPages(v)
		}
	}
}

func (r *runner) wait() { r.wg.Wait() }

// fill writes output i; WriteTensors calls it for each output in order.
func (r *runner) fill(i int, w io.Writer) error {
	j := r.jobs[r.unitOf[i]]
	u := j.u
	switch u.Kind {
	case copyTensor, copySlice:
		src, err := r.view(u.Src, u.Kind == copySlice)
		if err != nil {
			return err
		}
		_, err = w.Write(src)
		checkpoint.ReleasePages(src)
		r.budget.release(j.cost)
		return err
	case constant:
		_, err := w.Write(u.Const)
		return err
	}
	select {
	case <-j.done:
	case <-r.ctx.Done():
		return r.ctx.Err()
	}
	if j.err != nil {
		return j.err
	}
	k := i - u.First
	if _, err := w.Write(j.outs[k]); err != nil {
		return err
	}
	j.outs[k] = nil
	if k == u.Count-1 { // the unit is fully written
		for _, v := range j.in {
			checkpoint.ReleasePages(v)
		}
		j.in = nil
		r.budget.release(j.cost)
	}
	return nil
}

// view returns the mapped bytes of a source matrix (the whole tensor for an
// unsliced copy).
func (r *runner) view(m matrix, slice bool) ([]byte, error) {
	t, err := r.model.Tensor(m.Tensor)
	if err != nil {
		return nil, err
	}
	if !slice {
		return t.Data, nil
	}
	end := m.Offset + m.bytes()
	if m.Offset < 0 || end > int64(len(t.Data)) {
		return nil, fmt.Errorf("quantize: %s: slice [%d, %d) outside the tensor's %d bytes", m.Tensor, m.Offset, end, len(t.Data))
	}
	return t.Data[m.Offset:end], nil
}

// budget is a weighted semaphore over bytes in flight. A request larger
// than the whole budget is granted when nothing else is in flight.
type budget struct {
	mu    sync.Mutex
	cond  *sync.Cond
	limit int64
	used  int64
}

func newBudget(limit int64) *budget {
	b := &budget{limit: limit}
	b.cond = sync.NewCond(&b.mu)
	return b
}

func (b *budget) acquire(ctx context.Context, n int64) bool {
	stop := context.AfterFunc(ctx, func() {
		b.mu.Lock()
		b.cond.Broadcast()
		b.mu.Unlock()
	})
	defer stop()
	b.mu.Lock()
	defer b.mu.Unlock()
	for b.used > 0 && b.used+n > b.limit {
		if ctx.Err() != nil {
			return false
		}
		b.cond.Wait()
	}
	if ctx.Err() != nil {
		return false
	}
	b.used += n
	return true
}

func (b *budget) release(n int64) {
	b.mu.Lock()
	b.used -= n
	b.cond.Broadcast()
	b.mu.Unlock()
}
