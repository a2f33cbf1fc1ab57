// Package synth writes deterministic synthetic BF16 checkpoints with the real
// config fields and tensor names of the supported architectures, at a tiny
// test size or at the true shapes of public models, for tests and benchmarks.
//
// Weights are drawn like a trained model's in the ways quantization notices:
// linear weights about N(0, 1/fan_in) with a few heavy outlier input
// channels, norm weights near their identity value, so quantization error is
// not trivial. Large sizes stream to disk with bounded memory.
//
// synth does not train anything: its models produce noise, not language.
package synth
