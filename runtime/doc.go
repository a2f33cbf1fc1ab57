// Package runtime is lowbit's inference engine as a library: model binding by
// Hugging Face tensor names, the forward passes of the supported
// architectures, the KV cache, sampling and the batch scheduler. It computes
// through the kernels package.
//
// It knows nothing about calibration or KL.
//
// # Architectures
//
// Load binds the dense Qwen3 decoder (model_type qwen3) and Llama (llama,
// which MiniCPM5 uses): the same forward, except that Llama has no per-head
// q_norm/k_norm. qwen3_moe, qwen3_5 and qwen3_5_moe checkpoints are
// rejected with ErrUnsupported. Weights are BF16 or quantized with one of
// the schemes vLLM loads from compressed-tensors, ModelOpt or vLLM's fp8
// configs (linear.go): FP8_DYNAMIC (kernels.WeightFP8Channel with
// ActFP8Token), FP8 (WeightFP8Tensor, ActFP8Tensor with the stored
// input_scale), FP8_BLOCK (WeightFP8Block, ActFP8Group128), NVFP4A16
// (WeightNVFP4, ActNone) and NVFP4 (WeightNVFP4, ActNVFP4 with G =
// input_global_scale, or 1/input_scale for ModelOpt).
//
// # Numerics
//
// The forward of T new tokens at positions p0..p0+T-1 is the fp32 forward of
// transformers' Qwen3ForCausalLM / LlamaForCausalLM run on the checkpoint's
// weights, with the linear layers' quantization applied as vLLM applies it:
//
//   - Activations are float32 throughout, with no rounding to BF16 between
//     ops: the reference is transformers in float32, not vLLM's BF16 graph.
//     Weights are used as stored (BF16 widened exactly, FP8/NVFP4
//     dequantized per the kernels.Weight contract), so a BF16 checkpoint
//     matches transformers loaded with dtype=float32 up to float32 rounding
//     (ops are evaluated in other orders; RoPE angles are computed in
//     float64 where transformers uses float32 inv_freq).
//   - x = embed_tokens[ids], [T, hidden].
//   - Per layer: h = RMSNorm(x)·input_layernorm, RMSNorm in float32 (the
//     mean of squares accumulated in float32 or wider) with eps =
//     rms_norm_eps; q = h·Wqᵀ [T, heads, head_dim], k, v = h·Wkᵀ, h·Wvᵀ
//     [T, kv_heads, head_dim]; Qwen3 only: q_norm and k_norm, the same
//     RMSNorm over head_dim for every head, before RoPE; NeoX RoPE
//     (rotate_half pairing j with j+r/2) over the first r = head_dim ×
//     partial_rotary_factor dims, inv_freq[j] = rope_theta^(-2j/r), angles
//     in float64 and their sin/cos rounded to float32; causal GQA attention
//     over the cache (query head h reads kv head h/(heads/kv_heads)), scale
//     head_dim^-0.5, softmax max and sum in float32 or wider; x += o·Woᵀ;
//     h = RMSNorm(x)·post_attention_layernorm; x += (silu(h·Wgateᵀ) ⊙
//     h·Wupᵀ)·Wdownᵀ (SwiGLU). No biases.
//   - logits = RMSNorm(x)·norm · lm_headᵀ (the embedding when tied), [T, vocab].
//   - Quantized linear layers quantize their input activations as the
//     kernels.ActQuant contract states (per token, per 128-group or per
//     16-group with the stored global scale), then accumulate in float32.
//
// Every op is row-independent (kernels.Ops promises batch invariance), so
// row t of the logits does not depend on T: a prefill of N tokens followed
// by M single-token decodes gives the logits of one prefill of N+M tokens.
//
// # KV cache and batches
//
// Model.ForwardBatch runs the new tokens of several sequences in one pass
// over the weights, over a KVPool: per layer, K and V pools of fixed-size
// blocks in float32, BF16 or FP8 E4M3 (with the checkpoint's k_scale and
// v_scale), each sequence naming its blocks in a block table. Keys and
// values are rounded to the pool's dtype as they are written. Every op is
// row-wise or reads only the sequence's own cache, so a sequence's logits
// are bit-identical whatever else is in the batch, however its tokens were
// chunked and whichever blocks it got (tested). Which sequence holds which
// block is runtime/engine's business.
//
// A Sequence is the simple case: a private float32 pool of one block as
// long as the sequence, grown by doubling up to its limit
// (max_position_embeddings unless smaller); a Forward past the limit fails
// with ErrSequenceFull.
//
// An Executor owns a pool and runs batches on it: a KVPool on the CPU, or
// a CUDAExecutor, which keeps the weights, the pool and the activations on
// a GPU and launches the CUDA kernels in the same order, with the same
// float32 numerics (decode steps replayed from CUDA graphs), except that
// its attention over an FP8 cache applies k_scale and v_scale to the
// scores and the output rather than to each key and value, as vLLM does: a
// few float32 ulps apart.
//
// # Sampling and generation
//
// A Sampler turns a row of logits into a token: greedy (argmax, the lowest
// id among equal maxima) at temperature 0; otherwise logits/temperature,
// then top-k, then top-p over the renormalized top-k, then min-p, and a
// draw (softmax in float64) from a PCG generator seeded per request, so a
// seed reproduces its tokens. Model.Generate runs a prompt and samples
// until a stop id; ReadGenerationConfig gives a checkpoint's defaults and
// stop ids as vLLM reads generation_config.json.
//
// # Memory
//
// Linear weights stay views of the mapped checkpoint; FP8 and NVFP4 scales
// are decoded to float32 once at load (NVFP4 block scales add 4 bytes per
// 16 weights); norm gains are float32 copies. The embedding stays a BF16
// view and the rows of the tokens of each forward are converted on the fly,
// rather than holding a float32 copy twice its size (2.5 GB for Qwen3-8B).
//
// LoadWith with LoadOptions.NoMmap (lowbit's --no-mmap, after llama.cpp's)
// trades that zero-copy load for decode speed on the CPU: the linear
// weights, their scales and the embedding are copied into one anonymous
// buffer, 2 MiB aligned and advised to use transparent huge pages, and the
// checkpoint is unmapped and dropped from the page cache. The kernels read
// the same bytes, so the logits are bit-identical; a decode step streams
// its weights through huge pages' TLB entries instead of 4 KiB file pages
// (BENCHMARKS.md measures the difference). The cost is the copy at load,
// and memory that is private to the process and not evictable, where a
// mapping's clean pages are shared and reclaimable.
package runtime
