//go:build cgo

package cuda

// #include "driver.h"
import "C"

import (
	"errors"
	"fmt"
)

// ErrNoDevice wraps every error of Open on a machine that cannot run CUDA:
// no driver library, no NVRTC, or no device.
var ErrNoDevice = errors.New("cuda: no usable CUDA device")

// check turns a CUresult into an error naming the call: nil for success.
func check(call string, r C.lb_cures) error {
	if r == 0 {
		return nil
	}
	var name, desc *C.char
	C.lb_cuGetErrorName(r, &name)
	C.lb_cuGetErrorString(r, &desc)
	n, d := "CUDA_ERROR", "unknown error"
	if name != nil {
		n = C.GoString(name)
	}
	if desc != nil {
		d = C.GoString(desc)
	}
	return fmt.Errorf("cuda: %s: %s (%d): %s", call, n, int(r), d)
}

// checkNVRTC turns an nvrtcResult into an error naming the call.
func checkNVRTC(call string, r C.lb_nvrtcres) error {
	if r == 0 {
		return nil
	}
	return fmt.Errorf("cuda: %s: %s (%d)", call, C.GoString(C.lb_nvrtcGetErrorString(r)), int(r))
}
