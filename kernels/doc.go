// Package kernels is lowbit's cgo boundary: C kernels for the CPU and CUDA
// kernels compiled at run time with NVRTC and launched through the CUDA driver
// API, loaded with dlopen so that the binary builds with plain gcc. It is the
// only package tree that imports "C"; built with CGO_ENABLED=0 it reports
// ErrNoCgo instead of computing.
//
// kernels/ref holds the plain Go reference of every op, which the fast kernels
// are tested against.
package kernels
