// Package calibrate runs calibration prompts through lowbit's runtime and
// records what quantization needs: activation ranges, KV-cache ranges and GPTQ
// Hessians. Its results are written in the format of calibrate/stats.
//
// It never writes checkpoints and never picks number formats.
//
// # What is recorded
//
// Run feeds each sample (a token sequence, one prefill from position 0)
// through a BF16 model and watches the activations through
// runtime.ForwardOptions.Observe. Per decoder layer N:
//
//   - the input of q_proj, k_proj and v_proj (RMSNorm(x)·input_layernorm),
//     of o_proj (the attention output), of gate_proj and up_proj
//     (RMSNorm(x)·post_attention_layernorm) and of down_proj (silu(g)·u):
//     max |x| per channel, the mean of |x| per channel (AWQ's x_mean, summed
//     in float64) and, with Options.Hessian, Σ x xᵀ over every token
//     (float64, written as float32; stats documents how GPTQ uses it).
//     Modules that read one activation get identical statistics.
//   - model.layers.N.self_attn: max |k| per KV head and max |v|, over the
//     keys after k_norm and RoPE and the values, as they are written to the
//     KV cache: what compressed-tensors' k/v observers and vLLM's k_scale
//     and v_scale describe.
//
// Maxima are llm-compressor's static_minmax (a running max over all
// samples), which its docs recommend for static FP8 and NVFP4 activations
// and KV caches. A NaN or infinite activation stops the run with an error
// naming the sample, layer, point, token and channel.
//
// The runtime runs dense Qwen3 and Llama models; MoE checkpoints (where
// every expert would have to see every token) are rejected by runtime.Load.
//
// # Memory, passes and models larger than RAM
//
// The runtime maps the checkpoint read-only and reads weights in place:
// they are clean, file-backed pages, which the kernel drops under memory
// pressure and reads again when a later layer or sample needs them, so the
// weights never have to fit in RAM at once; only the layer being computed
// must be resident. What calibration itself holds is one sample's
// activations and KV cache (about seq_len × (hidden + intermediate + 2 ×
// layers × kv_heads × head_dim) floats) and the accumulators. Without
// Hessians those are a few floats per channel. Hessians cost 8·n² bytes per
// activation of width n (about 1.6 GB per Qwen3-8B layer; plus one float32
// scratch for the widest, where each sample's Σ x xᵀ is formed before it is
// added in float64), so Run splits the layers into passes whose Hessians
// fit Options.HessianBudget and runs the samples once per pass, each pass
// keeping only its own layers' statistics. Every pass runs the whole forward (the runtime cannot stop
// after a layer), so P passes cost P times the compute of one.
//
// # Resuming
//
// A run keeps its state in a work directory (the output path + ".partial"):
// a manifest naming the model (config.json's SHA-256), the samples' SHA-256
// and the settings; one finished statistics file per finished pass; and the
// running pass's accumulators, saved every Options.CheckpointEvery and when
// the context is cancelled. Run with the same arguments resumes: finished
// passes are skipped and the running one continues after its last saved
// sample. Accumulators are saved exactly (float64 sums as float64) and
// updated in a fixed order, so a resumed run writes the same bytes as one
// that was never interrupted (tested). The work directory is removed once
// the statistics file is written.
//
// # Data
//
// ReadDocuments reads the built-in set (short documents written for lowbit,
// see data/PROVENANCE.md), a .jsonl file with a "text" per line, or plain
// text; Samples tokenizes them into samples of at most seq_len tokens.
package calibrate
