//go:build cgo

package cuda

// #include <stdlib.h>
// #include "driver.h"
import "C"

import (
	"fmt"
	"os"
	"time"
	"unsafe"
)

// traceCap is LB_TRACE_CAP of common.cuh: the kernel launches a timeline
// holds (later ones wrap around).
const traceCap = 8192

// tracing says whether the kernels are compiled to record a timeline
// (LOWBIT_TRACE=1): block (0, 0, 0) of each kernel writes the global timer
// in lb_pdl_wait. Off by default, since the check costs the first block a
// load in every kernel.
func tracing() bool { return os.Getenv("LOWBIT_TRACE") == "1" }

// tracer holds a device's timeline: its buffer, and the kernels launched
// since TraceStart in stream order (graph replays add their captured
// kernels), which the records follow.
type tracer struct {
	buf      Buf
	active   bool // between TraceStart and TraceStop: names grows
	names    []string
	captured []string // the kernels of the capture under way
}

// startTracer points the module's lb_trace at a fresh buffer (at Open,
// with tracing on).
func (d *Device) startTracer() error {
	buf, err := d.persistent("trace", 16*traceCap)
	if err != nil {
		return err
	}
	p, err := d.global("lb_trace")
	if err != nil {
		return err
	}
	ptr := uint64(buf.ptr)
	if err := check("cuMemcpyHtoD(lb_trace)", C.lb_cuMemcpyHtoD(p, unsafe.Pointer(&ptr), 8)); err != nil {
		return err
	}
	d.trace = &tracer{buf: buf}
	return nil
}

// global returns the address of the module's variable called name.
func (d *Device) global(name string) (C.lb_devptr, error) {
	cs := C.CString(name)
	defer C.free(unsafe.Pointer(cs))
	var p C.lb_devptr
	var n C.size_t
	return p, check("cuModuleGetGlobal("+name+")", C.lb_cuModuleGetGlobal(&p, &n, d.mod, cs))
}

// traceLaunch notes a launch of the kernel called name (locked by the
// caller).
func (d *Device) traceLaunch(name string) {
	if d.trace == nil {
		return
	}
	if d.capturing {
		d.trace.captured = append(d.trace.captured, name)
	} else if d.trace.active {
		d.trace.names = append(d.trace.names, name)
	}
}

// traceReplay notes a replay of g's kernels (locked by the caller).
func (d *Device) traceReplay(g *Graph) {
	if d.trace != nil && d.trace.active {
		d.trace.names = append(d.trace.names, g.kernels...)
	}
}

// TraceSpan is one kernel of a timeline: when its first block reached
// lb_pdl_wait and when the wait released it (the kernel before it had
// ended), from the first kernel's release.
type TraceSpan struct {
	Name              string
	Reached, Released time.Duration
}

// TraceStart begins a timeline of the launches that follow; it fails
// unless the device was opened with LOWBIT_TRACE=1.
func (d *Device) TraceStart() error {
	return d.do(func() error {
		if d.trace == nil {
			return fmt.Errorf("cuda: no timeline: open the device with LOWBIT_TRACE=1")
		}
		p, err := d.global("lb_trace_n")
		if err != nil {
			return err
		}
		if err := d.sync("a timeline's start"); err != nil {
			return err
		}
		d.trace.names, d.trace.active = nil, true
		return check("cuMemsetD8(lb_trace_n)", C.lb_cuMemsetD8(p, 0, 4))
	})
}

// TraceStop waits for the launches since TraceStart and returns their
// timeline, in launch order.
func (d *Device) TraceStop() ([]TraceSpan, error) {
	var spans []TraceSpan
	err := d.do(func() error {
		if d.trace == nil {
			return fmt.Errorf("cuda: no timeline: open the device with LOWBIT_TRACE=1")
		}
		d.trace.active = false
		if err := d.sync("a timeline"); err != nil {
			return err
		}
		n := min(len(d.trace.names), traceCap)
		if n == 0 {
			return nil
		}
		raw := make([]uint64, 2*n)
		if err := check("cuMemcpyDtoH(trace)", C.lb_cuMemcpyDtoH(unsafe.Pointer(&raw[0]), d.trace.buf.ptr, C.size_t(16*n))); err != nil {
			return err
		}
		t0 := raw[1]
		for i := range n {
			spans = append(spans, TraceSpan{d.trace.names[i], time.Duration(int64(raw[2*i] - t0)), time.Duration(int64(raw[2*i+1] - t0))})
		}
		return nil
	})
	return spans, err
}
