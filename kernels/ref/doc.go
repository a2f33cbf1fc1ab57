// Package ref holds the plain, obviously correct Go reference of every kernel
// op. It is slow on purpose: the C and CUDA kernels are tested against it.
package ref
