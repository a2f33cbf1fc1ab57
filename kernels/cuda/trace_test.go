//go:build cgo

package cuda

import (
	"slices"
	"testing"
)

// TestTrace: with LOWBIT_TRACE=1 a timeline names a graph's kernels and
// the launches after it in stream order, each released no earlier than
// the one before and no earlier than it was reached; without it,
// TraceStart says how to get one. Skips without a GPU.
func TestTrace(t *testing.T) {
	t.Setenv("LOWBIT_TRACE", "") // whatever the run's environment says
	plain := openOrSkip(t)
	if err := plain.TraceStart(); err == nil {
		t.Error("TraceStart without LOWBIT_TRACE=1: no error")
	}
	t.Setenv("LOWBIT_TRACE", "1")
	d := openOrSkip(t)
	const n = 1 << 16
	var x, w Buf
	err := d.Run(func(k *K) error {
		var err error
		if x, err = k.Upload(make([]byte, 4*n)); err != nil {
			return err
		}
		w, err = k.Upload(make([]byte, 4*n)) // the norm's gains, 1 + 0
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	g, err := d.Capture(func(k *K) error {
		if err := k.Add(x, x, x, n); err != nil {
			return err
		}
		return k.RMSNorm(x, x, w, 1, n, 1e-6, true)
	})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Destroy(g)
	if err := d.TraceStart(); err != nil {
		t.Fatal(err)
	}
	if err := d.Run(func(k *K) error {
		if err := k.Launch(g); err != nil {
			return err
		}
		return k.Add(x, x, x, n)
	}); err != nil {
		t.Fatal(err)
	}
	spans, err := d.TraceStop()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for i, s := range spans {
		names = append(names, s.Name)
		if s.Reached > s.Released || i > 0 && s.Released < spans[i-1].Released {
			t.Errorf("span %d %+v out of order (the one before: %+v)", i, s, spans[max(i-1, 0)])
		}
	}
	if want := []string{"lb_add", "lb_rmsnorm", "lb_add"}; !slices.Equal(names, want) {
		t.Errorf("timeline of %v, want %v", names, want)
	}
	t.Logf("%+v", spans)
}
