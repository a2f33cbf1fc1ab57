// Package quantize turns a BF16 checkpoint into an FP8 or NVFP4 checkpoint in
// the compressed-tensors or NVIDIA ModelOpt layout that vLLM and SGLang load
// unchanged. It reads calibration statistics through calibrate/stats and never
// imports the runtime, so it builds without cgo.
//
// It does not run models and does not choose what to calibrate.
package quantize
