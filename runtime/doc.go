// Package runtime is lowbit's inference engine as a library: model binding by
// Hugging Face tensor names, the forward passes of the supported
// architectures, the KV cache, sampling and the batch scheduler. It computes
// through the kernels package.
//
// It knows nothing about calibration or KL.
package runtime
