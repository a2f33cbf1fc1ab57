// Package calibrate runs calibration prompts through lowbit's runtime and
// records what quantization needs: activation ranges, KV-cache ranges and GPTQ
// Hessians. Its results are written in the format of calibrate/stats.
//
// It never writes checkpoints and never picks number formats.
package calibrate
