//go:build cgo

package cuda

// #include "driver.h"
import "C"

import (
	"fmt"
	"unsafe"
)

// devBuf is a device allocation.
type devBuf struct {
	ptr  C.lb_devptr
	size int
}

// scratchPool hands out device buffers for one op at a time: reset at the
// start of an op, then each get returns the next buffer, reallocated only
// when an op needs more than any op before it. Plain cuMemAlloc, no managed
// memory.
type scratchPool struct {
	bufs []devBuf
	next int
}

// scratch returns a device buffer of at least n bytes for the current op
// (locked by the caller).
func (d *Device) scratch(n int) (C.lb_devptr, error) {
	p := &d.pool
	if n <= 0 {
		n = 1
	}
	if p.next < len(p.bufs) && p.bufs[p.next].size >= n {
		p.next++
		return p.bufs[p.next-1].ptr, nil
	}
	var ptr C.lb_devptr
	size := max(n, 1<<16)
	if err := check(fmt.Sprintf("cuMemAlloc(%d)", size), C.lb_cuMemAlloc(&ptr, C.size_t(size))); err != nil {
		return 0, err
	}
	if p.next < len(p.bufs) {
		C.lb_cuMemFree(p.bufs[p.next].ptr)
		p.bufs[p.next] = devBuf{ptr, size}
	} else {
		p.bufs = append(p.bufs, devBuf{ptr, size})
	}
	p.next++
	return ptr, nil
}

func (d *Device) allocs() []C.lb_devptr {
	var out []C.lb_devptr
	for _, b := range d.pool.bufs {
		out = append(out, b.ptr)
	}
	for _, b := range d.named {
		out = append(out, b.ptr)
	}
	d.pool.bufs, d.named = nil, nil
	return out
}

// upload copies n bytes from host memory at src into a fresh scratch
// buffer and returns it (locked by the caller).
func (d *Device) upload(src unsafe.Pointer, n int) (C.lb_devptr, error) {
	p, err := d.scratch(n)
	if err != nil || n == 0 {
		return p, err
	}
	return p, check("cuMemcpyHtoDAsync", C.lb_cuMemcpyHtoDAsync(p, src, C.size_t(n), d.stream))
}

// download copies n bytes of device memory at src to host memory at dst
// (locked by the caller).
func (d *Device) download(dst unsafe.Pointer, src C.lb_devptr, n int) error {
	if n == 0 {
		return nil
	}
	return check("cuMemcpyDtoHAsync", C.lb_cuMemcpyDtoHAsync(dst, src, C.size_t(n), d.stream))
}

// poison fills n bytes at p with 0xFF (a float32 NaN), so that an element a
// kernel forgets to write shows up (locked by the caller).
func (d *Device) poison(p C.lb_devptr, n int) error {
	return check("cuMemsetD8Async", C.lb_cuMemsetD8Async(p, 0xFF, C.size_t(n), d.stream))
}

// persistent returns the device's buffer called name with at least n
// bytes, growing it when needed (locked by the caller). Kernels of one Run
// execute in launch order on one stream, so successive launches may share
// such a buffer (attention scores, quantized activations) without growing
// the scratch pool with every launch.
func (d *Device) persistent(name string, n int) (Buf, error) {
	if d.named == nil {
		d.named = map[string]devBuf{}
	}
	b := d.named[name]
	if b.size >= n && b.ptr != 0 {
		return Buf{b.ptr, n}, nil
	}
	if b.ptr != 0 {
		// Wait for the work that may still use it.
		if err := d.sync("growing " + name); err != nil {
			return Buf{}, err
		}
		if err := check("cuMemFree", C.lb_cuMemFree(b.ptr)); err != nil {
			return Buf{}, err
		}
	}
	d.gen++
	size := max(n, 2*b.size, 1<<20)
	var ptr C.lb_devptr
	if err := check(fmt.Sprintf("cuMemAlloc(%d)", size), C.lb_cuMemAlloc(&ptr, C.size_t(size))); err != nil {
		delete(d.named, name)
		return Buf{}, err
	}
	d.named[name] = devBuf{ptr, size}
	return Buf{ptr, n}, nil
}

// persistentZeroed is persistent for a buffer that must hold zeros when a
// kernel first sees it (counters the kernels return to zero themselves):
// a new allocation is cleared on the stream before any later launch.
func (d *Device) persistentZeroed(name string, n int) (Buf, error) {
	before := d.named[name].ptr
	b, err := d.persistent(name, n)
	if err != nil || b.ptr == before {
		return b, err
	}
	return b, check("cuMemsetD8Async", C.lb_cuMemsetD8Async(b.ptr, 0, C.size_t(d.named[name].size), d.stream))
}
