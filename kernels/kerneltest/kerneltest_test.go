package kerneltest

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/lowbit-ai/lowbit/format"
	"github.com/lowbit-ai/lowbit/kernels"
	"github.com/lowbit-ai/lowbit/kernels/ref"
)

// TestTieRows checks that the "ties" activations do what they claim: most
// quotients x/s (and NVFP4's (amax/6)·G) are exactly rounding midpoints.
func TestTieRows(t *testing.T) {
	isMid := map[float32]bool{}
	for _, m := range e4m3Midpoints {
		isMid[m] = true
	}
	isMidE2M1 := map[float32]bool{}
	for _, m := range e2m1Midpoints {
		isMidE2M1[m] = true
	}
	for _, act := range actQuants[1:] {
		c := &checker{rng: rand.New(rand.NewPCG(1, uint64(act)))}
		T, in := 4, 512
		w := &kernels.Weight{Act: act, In: in}
		x := c.activations(T, in, w, true)
		group := ref.ActGroupSize(act, in)
		q, scales := make([]float32, in), make([]float32, in/group)
		var n, ties, groups, blockTies int
		for r := range T {
			xs := x[r*in : (r+1)*in]
			ref.QuantizeActivations(q, scales, xs, act, w.InputScale)
			for i, v := range xs {
				quo := float32(math.Abs(float64(v / scales[i/group])))
				n++
				if act == kernels.ActNVFP4 && isMidE2M1[quo] || act != kernels.ActNVFP4 && isMid[quo] {
					ties++
				}
			}
			if act == kernels.ActNVFP4 {
				for g := range scales {
					amax := format.AbsMax(xs[g*group : (g+1)*group])
					groups++
					if isMid[amax/6*w.InputScale] {
						blockTies++
					}
				}
			}
		}
		t.Logf("%v: %d of %d quotients on midpoints, %d of %d block scales", act, ties, n, blockTies, groups)
		if ties < n*3/4 {
			t.Errorf("%v: only %d of %d quotients x/s on rounding midpoints", act, ties, n)
		}
		if blockTies < groups*3/4 {
			t.Errorf("%v: only %d of %d block scales (amax/6)·G on E4M3 midpoints", act, blockTies, groups)
		}
	}
}

// TestCoverage checks that the case list covers what the package doc
// promises.
func TestCoverage(t *testing.T) {
	combos := map[string]bool{}
	Ts := map[int]bool{}
	for _, c := range casesOf(OpMatMul) {
		parts := strings.Split(c.name, "/")
		combos[parts[0]+"/"+parts[1]] = true
		var T int
		fmt.Sscanf(parts[2], "T=%d", &T)
		Ts[T] = true
	}
	for _, f := range weightFormats {
		for _, a := range actQuants {
			if !combos[fmt.Sprintf("%v/%v", f, a)] {
				t.Errorf("no MatMul case for %v weights with %v activations", f, a)
			}
		}
	}
	for _, T := range batchSizes {
		if !Ts[T] {
			t.Errorf("no MatMul case with T = %d", T)
		}
	}
	for _, op := range allOps {
		seen := map[string]bool{}
		cs := casesOf(op)
		if len(cs) == 0 {
			t.Errorf("no %s cases", op)
		}
		for _, c := range cs {
			if seen[c.name] {
				t.Errorf("duplicate case %s(%s)", op, c.name)
			}
			seen[c.name] = true
		}
	}
}

func TestCheckFilter(t *testing.T) {
	errs := Check(ref.Ops{}, "Add/n=7", "NoSuchOp")
	if len(errs) != 1 || !strings.Contains(errs[0], `no case matches "NoSuchOp"`) {
		t.Errorf("Check(ref, Add/n=7, NoSuchOp) = %q, want one error about NoSuchOp", errs)
	}
}
