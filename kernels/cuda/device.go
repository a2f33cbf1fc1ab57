//go:build cgo

package cuda

// #cgo LDFLAGS: -ldl
// #include <stdlib.h>
// #include "driver.h"
import "C"

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync"
	"unsafe"
)

// Options choose the device and where compiled kernels are cached.
type Options struct {
	// Ordinal is the device index (CUDA_VISIBLE_DEVICES applies).
	Ordinal int
	// CacheDir holds compiled kernels; "" is $LOWBIT_CACHE_DIR/cuda, else
	// the user cache directory's lowbit/cuda.
	CacheDir string
	// NVRTC is the NVRTC library to load; "" tries libnvrtc.so and the
	// versioned names.
	NVRTC string
}

// Device is one CUDA device with its primary context and the compiled
// kernels. Its methods are safe for concurrent use (they serialize).
type Device struct {
	mu  sync.Mutex
	dev C.int
	ctx C.lb_handle
	mod C.lb_handle
	fns map[string]C.lb_handle
	// dynShared is the dynamic shared memory each kernel was last allowed
	// (CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES); launch raises it.
	dynShared map[string]int
	Name      string
	Major     int // compute capability
	Minor     int
	SMs       int
	Driver    int // cuDriverGetVersion, e.g. 13000
	NVRTC     [2]int
	Arch      string // the NVRTC target, e.g. sm_90a
	Memory    int64  // total bytes
	Compile   CompileInfo
	pool      scratchPool
	named     map[string]devBuf
	stream    C.lb_handle
	closed    bool
	ltState   ltState   // cuBLASLt, opened on first use (lt.go)
	prof      *profiler // StartProfile's, while one runs (profile.go)
	capturing bool      // inside Capture
	// pdl: launch kernels with programmatic stream serialization (each
	// starts while the one before it finishes, and waits in lb_pdl_wait):
	// on sm_90 and later with cuLaunchKernelEx, unless LOWBIT_PDL=0. On the
	// H200 it took a batch-1 decode step's device time from 4.90 to 4.80 ms
	// (Qwen3-8B) and from 1.18 to 1.00 ms (Qwen3-0.6B): the next kernel's
	// blocks are resident when the one before ends.
	pdl   bool
	trace *tracer // the timeline, with LOWBIT_TRACE=1 (trace.go)
	// gen counts reallocations of the persistent buffers, which captured
	// graphs refer to by address: a graph of an older generation is stale.
	gen int
}

// CompileInfo says how the kernels were obtained.
type CompileInfo struct {
	Cached  bool   // loaded from the cache, nothing compiled
	Path    string // the cache file
	Seconds float64
}

var openMu sync.Mutex

// Open loads the libraries, creates the device's primary context and loads
// the kernels (compiling them on a cold cache). It returns an error
// wrapping ErrNoDevice where CUDA cannot run.
func Open(opts Options) (*Device, error) {
	openMu.Lock()
	defer openMu.Unlock()
	var errbuf [512]C.char
	var cpath *C.char
	if opts.NVRTC != "" {
		cpath = C.CString(opts.NVRTC)
		defer C.free(unsafe.Pointer(cpath))
	}
	switch C.lb_cuda_open(cpath, &errbuf[0], C.size_t(len(errbuf))) {
	case C.LB_CUDA_OK:
	case C.LB_CUDA_NO_DRIVER:
		return nil, fmt.Errorf("%w: the NVIDIA driver library (libcuda.so.1) cannot be loaded: %s", ErrNoDevice, C.GoString(&errbuf[0]))
	case C.LB_CUDA_NO_NVRTC:
		return nil, fmt.Errorf("%w: NVRTC (libnvrtc.so) cannot be loaded: %s; install the CUDA runtime compiler or set its path", ErrNoDevice, C.GoString(&errbuf[0]))
	default:
		return nil, fmt.Errorf("%w: %s", ErrNoDevice, C.GoString(&errbuf[0]))
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := check("cuInit", C.lb_cuInit(0)); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNoDevice, err)
	}
	var n C.int
	if err := check("cuDeviceGetCount", C.lb_cuDeviceGetCount(&n)); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNoDevice, err)
	}
	if opts.Ordinal < 0 || opts.Ordinal >= int(n) {
		return nil, fmt.Errorf("%w: device %d asked for, %d present", ErrNoDevice, opts.Ordinal, int(n))
	}
	d := &Device{fns: map[string]C.lb_handle{}, dynShared: map[string]int{}}
	if err := check("cuDeviceGet", C.lb_cuDeviceGet(&d.dev, C.int(opts.Ordinal))); err != nil {
		return nil, err
	}
	var name [256]C.char
	if err := check("cuDeviceGetName", C.lb_cuDeviceGetName(&name[0], C.int(len(name)), d.dev)); err != nil {
		return nil, err
	}
	d.Name = C.GoString(&name[0])
	attr := func(a int) (int, error) {
		var v C.int
		err := check("cuDeviceGetAttribute", C.lb_cuDeviceGetAttribute(&v, C.int(a), d.dev))
		return int(v), err
	}
	var err error
	// CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR 75, _MINOR 76, MULTIPROCESSOR_COUNT 16.
	if d.Major, err = attr(75); err != nil {
		return nil, err
	}
	if d.Minor, err = attr(76); err != nil {
		return nil, err
	}
	if d.SMs, err = attr(16); err != nil {
		return nil, err
	}
	var total C.size_t
	if err := check("cuDeviceTotalMem", C.lb_cuDeviceTotalMem(&total, d.dev)); err != nil {
		return nil, err
	}
	d.Memory = int64(total)
	var drv C.int
	if err := check("cuDriverGetVersion", C.lb_cuDriverGetVersion(&drv)); err != nil {
		return nil, err
	}
	d.Driver = int(drv)
	var maj, min C.int
	if err := checkNVRTC("nvrtcVersion", C.lb_nvrtcVersion(&maj, &min)); err != nil {
		return nil, err
	}
	d.NVRTC = [2]int{int(maj), int(min)}
	d.Arch = archOf(d.Major, d.Minor)
	if err := check("cuDevicePrimaryCtxRetain", C.lb_cuDevicePrimaryCtxRetain(&d.ctx, d.dev)); err != nil {
		return nil, err
	}
	if err := check("cuCtxSetCurrent", C.lb_cuCtxSetCurrent(d.ctx)); err != nil {
		return nil, err
	}
	// A non-blocking stream of our own: the legacy default stream cannot be
	// captured into a graph.
	if err := check("cuStreamCreate", C.lb_cuStreamCreate(&d.stream, 1)); err != nil {
		C.lb_cuDevicePrimaryCtxRelease(d.dev)
		return nil, err
	}
	cubin, info, err := compileKernels(d, opts.CacheDir)
	if err != nil {
		C.lb_cuDevicePrimaryCtxRelease(d.dev)
		return nil, err
	}
	d.Compile = info
	d.pdl = os.Getenv("LOWBIT_PDL") != "0" && d.Major >= 9 && C.lb_cu_has_launch_ex() != 0
	if err := check("cuModuleLoadData", C.lb_cuModuleLoadData(&d.mod, unsafe.Pointer(unsafe.SliceData(cubin)))); err != nil {
		C.lb_cuDevicePrimaryCtxRelease(d.dev)
		return nil, err
	}
	if tracing() {
		if err := d.startTracer(); err != nil {
			d.Close()
			return nil, err
		}
	}
	return d, nil
}

// archOf returns NVRTC's target for a compute capability: the
// architecture-specific variant (sm_90a) on Hopper, whose wgmma and
// setmaxnreg need it, and the plain one elsewhere.
func archOf(major, minor int) string {
	if major == 9 && minor == 0 {
		return "sm_90a"
	}
	return fmt.Sprintf("sm_%d%d", major, minor)
}

// String describes the device.
func (d *Device) String() string {
	pdl := ""
	if d.pdl {
		pdl = ", programmatic dependent launch"
	}
	return fmt.Sprintf("%s (%s, %d SMs, %.0f GiB, driver %d, NVRTC %d.%d%s)", d.Name, d.Arch, d.SMs,
		float64(d.Memory)/(1<<30), d.Driver, d.NVRTC[0], d.NVRTC[1], pdl)
}

// do runs f on a locked OS thread with the context current, under the
// device's lock.
func (d *Device) do(f func() error) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return errors.New("cuda: the device was closed")
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := check("cuCtxSetCurrent", C.lb_cuCtxSetCurrent(d.ctx)); err != nil {
		return err
	}
	return f()
}

// Close unloads the kernels and releases the context.
func (d *Device) Close() error {
	return d.do(func() error {
		for _, b := range d.allocs() {
			C.lb_cuMemFree(b)
		}
		d.closeLt()
		if d.mod != nil {
			check("cuModuleUnload", C.lb_cuModuleUnload(d.mod))
			d.mod = nil
		}
		if d.stream != nil {
			C.lb_cuStreamDestroy(d.stream)
			d.stream = nil
		}
		d.closed = true
		return check("cuDevicePrimaryCtxRelease", C.lb_cuDevicePrimaryCtxRelease(d.dev))
	})
}

// function returns the kernel called name (locked by the caller).
func (d *Device) function(name string) (C.lb_handle, error) {
	if f, ok := d.fns[name]; ok {
		return f, nil
	}
	cname := C.CString(name)
	defer C.free(unsafe.Pointer(cname))
	var f C.lb_handle
	if err := check("cuModuleGetFunction("+name+")", C.lb_cuModuleGetFunction(&f, d.mod, cname)); err != nil {
		return nil, err
	}
	d.fns[name] = f
	return f, nil
}

// arg is one kernel argument: a device pointer, an int32, a float32 or a
// float64, stored in an 8-byte slot (the driver copies each parameter's
// size from the slot's start, which is its low bytes on little-endian
// machines).
type arg uint64

func ptrArg(p C.lb_devptr) arg { return arg(p) }
func intArg(v int) arg         { return arg(uint32(int32(v))) }
func i64Arg(v int64) arg       { return arg(uint64(v)) }
func f32Arg(v float32) arg     { return arg(*(*uint32)(unsafe.Pointer(&v))) }
func f64Arg(v float64) arg     { return arg(*(*uint64)(unsafe.Pointer(&v))) }

// flagArg passes a bool as the kernels' int 0 or 1.
func flagArg(b bool) arg {
	if b {
		return intArg(1)
	}
	return intArg(0)
}

// launch runs kernel name on grid × block threads with shmem bytes of
// dynamic shared memory (locked by the caller).
func (d *Device) launch(name string, grid, block [3]int, shmem int, args ...arg) error {
	f, err := d.function(name)
	if err != nil {
		return err
	}
	// Without the attribute a kernel may take 48 KB of shared memory, its
	// static share included: a launch of exactly 48 KB of dynamic memory
	// beside static mbarriers is refused (CUDA_ERROR_INVALID_VALUE) unless
	// it is raised. So raise it for every size past the last one allowed.
	if shmem > d.dynShared[name] {
		// CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8
		if err := check("cuFuncSetAttribute("+name+")", C.lb_cuFuncSetAttribute(f, 8, C.int(shmem))); err != nil {
			return err
		}
		d.dynShared[name] = shmem
	}
	slots := make([]C.uint64_t, len(args))
	for i, a := range args {
		slots[i] = C.uint64_t(a)
	}
	var p *C.uint64_t
	if len(slots) > 0 {
		p = &slots[0]
	}
	d.traceLaunch(name)
	return d.timed(name, func() error {
		if d.pdl {
			return check("cuLaunchKernelEx("+name+")", C.lb_cu_launch_pdl(f, C.uint(grid[0]), C.uint(grid[1]), C.uint(grid[2]),
				C.uint(block[0]), C.uint(block[1]), C.uint(block[2]), C.uint(shmem), d.stream, p, C.int(len(args))))
		}
		return check("cuLaunchKernel("+name+")", C.lb_cu_launch(f, C.uint(grid[0]), C.uint(grid[1]), C.uint(grid[2]),
			C.uint(block[0]), C.uint(block[1]), C.uint(block[2]), C.uint(shmem), d.stream, p, C.int(len(args))))
	})
}

// sync waits for the device's work and reports an asynchronous error of a
// kernel (locked by the caller).
func (d *Device) sync(what string) error {
	return check("cuStreamSynchronize after "+what, C.lb_cuStreamSynchronize(d.stream))
}
