// Package bench replays the arenas' traffic against any OpenAI-compatible
// server and measures it as vLLM's benchmark client (`vllm bench serve`)
// does, then scores one run against another by the arenas' rules.
//
// # Requests
//
// Prompts are token-exact and made as vLLM's random dataset makes them:
// consecutive ids of the vocabulary without added and special tokens, from
// a random offset, decoded to text and re-encoded (truncated or extended
// with random ids, up to ten rounds) until the text encodes to the target
// length with the real tokenizer (Qwen3's by default). They are sent as
// text, streamed with stream_options.include_usage, with vLLM's payloads:
// /v1/completions {model, prompt, repetition_penalty 1.0, max_tokens,
// logprobs null, stream}, and /v1/chat/completions {model, messages (the
// user turn as [{"type": "text", "text": ...}]), max_completion_tokens,
// stream}; ignore_eos is added where the workload fixes output lengths. No
// temperature is sent, so the server's default sampling applies, as with
// vLLM's client. The random stream is Go's PCG seeded by --seed and the
// phase, so every run of a spec sends the same prompts (not the same ones
// as vLLM's numpy stream would).
//
// # Metrics
//
// As vLLM's calculate_metrics: TTFT is the time from sending to the first
// SSE message with a non-empty choices list; ITL the gaps between later
// such messages (per message, not per token); end-to-end latency the time
// to the last such message (for chat, to the last data message, the usage
// chunk included); output tokens are usage.completion_tokens, or the
// generated text re-tokenized when the server sends no usage; TPOT is
// (latency − TTFT)/(output − 1) for requests with more than one output
// token; throughputs are over the phase's wall time from its first dispatch
// to its last completion, with input tokens by the client's count.
// Percentiles are numpy's linear interpolation, standard deviations
// numpy's population ones. The peaks are vLLM's one-second buckets, beside
// the exact peak of requests in flight. SSE parsing follows vLLM's client
// (every "data:" line, with or without a space; comments and other fields
// skipped). Where this package departs from it, it counts more failures:
// an error object mid-stream ({"error": ...}, which vLLM's client passes
// over) fails the request, as does a chat stream that never carried a
// choice.
//
// # Workloads
//
// Every workload is a list of phases run one after another, each measured
// on its own. --scale F multiplies every count and length (never below 1;
// agent sessions keep at least two turns), so that a CPU server can run a
// miniature of the same traffic.
//
// LowBArena (its seed text's table): serve, 64 prompts of 8,192 tokens, 32
// in flight, 512 generated; interactive, 32 prompts of 1,024, one at a
// time, 256 generated; long_context, 128 prompts of 16,000, 64 in flight,
// 256 generated. All requests are sent at once behind the concurrency cap
// and end at EOS, since the arena gates on generated length.
//
// FlagOS: the 4k scenario [4096,1024,64,256] and the 16k scenario
// [16384,1024,64,128], read as [input tokens, output tokens, concurrency,
// prompts] of vLLM's random dataset, with fixed output lengths
// (ignore_eos), since the score is total tokens per second.
//
// random: vLLM's random dataset with its flags (input and output length,
// range ratio, prefix length, prompts, max concurrency, request rate with
// gamma-distributed gaps of shape burstiness, rescaled to end at n/rate as
// vLLM does).
//
// Switchboard's seed text names the four kinds of traffic but not their
// shapes; these are this package's choices, each kind at load levels of 1,
// 5 and 16 concurrent users (the seed quotes stock SGLang at 5 and 16
// users). A user sends its next request (or burst) when the previous one
// has finished, with no think time, and outputs have fixed lengths
// (ignore_eos) so both servers of a comparison generate the same tokens.
//
//   - agent: two sessions per user of eight turns over /v1/chat/completions;
//     the first user turn is 2,048 tokens (the task), each later one 512
//     ±25% (a tool result); 192 tokens generated per turn. Every turn
//     resends the whole conversation: earlier user turns and the
//     assistant's actual replies.
//   - chat: four bursts per user of four chats sent at once (512 ±50%
//     tokens in, 256 ±50% out), so 4×users are in flight.
//   - prefix: sixteen completions per user, each one of four shared
//     prefixes of 2,048 tokens followed by 256 ±50% own tokens, 128 out.
//   - long: two completions per user of 32,000 ±20% tokens, 256 out.
//   - mixed (the workload "switchboard"): each user runs one agent
//     session, two chat bursts, four prefix requests and one long context in
//     a seeded random order, and each request keeps its kind, so the TTFT
//     rule applies per kind within the mix.
//
// # Scores
//
// Compare(baseline, candidate) recomputes every metric from the records of
// both runs (after checking they replayed the same spec and prompts) and
// applies each arena's rule to the phases:
//
//   - Switchboard: per phase, output throughput over the baseline's, times
//     a latency factor, the smallest over the phase's kinds of
//     min(1, 1.5·baseline p90 TTFT / candidate p90 TTFT); the score is the
//     geometric mean over phases (load levels). The seed calls its latency
//     rule a draft and says only that throughput "counts for less" past
//     1.5×; proportional reduction is this package's reading.
//   - LowBArena: s, the geometric mean of output-throughput ratios; the
//     speed gate s − 1.645·0.05/√n ≥ 0.95; the length change L of
//     generated tokens and its ±10% gate; and √(s / max(1, 1+L)), the
//     speed part of its E (the memory ratio needs the server's accounts).
//   - FlagOS: per scenario, 100 × (total-token throughput gain) × 70%.
//
// WritePlots draws output throughput against load and the TTFT CDF with
// gonum/plot.
package bench
