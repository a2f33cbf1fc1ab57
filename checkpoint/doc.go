// Package checkpoint reads and writes safetensors files and Hugging Face model
// directories: it validates headers strictly, maps tensor data without copying
// it, parses config.json into typed per-architecture configs, and writes
// sharded checkpoints atomically (each shard to a temporary file, synced and
// renamed; the index last), so that a failed or killed write never leaves a
// directory that looks complete.
//
// It holds no quantization math and no model knowledge beyond tensor names and
// config fields.
//
// Why not github.com/nlpodyssey/safetensors: it has no F8_E4M3, F8_E5M2 or
// F8_E8M0 dtypes, which every FP8 and NVFP4 checkpoint uses, and it serializes
// only from tensors held in memory, while a Qwen3-8B checkpoint (16 GB) must
// stream to disk with bounded memory. The format itself is small (an 8-byte
// little-endian header length, a JSON header, a flat data section), so this
// package implements it directly, with stricter validation than the reference
// Rust loader.
package checkpoint
