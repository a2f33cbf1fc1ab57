//go:build !cgo

package kernels

import "runtime"

// Available reports whether this binary can run kernels: ErrNoCgo, since it
// was built without cgo.
func Available() error { return ErrNoCgo }

// OnlineCPUs returns the number of CPUs the Go runtime sees.
func OnlineCPUs() int { return runtime.NumCPU() }
