//go:build cgo

package cuda

// #include <stdlib.h>
// #include "driver.h"
import "C"

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
	"unsafe"
)

// compileOptions are NVRTC's options besides the architecture. fmad stays
// on (NVRTC's default): the contract's float32 tolerances allow contracted
// multiply-adds, and the activation quantizers have none to contract.
var compileOptions = []string{"--std=c++17"}

// compileKernels returns the cubin of Source for d, from the cache or
// compiled (then cached). The cache key covers everything the cubin depends
// on: the source, the options, the architecture, NVRTC's and the driver's
// versions.
func compileKernels(d *Device, cacheDir string) ([]byte, CompileInfo, error) {
	src, err := Source()
	if err != nil {
		return nil, CompileInfo{}, err
	}
	opts := append([]string{"--gpu-architecture=" + d.Arch}, compileOptions...)
	if tracing() {
		opts = append(opts, "-DLB_TRACE") // a timeline: trace.go
	}
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%s\x00nvrtc %d.%d\x00driver %d\x00", src, strings.Join(opts, " "), d.NVRTC[0], d.NVRTC[1], d.Driver)
	key := hex.EncodeToString(h.Sum(nil))[:32]
	dir, err := cacheDirOf(cacheDir)
	if err != nil {
		return nil, CompileInfo{}, err
	}
	path := filepath.Join(dir, key+"."+d.Arch+".cubin")
	if b, err := os.ReadFile(path); err == nil && len(b) > 0 {
		return b, CompileInfo{Cached: true, Path: path}, nil
	}
	start := time.Now()
	cubin, err := nvrtcCompile(src, opts)
	if err != nil {
		return nil, CompileInfo{}, err
	}
	info := CompileInfo{Path: path, Seconds: time.Since(start).Seconds()}
	// A cache that cannot be written costs the next start a compile, not
	// this one its kernels.
	if err := os.MkdirAll(dir, 0o755); err == nil {
		if tmp, err := os.CreateTemp(dir, ".tmp-*.cubin"); err == nil {
			_, werr := tmp.Write(cubin)
			cerr := tmp.Close()
			if werr == nil && cerr == nil {
				os.Rename(tmp.Name(), path)
			} else {
				os.Remove(tmp.Name())
			}
		}
	}
	return cubin, info, nil
}

func cacheDirOf(dir string) (string, error) {
	if dir != "" {
		return dir, nil
	}
	if d := os.Getenv("LOWBIT_CACHE_DIR"); d != "" {
		return filepath.Join(d, "cuda"), nil
	}
	d, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("cuda: no cache directory for compiled kernels (set LOWBIT_CACHE_DIR): %w", err)
	}
	return filepath.Join(d, "lowbit", "cuda"), nil
}

// nvrtcCompile compiles src with opts and returns the cubin; a compile
// error carries NVRTC's log.
func nvrtcCompile(src string, opts []string) ([]byte, error) {
	csrc, cname := C.CString(src), C.CString("lowbit_kernels.cu")
	defer C.free(unsafe.Pointer(csrc))
	defer C.free(unsafe.Pointer(cname))
	var prog C.lb_handle
	if err := checkNVRTC("nvrtcCreateProgram", C.lb_nvrtcCreateProgram(&prog, csrc, cname)); err != nil {
		return nil, err
	}
	defer C.lb_nvrtcDestroyProgram(&prog)
	copts := make([]*C.char, len(opts))
	for i, o := range opts {
		copts[i] = C.CString(o)
		defer C.free(unsafe.Pointer(copts[i]))
	}
	res := C.lb_nvrtcCompileProgram(prog, C.int(len(copts)), &copts[0])
	if res != 0 {
		var n C.size_t
		C.lb_nvrtcGetProgramLogSize(prog, &n)
		log := make([]byte, int(n)+1)
		C.lb_nvrtcGetProgramLog(prog, (*C.char)(unsafe.Pointer(&log[0])))
		return nil, fmt.Errorf("%w\n%s", checkNVRTC("nvrtcCompileProgram", res), strings.TrimRight(string(log), "\x00\n"))
	}
	var n C.size_t
	if err := checkNVRTC("nvrtcGetCUBINSize", C.lb_nvrtcGetCUBINSize(prog, &n)); err != nil {
		return nil, err
	}
	cubin := make([]byte, int(n))
	if err := checkNVRTC("nvrtcGetCUBIN", C.lb_nvrtcGetCUBIN(prog, (*C.char)(unsafe.Pointer(&cubin[0])))); err != nil {
		return nil, err
	}
	return cubin, nil
}
