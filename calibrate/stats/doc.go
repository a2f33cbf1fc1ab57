// Package stats defines the calibration statistics file that calibrate writes
// and quantize reads. It is a cgo-free leaf, so that quantize never imports the
// runtime.
//
// # File format, version 1
//
// A statistics file is one safetensors file, so it streams, maps and
// inspects (lowbit inspect, the safetensors Python package) like any
// checkpoint shard. Every value is little-endian.
//
// Its "__metadata__" holds, all as strings:
//
//	lowbit_stats_version  "1"
//	model_type            config.json model_type of the calibrated model ("qwen3")
//	config_sha256         lowercase hex SHA-256 of that config.json's bytes, as read
//	samples               number of calibration sequences (decimal, >= 1)
//	tokens                number of tokens run through the model (>= 1, <= samples*seq_len)
//	seq_len               the longest sequence, in tokens (>= 1)
//	dataset               where the prompts came from ("HuggingFaceH4/ultrachat_200k:train_sft")
//	created_by            the tool and version that wrote the file ("lowbit dev")
//
// Other metadata keys are ignored. A file whose version is not "1" is
// rejected (ErrVersion): any new tensor kind or changed meaning needs a new
// version.
//
// Tensors are named after Hugging Face module names. Per quantized linear
// module M (for example "model.layers.0.self_attn.q_proj"; for MoE models
// each expert, "model.layers.0.mlp.experts.3.gate_proj", since every expert
// sees every token during calibration), with in = M's in_features:
//
//	M.input_absmax          F32 [1]       max |x| over every input element of every token
//	M.input_channel_absmax  F32 [in]      max |x[c]| over tokens, per input channel
//	M.input_mean_abs        F32 [in]      mean |x[c]| over tokens (AWQ's x_mean)
//	M.hessian               F32 [in, in]  optional: sum over tokens of x xᵀ
//	M.hessian_tokens        I64 [1]       the number of tokens summed; present iff M.hessian is
//
// The Hessian is the plain sum, accumulated in float64 and rounded once to
// float32: divide by hessian_tokens for the mean. GPTQ's 2·XXᵀ/n scaling
// (llm-compressor divides by the number of sequences) multiplies H by a
// constant, which leaves GPTQ's result unchanged because its damping is
// relative to mean(diag H). Hessians are written after every other tensor,
// so that the small statistics sit together at the start of the file.
//
// Per attention module A ("model.layers.N.self_attn"), over the keys and
// values handed to the KV cache (keys after k_norm and RoPE):
//
//	A.k_absmax       F32 [1]         max |k|
//	A.v_absmax       F32 [1]         max |v|
//	A.k_head_absmax  F32 [kv_heads]  optional: max |k| per KV head
//
// A module has either linear or attention statistics, never both. Any
// other tensor name is an error. Values must be finite; maxima and means
// must be non-negative, each channel's mean |x| at most its max |x|, and a
// Hessian's diagonal non-negative.
//
// # Use
//
// Write streams a file with bounded memory: a Hessian is pulled one row at a
// time from a HessianRows function, so a 12288-wide one (600 MB in F32) never
// needs a second copy. The file is written to a temporary name and renamed
// into place. Open maps a file read-only, validates its header, metadata and
// every statistic except the Hessians' values, and returns a *Stats whose
// accessors copy the small statistics out and return Hessians as views of
// the mapping (validated on first access).
package stats
