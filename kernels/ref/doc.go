// Package ref holds the plain, obviously correct Go reference of every kernel
// op. It is slow on purpose: the C and CUDA kernels are tested against it.
//
// Ops implements kernels.Ops by following the contract's text literally,
// with one deliberate difference: where the contract lets the fast kernels
// accumulate in float32, ref accumulates in float64 (products of two float32
// values are exact there) and rounds each result to float32 once, so it is
// the more accurate side. Exponentials, logarithms, square roots and the
// RoPE rotation are evaluated in float64 as well. What the contract pins to
// float32 operations ref computes exactly so: weight dequantization (Dequantize,
// element by element with the format package) and activation quantization
// (QuantizeActivations: the scales, the quotients x/s and the E4M3 and E2M1
// codes), and RoPE's cosines and sines, rounded to float32 before use.
//
// kernels/kerneltest compares any implementation with ref within tolerances
// derived from float32 accumulation; its package doc lists them.
//
// ref allocates on every call and panics on inconsistent shapes or an
// invalid Weight (programming errors); it is safe for concurrent use.
package ref
