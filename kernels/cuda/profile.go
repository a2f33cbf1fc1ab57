//go:build cgo

package cuda

// #include "driver.h"
import "C"

import (
	"cmp"
	"slices"
	"time"
)

// KernelTime is one kernel's share of a profiled stretch: its launches and
// their summed device time.
type KernelTime struct {
	Name     string
	Launches int
	Total    time.Duration
}

// profiler times every launch between StartProfile and StopProfile by a
// pair of events around it, waiting for each: launches run one at a time,
// so the sum is a breakdown, not the stretch's wall time.
type profiler struct {
	start, end C.lb_handle
	times      map[string]*KernelTime
}

// StartProfile times each kernel and cuBLASLt call launched from now on
// (not those of captured graphs: their launches go into the graph; each
// replay of a graph is timed whole, as GraphReplay).
func (d *Device) StartProfile() error {
	return d.do(func() error {
		if d.prof != nil {
			return nil
		}
		p := &profiler{times: map[string]*KernelTime{}}
		if err := check("cuEventCreate", C.lb_cuEventCreate(&p.start, 0)); err != nil {
			return err
		}
		if err := check("cuEventCreate", C.lb_cuEventCreate(&p.end, 0)); err != nil {
			C.lb_cuEventDestroy(p.start)
			return err
		}
		d.prof = p
		return nil
	})
}

// StopProfile ends the profile and returns each kernel's time, the
// longest first.
func (d *Device) StopProfile() []KernelTime {
	var out []KernelTime
	d.do(func() error {
		p := d.prof
		if p == nil {
			return nil
		}
		d.prof = nil
		C.lb_cuEventDestroy(p.start)
		C.lb_cuEventDestroy(p.end)
		for _, t := range p.times {
			out = append(out, *t)
		}
		return nil
	})
	slices.SortFunc(out, func(a, b KernelTime) int { return cmp.Compare(b.Total, a.Total) })
	return out
}

// timed runs launch, timing it under name while a profile runs and no
// capture does (locked by the caller).
func (d *Device) timed(name string, launch func() error) error {
	p := d.prof
	if p == nil || d.capturing {
		return launch()
	}
	if err := check("cuEventRecord", C.lb_cuEventRecord(p.start, d.stream)); err != nil {
		return err
	}
	if err := launch(); err != nil {
		return err
	}
	if err := check("cuEventRecord", C.lb_cuEventRecord(p.end, d.stream)); err != nil {
		return err
	}
	if err := check("cuEventSynchronize", C.lb_cuEventSynchronize(p.end)); err != nil {
		return err
	}
	var ms C.float
	if err := check("cuEventElapsedTime", C.lb_cuEventElapsedTime(&ms, p.start, p.end)); err != nil {
		return err
	}
	t := p.times[name]
	if t == nil {
		t = &KernelTime{Name: name}
		p.times[name] = t
	}
	t.Launches++
	t.Total += time.Duration(float64(ms) * 1e6)
	return nil
}

// KernelInfo is what the compiled kernel uses per thread and block, as
// the driver reports it: spills show as local memory.
type KernelInfo struct {
	Registers, LocalBytes, StaticShared int
}

// KernelInfo returns kernel name's register count, local memory (spills
// and stack) and static shared memory, compiled for this device by NVRTC
// (which reports none of it itself).
func (d *Device) KernelInfo(name string) (KernelInfo, error) {
	var ki KernelInfo
	err := d.do(func() error {
		f, err := d.function(name)
		if err != nil {
			return err
		}
		// CU_FUNC_ATTRIBUTE_NUM_REGS = 4, LOCAL_SIZE_BYTES = 3, SHARED_SIZE_BYTES = 1.
		for _, a := range []struct {
			attr int
			dst  *int
		}{{4, &ki.Registers}, {3, &ki.LocalBytes}, {1, &ki.StaticShared}} {
			var v C.int
			if err := check("cuFuncGetAttribute", C.lb_cuFuncGetAttribute(&v, C.int(a.attr), f)); err != nil {
				return err
			}
			*a.dst = int(v)
		}
		return nil
	})
	return ki, err
}
